"""The daily retention pass, run by a real worker on a real Postgres: old handled webhook events and
old finished jobs go; pending events, unfinished jobs and anything recent stay."""

from __future__ import annotations

import pytest
from service_harness import FAST_QUEUE, RecordingReview, drain_queue, rows, scalar

from api import retention
from api.worker import RETENTION_TASK, QueueConfig, create_queue_app

DEFER_SQL = """
SELECT (procrastinate_defer_jobs_v1(ARRAY[ROW(%s, %s, 0, NULL, NULL, %s::jsonb, NULL::timestamptz)]
        ::procrastinate_job_to_defer_v1[]))[1]
"""


def add_event(dsn: str, *, key: str, status: str, age_days: int) -> None:
    rows(
        dsn,
        "INSERT INTO webhook_events (event_kind, idempotency_key, status, payload, received_at)"
        " VALUES ('merge_request', %s, %s, '{}', now() - make_interval(days => %s)) RETURNING id",
        key,
        status,
        age_days,
    )


def add_job(dsn: str, *, status: str, age_days: int) -> int:
    job_id = int(scalar(dsn, DEFER_SQL, "reviews", "review_merge_request", '{"project": "1", "mr_iid": 1}'))
    if status != "todo":
        rows(dsn, "UPDATE procrastinate_jobs SET status = %s WHERE id = %s RETURNING id", status, job_id)
    rows(
        dsn,
        "UPDATE procrastinate_events SET at = now() - make_interval(days => %s) WHERE job_id = %s RETURNING id",
        age_days,
        job_id,
    )
    return job_id


def test_the_retention_task_prunes_only_old_finished_history(service_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "RETENTION_BATCH_ROWS", 2)  # several batches, as on a big table
    for i, status in enumerate(("processed", "duplicate", "ignored", "failed", "processed")):
        add_event(service_dsn, key=f"old-{i}", status=status, age_days=45)
    add_event(service_dsn, key="old-queued", status="queued", age_days=45)  # its review has not run yet
    add_event(service_dsn, key="old-received", status="received", age_days=45)
    add_event(service_dsn, key="recent", status="processed", age_days=3)
    old_done = add_job(service_dsn, status="succeeded", age_days=45)
    old_failed = add_job(service_dsn, status="failed", age_days=45)
    recent_done = add_job(service_dsn, status="succeeded", age_days=3)
    old_pending = add_job(service_dsn, status="todo", age_days=45)
    rows(service_dsn, DEFER_SQL + " AS id", "maintenance", RETENTION_TASK, '{"timestamp": 0}')

    drain_queue(
        service_dsn, RecordingReview(service_dsn), config=QueueConfig(**{**vars(FAST_QUEUE), "max_attempts": 1})
    )

    kept = {key for (key,) in rows(service_dsn, "SELECT idempotency_key FROM webhook_events")}
    assert kept == {"old-queued", "old-received", "recent"}
    jobs = {job_id for (job_id,) in rows(service_dsn, "SELECT id FROM procrastinate_jobs")}
    assert old_done not in jobs and old_failed not in jobs
    assert {recent_done, old_pending} <= jobs
    (status,) = rows(service_dsn, "SELECT status::text FROM procrastinate_jobs WHERE task_name = %s", RETENTION_TASK)[0]
    assert status == "succeeded"


def test_retention_is_a_daily_maintenance_job_unless_turned_off() -> None:
    app = create_queue_app(QueueConfig())
    [periodic] = [p for p in app.periodic_registry.periodic_tasks.values() if p.task.name == RETENTION_TASK]
    assert periodic.cron == "17 3 * * *" and app.tasks[RETENTION_TASK].queue == "maintenance"
    assert RETENTION_TASK not in create_queue_app(QueueConfig(retention_days=0)).tasks
