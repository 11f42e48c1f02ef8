-- The webhook intake of a reviewable merge request event, in one statement (one round trip).
--
-- Until this migration the API did the same in ~11 round trips (advisory lock, insert, dedupe
-- query, cancel, procrastinate's defer, update, BEGIN/COMMIT, the pool's check); at 200 events/s
-- on two cores those round trips were most of the API's CPU. The logic is unchanged:
--
-- 1. A transaction-scoped advisory lock per MR serialises intake of one MR, so every check below
--    sees each earlier delivery's committed row (READ COMMITTED: each statement of a VOLATILE
--    plpgsql function takes a fresh snapshot, after the lock was granted).
-- 2. An Idempotency-Key already stored → 'duplicate', nothing inserted.
-- 3. The same (project, MR, head commit) already queued or processed → the event is stored as
--    'duplicate' with the earlier event's id in its reason.
-- 4. Otherwise the MR's pending (not running) jobs are cancelled and their events marked superseded,
--    the review job is inserted through procrastinate's own versioned SQL API
--    (procrastinate_defer_jobs_v1, what its Python `defer_async` calls), and the event row is
--    inserted once, already 'queued' with its job id.
--
-- Called in autocommit: the statement is the transaction, so the event row and its job are
-- committed together or not at all. A queueing-lock conflict (a job deferred outside intake)
-- raises unique_violation and rolls the whole delivery back; the API answers 503 and GitLab's retry
-- supersedes that job.

CREATE OR REPLACE FUNCTION reviewloop_enqueue_review(
    _event_kind text,
    _idempotency_key text,
    _webhook_uuid text,
    _project_id bigint,
    _project_path text,
    _mr_iid bigint,        -- the column is integer: a larger iid fails the insert (22003), a 400
    _head_sha text,
    _action text,
    _payload jsonb,
    _lock_key text,
    _queue_name text,
    _task_name text,
    _priority integer,
    _job_args jsonb,
    OUT status text,
    OUT event_id bigint,
    OUT job_id bigint,
    OUT reason text,
    OUT superseded bigint[]
)
    LANGUAGE plpgsql
    VOLATILE
AS $$
DECLARE
    _earlier record;
    _stored bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(_lock_key, 0));

    IF _idempotency_key IS NOT NULL THEN
        SELECT e.id, e.status, e.job_id INTO _earlier
          FROM webhook_events e WHERE e.idempotency_key = _idempotency_key;
        IF FOUND THEN
            status := 'duplicate';
            event_id := _earlier.id;
            job_id := _earlier.job_id;
            reason := format('Idempotency-Key already received (event %s, %s)', _earlier.id, _earlier.status);
            RETURN;
        END IF;
    END IF;

    event_id := nextval(pg_get_serial_sequence('webhook_events', 'id'));

    SELECT e.id INTO _earlier
      FROM webhook_events e
     WHERE e.project_id = _project_id AND e.mr_iid = _mr_iid AND e.head_sha = _head_sha
       AND e.status IN ('queued', 'processed')
     ORDER BY e.id LIMIT 1;
    IF FOUND THEN
        status := 'duplicate';
        reason := format('head %s already queued by event %s', left(_head_sha, 12), _earlier.id);
    ELSE
        SELECT array_agg(j.id ORDER BY j.id) INTO superseded
          FROM (SELECT p.id FROM procrastinate_jobs p
                 WHERE p.queueing_lock = _lock_key AND p.status = 'todo'
                 FOR UPDATE) j;
        IF superseded IS NOT NULL THEN
            PERFORM procrastinate_cancel_job_v1(cancelled, false, false) FROM unnest(superseded) AS cancelled;
            UPDATE webhook_events e
               SET status = 'ignored', reason = format('superseded by event %s (a newer push)', event_id)
             WHERE e.job_id = ANY(superseded) AND e.status = 'queued';
        END IF;
        job_id := (procrastinate_defer_jobs_v1(ARRAY[ROW(
            _queue_name, _task_name, _priority, _lock_key, _lock_key,
            _job_args || jsonb_build_object('event_id', event_id), NULL::timestamptz
        )]::procrastinate_job_to_defer_v1[]))[1];
        status := 'queued';
        reason := 'review on ' || _action;
    END IF;

    INSERT INTO webhook_events (id, event_kind, idempotency_key, webhook_uuid, project_id, project_path,
                                mr_iid, head_sha, action, status, reason, payload, job_id)
    VALUES (event_id, _event_kind, _idempotency_key, _webhook_uuid, _project_id, _project_path,
            _mr_iid, _head_sha, _action, status, reason, _payload, job_id)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id INTO _stored;
    IF _stored IS NULL THEN
        -- the key was stored meanwhile by a delivery for another MR (another lock): undo the job
        RAISE EXCEPTION 'Idempotency-Key % was stored concurrently', _idempotency_key
            USING ERRCODE = 'serialization_failure';
    END IF;
END;
$$;

-- Superseding a pending review finds its event by job id; without this index that UPDATE read
-- the whole table (found by the webhook benchmark: Postgres CPU per event grew with the table).
CREATE INDEX IF NOT EXISTS webhook_events_job ON webhook_events (job_id) WHERE job_id IS NOT NULL;
-- Shadow reviews are read (and cascade-deleted) by their parent.
CREATE INDEX IF NOT EXISTS reviews_parent ON reviews (parent_review_id) WHERE parent_review_id IS NOT NULL;
-- The daily retention pass (api/retention.py) finds old events by time.
CREATE INDEX IF NOT EXISTS webhook_events_received ON webhook_events (received_at);
