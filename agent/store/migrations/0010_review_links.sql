-- The merge request's own address as GitLab answered it (issue 42): the dashboard links each review to
-- its merge request and names the project by its path (from the address), not by GitLab's numeric id.
-- Empty for local, diff and replay reviews, which have no merge request page.
ALTER TABLE reviews ADD COLUMN IF NOT EXISTS web_url text NOT NULL DEFAULT '';
