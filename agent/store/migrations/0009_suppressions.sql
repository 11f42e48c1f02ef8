-- Votes act in their own scope (issue 40). People's 👎 silence a rule only where they gave them: a
-- suppression is (project, rule, path scope), derived from the votes themselves (agent.store.suppressions),
-- so its who, when and why are the votes'. A maintainer lifts one here: votes in that scope from before
-- the lift no longer count, and people's later votes can raise it again.
CREATE TABLE IF NOT EXISTS suppression_lifts (
    id bigserial PRIMARY KEY,
    project text NOT NULL,
    rule text NOT NULL,
    path_scope text NOT NULL,
    lifted_by text NOT NULL,                 -- the person (a feedback user key: 'token:<name>')
    reason text NOT NULL DEFAULT '',
    lifted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS suppression_lifts_scope ON suppression_lifts (project, rule, path_scope, lifted_at DESC);
