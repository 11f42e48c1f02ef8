"""Persisting what a webhook asked for: the event row, its review job, or a feedback row.

A reviewable event is stored and its job deferred in ONE transaction, on one connection:
procrastinate 3.x's `task.configure(connection=conn)` runs its `procrastinate_defer_jobs_v1` insert on
a connection we own ("the user is responsible for committing"), so either both the
`webhook_events` row and the job exist, or neither does, and we answer 202 only after COMMIT.

Deduplication, in the same transaction:
- `Idempotency-Key` (GitLab keeps it across retries of one delivery): `INSERT ... ON CONFLICT DO
  NOTHING` on the unique index `webhook_events_idempotency`. Concurrent deliveries of one key block
  on that index until the first commits, then find its row: exactly one job.
- (project, MR, head commit): a transaction-scoped advisory lock per MR serialises intake of one MR,
  so the second delivery of a head (under a different key) sees the first's committed row.
- A newer push supersedes an older *pending* job of the same MR: it is cancelled and its event
  marked, then the new job takes the queueing lock. A running review is left to finish.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import procrastinate
from psycopg.types.json import Jsonb

from api.db import DbConnection, DbPool
from api.triage import Decision, Ignore, ReplyInDiscussion, ReviewRequest, VoteOnNote
from api.worker import REVIEW_TASK

logger = logging.getLogger(__name__)

StoredStatus = Literal["queued", "ignored", "duplicate", "processed", "failed"]
# statuses of an earlier event for the same head that make a new delivery a duplicate
LIVE_STATUSES = ("queued", "processed")


@dataclass(frozen=True)
class Delivery:
    """One HTTP delivery: its headers that matter, and its decoded body."""

    event_kind: str
    idempotency_key: str | None
    webhook_uuid: str | None
    payload: dict[str, Any]
    project_id: int | None = None
    project_path: str | None = None


@dataclass(frozen=True)
class IntakeResult:
    status: StoredStatus
    event_id: int | None
    job_id: int | None = None
    reason: str | None = None


async def _insert_event(
    conn: DbConnection,
    delivery: Delivery,
    *,
    status: StoredStatus | Literal["received"],
    reason: str | None = None,
    mr_iid: int | None = None,
    head_sha: str | None = None,
    action: str | None = None,
) -> int | None:
    """Insert the event row; None when its idempotency key was already stored."""
    cur = await conn.execute(
        """
        INSERT INTO webhook_events (event_kind, idempotency_key, webhook_uuid, project_id, project_path,
                                    mr_iid, head_sha, action, status, reason, payload)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id
        """,
        (
            delivery.event_kind,
            delivery.idempotency_key,
            delivery.webhook_uuid,
            delivery.project_id,
            delivery.project_path,
            mr_iid,
            head_sha,
            action,
            status,
            reason,
            Jsonb(delivery.payload),
        ),
    )
    row = await cur.fetchone()
    return int(row["id"]) if row else None


async def _existing_by_key(conn: DbConnection, key: str) -> IntakeResult:
    cur = await conn.execute("SELECT id, status, job_id FROM webhook_events WHERE idempotency_key = %s", (key,))
    row = await cur.fetchone()
    event_id = int(row["id"]) if row else None
    job_id = int(row["job_id"]) if row and row["job_id"] is not None else None
    earlier = row["status"] if row else "unknown"
    return IntakeResult(
        "duplicate", event_id, job_id, reason=f"Idempotency-Key already received (event {event_id}, {earlier})"
    )


async def record_event(
    pool: DbPool, delivery: Delivery, *, status: StoredStatus, reason: str, mr_iid: int | None = None
) -> IntakeResult:
    """Store an event we do not act on (ignored), keeping the audit trail; duplicates store nothing."""
    async with pool.connection() as conn, conn.transaction():
        event_id = await _insert_event(conn, delivery, status=status, reason=reason, mr_iid=mr_iid)
        if event_id is None and delivery.idempotency_key:
            return await _existing_by_key(conn, delivery.idempotency_key)
    return IntakeResult(status, event_id, reason=reason)


async def _cancel_pending(conn: DbConnection, *, lock_key: str, superseded_by: int) -> list[int]:
    """Cancel the MR's pending (not yet running) review jobs and mark their events superseded."""
    cur = await conn.execute(
        "SELECT id FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo' FOR UPDATE", (lock_key,)
    )
    job_ids = [int(r["id"]) for r in await cur.fetchall()]
    for job_id in job_ids:
        await conn.execute("SELECT procrastinate_cancel_job_v1(%s, false, false)", (job_id,))
    if job_ids:
        await conn.execute(
            "UPDATE webhook_events SET status = 'ignored', reason = %s WHERE job_id = ANY(%s) AND status = 'queued'",
            (f"superseded by event {superseded_by} (a newer push)", job_ids),
        )
    return job_ids


async def _defer_review(conn: DbConnection, queue: procrastinate.App, request: ReviewRequest, event_id: int) -> int:
    """Insert the job on our connection, inside our transaction (procrastinate's `connection=`)."""
    deferrer = queue.configure_task(REVIEW_TASK, connection=conn, lock=request.lock_key, queueing_lock=request.lock_key)
    # No savepoint: under the MR's advisory lock, with its pending jobs just cancelled, the queueing
    # lock can only be taken by a job deferred outside intake; then AlreadyEnqueued rolls the whole
    # delivery back, the route answers 503, and GitLab's retry supersedes that job.
    return await deferrer.defer_async(
        project=str(request.project_id), mr_iid=request.mr_iid, head_sha=request.head_sha, event_id=event_id
    )


async def enqueue_review(
    pool: DbPool, queue: procrastinate.App, delivery: Delivery, request: ReviewRequest
) -> IntakeResult:
    """Store the event and defer its review atomically, or report why it is a duplicate."""
    async with pool.connection() as conn, conn.transaction():
        # serialise intake per MR: the head-commit check below then sees every committed delivery
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (request.lock_key,))
        cur = await conn.execute(
            """
            WITH inserted AS (
                INSERT INTO webhook_events (event_kind, idempotency_key, webhook_uuid, project_id, project_path,
                                            mr_iid, head_sha, action, status, payload)
                VALUES (%(kind)s, %(key)s, %(uuid)s, %(project_id)s, %(path)s, %(iid)s, %(head)s, %(action)s,
                        'received', %(payload)s)
                ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
                RETURNING id
            )
            SELECT (SELECT id FROM inserted) AS id,
                   -- the statement's snapshot does not include its own insert: no need to exclude it
                   (SELECT id FROM webhook_events
                     WHERE project_id = %(project_id)s AND mr_iid = %(iid)s AND head_sha = %(head)s
                       AND status = ANY(%(live)s)
                     ORDER BY id LIMIT 1) AS earlier
            """,
            {
                "kind": delivery.event_kind,
                "key": delivery.idempotency_key,
                "uuid": delivery.webhook_uuid,
                "project_id": request.project_id,
                "path": request.project_path,
                "iid": request.mr_iid,
                "head": request.head_sha,
                "action": request.trigger,
                "payload": Jsonb(delivery.payload),
                "live": list(LIVE_STATUSES),
            },
        )
        row = await cur.fetchone()
        assert row is not None
        if row["id"] is None:
            assert delivery.idempotency_key is not None
            return await _existing_by_key(conn, delivery.idempotency_key)
        event_id = int(row["id"])
        if row["earlier"] is not None:
            reason = f"head {request.head_sha[:12]} already queued by event {row['earlier']}"
            await conn.execute(
                "UPDATE webhook_events SET status = 'duplicate', reason = %s WHERE id = %s", (reason, event_id)
            )
            return IntakeResult("duplicate", event_id, reason=reason)
        superseded = await _cancel_pending(conn, lock_key=request.lock_key, superseded_by=event_id)
        job_id = await _defer_review(conn, queue, request, event_id)
        await conn.execute(
            "UPDATE webhook_events SET status = 'queued', job_id = %s, reason = %s WHERE id = %s",
            (job_id, f"review on {request.trigger}", event_id),
        )
    if superseded:
        logger.info("pending review superseded", extra={"cancelled_jobs": superseded})
    return IntakeResult("queued", event_id, job_id)


FINDING_BY_NOTE_SQL = """
SELECT id FROM findings
 WHERE note_id = %(note_id)s
    OR (%(by_discussion)s AND discussion_id = %(discussion_id)s)
 ORDER BY id LIMIT 1
"""


async def _finding_for_vote(conn: DbConnection, vote: VoteOnNote, *, bot_user_id: int | None) -> int | None:
    """The finding whose thread the awarded note opened (the first finding that posted it).

    A thumb on another note of our discussion counts only when that note is ours (bot-authored).
    """
    by_discussion = bool(vote.discussion_id and bot_user_id is not None and vote.note_author_id == bot_user_id)
    cur = await conn.execute(
        FINDING_BY_NOTE_SQL,
        {"note_id": vote.note_id, "by_discussion": by_discussion, "discussion_id": vote.discussion_id},
    )
    row = await cur.fetchone()
    return int(row["id"]) if row else None


async def record_vote(pool: DbPool, delivery: Delivery, vote: VoteOnNote, *, bot_user_id: int | None) -> IntakeResult:
    """Award → upsert +1/-1 (latest wins); revoke → 0, only if the user's vote was that polarity."""
    async with pool.connection() as conn, conn.transaction():
        finding_id = await _finding_for_vote(conn, vote, bot_user_id=bot_user_id)
        if finding_id is None:
            reason = f"note {vote.note_id} is not one of our findings"
            event_id = await _insert_event(conn, delivery, status="ignored", reason=reason)
            if event_id is None and delivery.idempotency_key:
                return await _existing_by_key(conn, delivery.idempotency_key)
            return IntakeResult("ignored", event_id, reason=reason)
        event_id = await _insert_event(conn, delivery, status="processed", reason=f"feedback on finding {finding_id}")
        if event_id is None and delivery.idempotency_key:
            return await _existing_by_key(conn, delivery.idempotency_key)
        user_key = f"gitlab:{vote.user_id}"
        if vote.revoked:
            await conn.execute(
                "UPDATE feedback SET value = 0, source = 'emoji', updated_at = now()"
                " WHERE finding_id = %s AND user_key = %s AND value = %s",
                (finding_id, user_key, vote.value),
            )
        else:
            await conn.execute(
                """
                INSERT INTO feedback (finding_id, user_key, source, value) VALUES (%s, %s, 'emoji', %s)
                ON CONFLICT (finding_id, user_key)
                DO UPDATE SET value = EXCLUDED.value, source = 'emoji', updated_at = now()
                """,
                (finding_id, user_key, vote.value),
            )
    return IntakeResult("processed", event_id, reason=f"feedback on finding {finding_id}")


async def record_reply(pool: DbPool, delivery: Delivery, reply: ReplyInDiscussion) -> IntakeResult:
    """A reply in our discussion: its text becomes the user's comment on the finding.

    A reply without a clear vote (see api.triage.reply_vote) keeps the user's existing vote.
    """
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "SELECT id FROM findings WHERE discussion_id = %s ORDER BY id LIMIT 1", (reply.discussion_id,)
        )
        row = await cur.fetchone()
        if row is None:
            reason = "reply is not in one of our discussions"
            event_id = await _insert_event(conn, delivery, status="ignored", reason=reason)
            if event_id is None and delivery.idempotency_key:
                return await _existing_by_key(conn, delivery.idempotency_key)
            return IntakeResult("ignored", event_id, reason=reason)
        finding_id = int(row["id"])
        event_id = await _insert_event(conn, delivery, status="processed", reason=f"reply on finding {finding_id}")
        if event_id is None and delivery.idempotency_key:
            return await _existing_by_key(conn, delivery.idempotency_key)
        await conn.execute(
            """
            INSERT INTO feedback (finding_id, user_key, source, value, comment) VALUES (%s, %s, 'reply', %s, %s)
            ON CONFLICT (finding_id, user_key) DO UPDATE SET
                comment = EXCLUDED.comment,
                value = CASE WHEN EXCLUDED.value <> 0 THEN EXCLUDED.value ELSE feedback.value END,
                source = CASE WHEN EXCLUDED.value <> 0 THEN EXCLUDED.source ELSE feedback.source END,
                updated_at = now()
            """,
            (finding_id, f"gitlab:{reply.user_id}", reply.value, reply.text),
        )
    return IntakeResult("processed", event_id, reason=f"reply on finding {finding_id}")


async def accept(
    pool: DbPool, queue: procrastinate.App, delivery: Delivery, decision: Decision, *, bot_user_id: int | None
) -> IntakeResult:
    """Persist what the triage decided; the one entry point of the webhook route."""
    if isinstance(decision, Ignore):
        return await record_event(pool, delivery, status="ignored", reason=decision.reason)
    if isinstance(decision, ReviewRequest):
        return await enqueue_review(pool, queue, delivery, decision)
    if isinstance(decision, VoteOnNote):
        return await record_vote(pool, delivery, decision, bot_user_id=bot_user_id)
    return await record_reply(pool, delivery, decision)
