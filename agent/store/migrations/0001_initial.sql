-- reviewloop schema, version 1. Applied by `reviewloop db upgrade` (and on start).

CREATE TABLE IF NOT EXISTS model_versions (
    id               bigserial PRIMARY KEY,
    name             text NOT NULL UNIQUE,
    stage            text NOT NULL DEFAULT 'candidate'
                     CHECK (stage IN ('candidate', 'production', 'archived', 'rejected')),
    base_model       text NOT NULL,
    adapter_path     text,
    serving_name     text,            -- the name an OpenAI-compatible server knows it by (vLLM LoRA name)
    dataset_snapshot text,
    metrics          jsonb NOT NULL DEFAULT '{}'::jsonb,
    parent_id        bigint REFERENCES model_versions (id),
    created_at       timestamptz NOT NULL DEFAULT now(),
    promoted_at      timestamptz
);
-- at most one version in service at a time
CREATE UNIQUE INDEX IF NOT EXISTS model_versions_one_production
    ON model_versions ((stage)) WHERE stage = 'production';

CREATE TABLE IF NOT EXISTS webhook_events (
    id               bigserial PRIMARY KEY,
    received_at      timestamptz NOT NULL DEFAULT now(),
    event_kind       text NOT NULL,
    idempotency_key  text,
    webhook_uuid     text,
    project_id       bigint,
    project_path     text,
    mr_iid           integer,
    head_sha         text,
    action           text,
    status           text NOT NULL DEFAULT 'received'
                     CHECK (status IN ('received', 'queued', 'ignored', 'duplicate', 'processed', 'failed')),
    reason           text,
    payload          jsonb NOT NULL,
    job_id           bigint
);
CREATE UNIQUE INDEX IF NOT EXISTS webhook_events_idempotency
    ON webhook_events (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS webhook_events_mr ON webhook_events (project_id, mr_iid, head_sha);

CREATE TABLE IF NOT EXISTS reviews (
    id                bigserial PRIMARY KEY,
    source            text NOT NULL CHECK (source IN ('gitlab', 'local', 'diff', 'replay', 'eval', 'demo')),
    project           text NOT NULL DEFAULT '',
    mr_iid            integer,
    title             text NOT NULL DEFAULT '',
    base_sha          text,
    start_sha         text,
    head_sha          text,
    previous_head_sha text,
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'done', 'failed', 'superseded')),
    error             text,
    strategy          jsonb,
    strategy_text     text,
    strategy_source   text,           -- 'model', 'rule', 'fallback'
    model_version_id  bigint REFERENCES model_versions (id),
    is_shadow         boolean NOT NULL DEFAULT false,
    parent_review_id  bigint REFERENCES reviews (id) ON DELETE CASCADE,
    trace_id          text,
    summary_note_id   bigint,
    not_reviewed      jsonb NOT NULL DEFAULT '[]'::jsonb,   -- [{path, reason}]
    snapshot          jsonb,          -- title, description, diff, files at head: the replay environment
    stats             jsonb NOT NULL DEFAULT '{}'::jsonb,
    cost_tokens       integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz
);
-- one review per (project, MR, head commit) from GitLab: the deduplication beyond the idempotency key
CREATE UNIQUE INDEX IF NOT EXISTS reviews_one_per_head
    ON reviews (project, mr_iid, head_sha) WHERE source = 'gitlab' AND NOT is_shadow;
CREATE INDEX IF NOT EXISTS reviews_created ON reviews (created_at);

CREATE TABLE IF NOT EXISTS findings (
    id                   bigserial PRIMARY KEY,
    review_id            bigint NOT NULL REFERENCES reviews (id) ON DELETE CASCADE,
    fingerprint          text NOT NULL,
    path                 text NOT NULL,
    line                 integer NOT NULL,
    end_line             integer NOT NULL,
    category             text NOT NULL
                         CHECK (category IN ('security', 'architecture', 'code_quality', 'test_impact')),
    severity             text NOT NULL CHECK (severity IN ('info', 'low', 'medium', 'high', 'critical')),
    title                text NOT NULL,
    body                 text NOT NULL,
    evidence             text NOT NULL DEFAULT '',
    reviewer             text NOT NULL,
    rule                 text NOT NULL DEFAULT '',
    verdict              text NOT NULL
                         CHECK (verdict IN ('REAL', 'FALSE_POSITIVE', 'DUPLICATE', 'NEEDS_HUMAN_REVIEW')),
    verdict_reason       text NOT NULL,
    discussion_id        text,          -- GitLab discussion id once posted
    note_id              bigint,        -- GitLab note id of the first note
    position_fallback    boolean NOT NULL DEFAULT false,
    posted_at            timestamptz,
    thread_state         text,          -- 'open', 'resolved', 'outdated'
    created_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (review_id, fingerprint)
);
CREATE INDEX IF NOT EXISTS findings_fingerprint ON findings (fingerprint);
CREATE INDEX IF NOT EXISTS findings_note ON findings (note_id);
CREATE INDEX IF NOT EXISTS findings_discussion ON findings (discussion_id);

-- One vote per user per finding; the latest wins (an upsert on the unique key).
CREATE TABLE IF NOT EXISTS feedback (
    id           bigserial PRIMARY KEY,
    finding_id   bigint NOT NULL REFERENCES findings (id) ON DELETE CASCADE,
    user_key     text NOT NULL,        -- 'gitlab:<user id>', 'api:<token name>', 'outcome:thread'
    source       text NOT NULL CHECK (source IN ('emoji', 'api', 'reply', 'thread_outcome', 'dashboard')),
    value        smallint NOT NULL CHECK (value IN (-1, 0, 1)),   -- 0 = vote withdrawn
    comment      text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (finding_id, user_key)
);

CREATE TABLE IF NOT EXISTS spans (
    trace_id        text NOT NULL,
    span_id         text NOT NULL,
    parent_span_id  text,
    name            text NOT NULL,
    kind            text NOT NULL,
    start_time      timestamptz NOT NULL,
    end_time        timestamptz NOT NULL,
    status_code     text NOT NULL,
    attributes      jsonb NOT NULL DEFAULT '{}'::jsonb,
    events          jsonb NOT NULL DEFAULT '[]'::jsonb,
    review_id       bigint,
    PRIMARY KEY (trace_id, span_id)
);
CREATE INDEX IF NOT EXISTS spans_review ON spans (review_id);

CREATE TABLE IF NOT EXISTS training_runs (
    id                bigserial PRIMARY KEY,
    kind              text NOT NULL,   -- 'dataset', 'sft', 'dpo', 'kto', 'rl', 'eval', 'retrain'
    status            text NOT NULL DEFAULT 'running'
                      CHECK (status IN ('running', 'succeeded', 'failed', 'skipped')),
    reason            text,
    config            jsonb NOT NULL DEFAULT '{}'::jsonb,
    metrics           jsonb NOT NULL DEFAULT '{}'::jsonb,
    step_metrics      jsonb NOT NULL DEFAULT '[]'::jsonb,
    model_version_id  bigint REFERENCES model_versions (id),
    parent_run_id     bigint REFERENCES training_runs (id),
    started_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);

CREATE TABLE IF NOT EXISTS api_tokens (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    token_hash  text NOT NULL UNIQUE,   -- sha256 of the token; the token itself is never stored
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
