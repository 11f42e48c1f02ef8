"""Retention: webhook payloads and finished queue jobs do not pile up forever.

Every delivery keeps its payload (a merge request hook is about 5 KB) and every review leaves a
finished procrastinate job with its event rows. For a while they matter: an event row answers a
re-delivery with 'duplicate' (GitLab retries within hours), and both show what happened to a
delivery. After `REVIEWLOOP_RETENTION_DAYS` (default 30; 0 keeps everything) they are only weight,
and a daily maintenance task deletes them. Reviews, findings, feedback and spans are never pruned
here: they are the training data.

An event still waiting for its review ('received', 'queued') is kept whatever its age, and so is a
job not yet finished. Deletes go in batches so that no statement holds its locks for long.
"""

from __future__ import annotations

import logging

import procrastinate

from api.db import DbPool

logger = logging.getLogger(__name__)

RETENTION_BATCH_ROWS = 5_000  # rows per DELETE: short transactions, little WAL per commit
PENDING_EVENT_STATUSES = ("received", "queued")

PRUNE_EVENTS_SQL = """
DELETE FROM webhook_events
 WHERE id IN (SELECT id FROM webhook_events
               WHERE received_at < now() - make_interval(days => %(days)s)
                 AND status <> ALL(%(pending)s)
               ORDER BY id
               LIMIT %(batch)s)
"""


async def prune_webhook_events(pool: DbPool, *, older_than_days: int) -> int:
    """Delete handled webhook events received more than `older_than_days` ago; returns how many."""
    deleted = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(
                PRUNE_EVENTS_SQL,
                {"days": older_than_days, "pending": list(PENDING_EVENT_STATUSES), "batch": RETENTION_BATCH_ROWS},
            )
            batch = cur.rowcount
        deleted += batch
        if batch < RETENTION_BATCH_ROWS:
            return deleted


async def prune_history(app: procrastinate.App, pool: DbPool, *, older_than_days: int) -> int:
    """The daily retention pass: old webhook events, then finished jobs (any final state); returns
    how many events it deleted (procrastinate's job delete does not count its rows)."""
    if older_than_days < 1:
        raise ValueError(f"older_than_days must be at least 1, got {older_than_days}")
    events = await prune_webhook_events(pool, older_than_days=older_than_days)
    await app.job_manager.delete_old_jobs(
        nb_hours=older_than_days * 24, include_failed=True, include_cancelled=True, include_aborted=True
    )
    logger.info("retention pass", extra={"webhook_events_deleted": events, "older_than_days": older_than_days})
    return events
