-- API tokens scoped to projects: a token with `projects` reads, and votes on, the reviews of those
-- projects only (reviews.project: GitLab's numeric project id as text). NULL is an admin token that
-- reaches every project, as every token did before this migration.
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS projects text[];
