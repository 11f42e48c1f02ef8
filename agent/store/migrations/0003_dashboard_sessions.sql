-- issue 11: dashboard sessions live on the server. The cookie holds a random session id (never the
-- API token); the row holds its sha256, who logged in, with which token (its sha256, so revoking the
-- token ends the session), and when the session expires. Logout sets revoked_at.
CREATE TABLE IF NOT EXISTS dashboard_sessions (
    id_hash     text PRIMARY KEY,
    token_name  text NOT NULL,
    token_hash  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
CREATE INDEX IF NOT EXISTS dashboard_sessions_expires_at ON dashboard_sessions (expires_at);
