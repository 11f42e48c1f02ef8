-- One person, one voice (issue 21). A vote counts for the person behind it, not for how it was sent:
-- a GitLab user is 'gitlab:<user id>'; an API token is 'token:<token name>' whether it votes through
-- the API or the dashboard, and the `user` the feedback API was told is recorded in `claimed_user`,
-- never an identity. `feedback.user_key` stays the one identity column, so "one vote per person per
-- finding, the latest wins" is still the table's unique key.
ALTER TABLE reviews ADD COLUMN IF NOT EXISTS mr_author_id bigint;   -- GitLab's MR author, as its API answered
ALTER TABLE feedback ADD COLUMN IF NOT EXISTS claimed_user text;
-- the voter is the author of the merge request the finding was posted on (their own review)
ALTER TABLE feedback ADD COLUMN IF NOT EXISTS voter_is_author boolean NOT NULL DEFAULT false;

-- Earlier token votes: 'api:<name>' and 'api:<name>:<user>' (one row per claimed user) and
-- 'dashboard:<name>' become the token's one vote per finding, the latest of them.
ALTER TABLE feedback ADD COLUMN fold_key text;
UPDATE feedback fb SET fold_key = 'token:' || coalesce(
        (SELECT t.name FROM api_tokens t
          WHERE fb.user_key = 'api:' || t.name OR starts_with(fb.user_key, 'api:' || t.name || ':')
          ORDER BY length(t.name) DESC LIMIT 1),
        split_part(substr(fb.user_key, 5), ':', 1))   -- environment tokens: their names hold no ':'
 WHERE starts_with(fb.user_key, 'api:');
-- 'api:<name>:<user>': the user starts after 'api:<name>:'
UPDATE feedback SET claimed_user = nullif(substr(user_key, length(fold_key) - length('token:') + length('api:') + 2), '')
 WHERE fold_key IS NOT NULL;
UPDATE feedback SET fold_key = 'token:' || substr(user_key, 11) WHERE starts_with(user_key, 'dashboard:');
DELETE FROM feedback fb USING (
    SELECT id, row_number() OVER (PARTITION BY finding_id, fold_key ORDER BY updated_at DESC, id DESC) AS rn
      FROM feedback WHERE fold_key IS NOT NULL) older
 WHERE fb.id = older.id AND older.rn > 1;
UPDATE feedback SET user_key = fold_key WHERE fold_key IS NOT NULL;
ALTER TABLE feedback DROP COLUMN fold_key;
