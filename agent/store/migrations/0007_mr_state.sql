-- The merge request as it stands after each push (issue 40, H2): the findings still open on it
-- (threads, findings listed past the comment budget, findings held for a person) and the files not
-- analysed in full, across all its pushes. Each review of a push records the state it left, so the
-- next push's summary starts from it and says what changed since (new, fixed).
ALTER TABLE reviews ADD COLUMN IF NOT EXISTS mr_state jsonb;
