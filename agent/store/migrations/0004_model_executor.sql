-- Which executor a strategy model version was trained and gated for.
--
-- RL and the promotion gate score plans by running them with the analyzer-only reviewers (the replay
-- environment's fixed executor), while reviews in production with a model run model-driven reviewer
-- loops. A plan that is best for one need not be best for the other, so each version says which one
-- it was optimised for: 'analyzer-only' or 'model-driven'. NULL: not recorded (versions from before
-- this column, and SFT/DPO/KTO from reviews, whose executor was whatever production ran).
ALTER TABLE model_versions ADD COLUMN IF NOT EXISTS executor text
    CHECK (executor IS NULL OR executor IN ('analyzer-only', 'model-driven'));
