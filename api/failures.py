"""Reviews that failed: listed with their reason and attempts, and retried on request.

A merge-request review can fail before any `reviews` row exists (GitLab unreachable, a token GitLab
refuses), so failures are read from what always exists: the webhook event and its procrastinate job.
A review is shown here when its event was marked failed (the queue gave up, or the error was not
retryable) or its job is waiting for a retry after a failed attempt. A retry defers a new job with
the same per-merge-request locks as the webhook's (`reviewloop_enqueue_review`), so a retry never
runs beside, or queues behind, another review of the same merge request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import procrastinate
from procrastinate import exceptions as queue_errors

from api.db import DbPool
from api.worker import REVIEW_TASK, review_lock
from reviewers.kernel.errors import InputError

FAILED_REVIEWS_SQL = """
SELECT e.id AS event_id, e.project_id, e.project_path, e.mr_iid, e.head_sha, e.action, e.status,
       e.reason, e.received_at, j.id AS job_id, j.status::text AS job_status, coalesce(j.attempts, 0) AS attempts
  FROM webhook_events e
  LEFT JOIN procrastinate_jobs j ON j.id = e.job_id
 WHERE e.mr_iid IS NOT NULL
   AND (e.status = 'failed' OR j.status = 'failed' OR (j.status = 'todo' AND j.attempts > 0))
   AND (%(projects)s::text[] IS NULL OR e.project_id::text = ANY(%(projects)s::text[]))
 ORDER BY e.id DESC
 LIMIT %(limit)s
"""


@dataclass(frozen=True)
class FailedReview:
    event_id: int
    project_id: int | None
    project_path: str | None
    mr_iid: int
    head_sha: str | None
    reason: str
    attempts: int
    state: str  # "failed" (given up) or "retrying" (a retry is scheduled)
    received_at: datetime

    @property
    def mr_label(self) -> str:
        return f"{self.project_path or self.project_id}!{self.mr_iid}"


def _failed_review(row: dict[str, Any]) -> FailedReview:
    retrying = row["job_status"] == "todo" and row["status"] != "failed"
    return FailedReview(
        event_id=int(row["event_id"]),
        project_id=row["project_id"],
        project_path=row["project_path"],
        mr_iid=int(row["mr_iid"]),
        head_sha=row["head_sha"],
        reason=row["reason"] or "the review failed (no reason was recorded)",
        attempts=int(row["attempts"]),
        state="retrying" if retrying else "failed",
        received_at=row["received_at"],
    )


async def list_failed_reviews(
    pool: DbPool, *, projects: list[str] | None = None, limit: int = 50
) -> list[FailedReview]:
    """Failed and retrying merge-request reviews, newest first; `projects` limits to those ids."""
    async with pool.connection() as conn:
        cur = await conn.execute(FAILED_REVIEWS_SQL, {"projects": projects, "limit": limit})
        rows = await cur.fetchall()
    return [_failed_review(row) for row in rows]


async def retry_review(
    pool: DbPool, queue: procrastinate.App, event_id: int, *, by: str, projects: list[str] | None = None
) -> int:
    """Defer a new review job for a failed event; returns the job id. InputError when the event is not
    a failed review the caller may see, or when a review of that merge request is already waiting."""
    failures = {f.event_id: f for f in await list_failed_reviews(pool, projects=projects, limit=10_000)}
    failure = failures.get(event_id)
    if failure is None or failure.project_id is None:
        raise InputError(f"event {event_id} is not a failed review you can retry")
    lock = review_lock(project_id=failure.project_id, mr_iid=failure.mr_iid)
    task = queue.configure_task(REVIEW_TASK, lock=lock, queueing_lock=lock)
    try:
        job_id = await task.defer_async(
            project=str(failure.project_id), mr_iid=failure.mr_iid, head_sha=failure.head_sha, event_id=event_id
        )
    except queue_errors.AlreadyEnqueued:
        raise InputError(f"a review of {failure.mr_label} is already waiting in the queue") from None
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE webhook_events SET status = 'queued', job_id = %s, reason = %s WHERE id = %s",
            (job_id, f"retried by {by} after: {failure.reason}"[:1000], event_id),
        )
    return job_id
