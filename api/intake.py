"""Persisting what a webhook asked for: the event row, its review job, or a feedback row.

A reviewable event is stored and its job deferred in ONE statement, `reviewloop_enqueue_review`
(agent/store/migrations/0002_webhook_intake.sql), run in autocommit: the event row and the job
(inserted through procrastinate's own SQL API, `procrastinate_defer_jobs_v1`) commit together or
not at all, and we answer 202 only after that commit. One round trip, not eleven: the webhook
path's cost at 200 events/s was its round trips (bench/RESULTS.md). Under load, deliveries share
that statement and its commit (api/intake_batch.py: group commit).

Deduplication, in the same statement:
- `Idempotency-Key` (GitLab keeps it across retries of one delivery): a stored key answers
  'duplicate' with the earlier event; the unique index `webhook_events_idempotency` backs it.
- (project, MR, head commit): a transaction-scoped advisory lock per MR serialises intake of one MR,
  so a second delivery of a head (same key or not) sees the first's committed row.
- A newer push supersedes an older *pending* job of the same MR: it is cancelled and its event
  marked, then the new job takes the queueing lock. A running review is left to finish.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import procrastinate
from psycopg.types.json import Jsonb

from api.db import DbConnection, DbPool
from api.intake_batch import ReviewIntake, delivery_params
from api.project_check import ProjectCheck
from api.triage import Decision, Ignore, ReplyInDiscussion, ReviewRequest, VoteOnNote
from api.worker import ANSWER_TASK, REVIEW_TASK

logger = logging.getLogger(__name__)

StoredStatus = Literal["queued", "ignored", "duplicate", "processed", "failed"]


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


@asynccontextmanager
async def autocommit(pool: DbPool) -> AsyncIterator[DbConnection]:
    """A pooled connection in autocommit: one statement is one transaction, with no BEGIN/COMMIT trips."""
    async with pool.connection() as conn:
        await conn.set_autocommit(True)
        try:
            yield conn
        finally:
            await conn.set_autocommit(False)


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
    """Store an event we do not act on (ignored), keeping the audit trail; duplicates store nothing.

    Autocommit: one INSERT, and only for a known key a second statement reading the committed row.
    """
    async with autocommit(pool) as conn:
        event_id = await _insert_event(conn, delivery, status=status, reason=reason, mr_iid=mr_iid)
        if event_id is None and delivery.idempotency_key:
            return await _existing_by_key(conn, delivery.idempotency_key)
    return IntakeResult(status, event_id, reason=reason)


async def enqueue_review(
    pool: DbPool,
    queue: procrastinate.App,
    delivery: Delivery,
    request: ReviewRequest,
    *,
    intake: ReviewIntake | None = None,
) -> IntakeResult:
    """Store the event and defer its review atomically, or report why it is a duplicate.

    One call of `reviewloop_enqueue_review` (migration 0002): the per-MR lock, both dedupe checks,
    superseding a pending job, the job insert through procrastinate's SQL API and the event row,
    committed together. With `intake` (the app's group commit, api/intake_batch.py) the call shares
    its statement and commit with the other deliveries waiting; without, it is a statement alone.
    """
    task = queue.tasks[REVIEW_TASK]
    params = delivery_params(
        kind=delivery.event_kind,
        key=delivery.idempotency_key,
        uuid=delivery.webhook_uuid,
        project_id=request.project_id,
        path=request.project_path,
        iid=request.mr_iid,
        head=request.head_sha,
        action=request.trigger,
        payload=delivery.payload,
        lock=request.lock_key,
        queue=task.queue,
        task=task.name,
        priority=task.priority,
        args={"project": str(request.project_id), "mr_iid": request.mr_iid, "head_sha": request.head_sha},
    )
    if intake is None:
        intake = ReviewIntake(pool, max_batch=1)
    row = await intake.enqueue(params)
    event_id = int(row["event_id"]) if row["event_id"] is not None else None
    job_id = int(row["job_id"]) if row["job_id"] is not None else None
    if row["superseded"]:
        logger.info("pending review superseded", extra={"cancelled_jobs": list(row["superseded"])})
    if row["status"] == "queued":
        return IntakeResult("queued", event_id, job_id)
    return IntakeResult("duplicate", event_id, job_id, reason=row["reason"])


FINDING_BY_NOTE_SQL = """
SELECT f.id, r.mr_author_id FROM findings f JOIN reviews r ON r.id = f.review_id
 WHERE r.source = 'gitlab' AND r.project = %(project)s
   AND (f.note_id = %(note_id)s OR (%(by_discussion)s AND f.discussion_id = %(discussion_id)s))
 ORDER BY f.id LIMIT 1
"""
FINDING_BY_DISCUSSION_SQL = """
SELECT f.id, r.mr_author_id FROM findings f JOIN reviews r ON r.id = f.review_id
 WHERE r.source = 'gitlab' AND r.project = %(project)s AND f.discussion_id = %(discussion_id)s
 ORDER BY f.id LIMIT 1
"""


class VotedFinding(NamedTuple):
    finding_id: int
    mr_author_id: int | None


async def _finding_for_vote(conn: DbConnection, vote: VoteOnNote, *, bot_user_id: int | None) -> VotedFinding | None:
    """The finding whose thread the awarded note opened (the first finding that posted it).

    A thumb on another note of our discussion counts only when that note is ours (bot-authored).
    """
    by_discussion = bool(vote.discussion_id and bot_user_id is not None and vote.note_author_id == bot_user_id)
    cur = await conn.execute(
        FINDING_BY_NOTE_SQL,
        {
            "project": str(vote.project_id),
            "note_id": vote.note_id,
            "by_discussion": by_discussion,
            "discussion_id": vote.discussion_id,
        },
    )
    row = await cur.fetchone()
    return VotedFinding(int(row["id"]), row["mr_author_id"]) if row else None


async def record_vote(pool: DbPool, delivery: Delivery, vote: VoteOnNote, *, bot_user_id: int | None) -> IntakeResult:
    """Award → upsert +1/-1 (latest wins); revoke → 0, only if the user's vote was that polarity."""
    async with pool.connection() as conn, conn.transaction():
        found = await _finding_for_vote(conn, vote, bot_user_id=bot_user_id)
        if found is None:
            reason = f"note {vote.note_id} is not one of our findings in project {vote.project_id}"
            event_id = await _insert_event(conn, delivery, status="ignored", reason=reason)
            if event_id is None and delivery.idempotency_key:
                return await _existing_by_key(conn, delivery.idempotency_key)
            return IntakeResult("ignored", event_id, reason=reason)
        finding_id = found.finding_id
        event_id = await _insert_event(conn, delivery, status="processed", reason=f"feedback on finding {finding_id}")
        if event_id is None and delivery.idempotency_key:
            return await _existing_by_key(conn, delivery.idempotency_key)
        user_key = f"gitlab:{vote.user_id}"
        is_author = found.mr_author_id is not None and found.mr_author_id == vote.user_id
        if vote.revoked:
            await conn.execute(
                "UPDATE feedback SET value = 0, source = 'emoji', updated_at = now()"
                " WHERE finding_id = %s AND user_key = %s AND value = %s",
                (finding_id, user_key, vote.value),
            )
        else:
            await conn.execute(
                """
                INSERT INTO feedback (finding_id, user_key, source, value, voter_is_author)
                VALUES (%s, %s, 'emoji', %s, %s)
                ON CONFLICT (finding_id, user_key) DO UPDATE SET
                    value = EXCLUDED.value, source = 'emoji', voter_is_author = EXCLUDED.voter_is_author,
                    updated_at = now()
                """,
                (finding_id, user_key, vote.value, is_author),
            )
    return IntakeResult("processed", event_id, reason=f"feedback on finding {finding_id}")


# A question in one of our threads is answered by a job (the API only stores and enqueues): deferred
# through procrastinate's SQL API in the transaction that records the reply, so the two commit together.
# Locked per thread, so two questions in one thread are answered one after the other.
DEFER_ANSWER_SQL = """
SELECT (procrastinate_defer_jobs_v1(ARRAY[ROW(
    %(queue)s::text, %(task)s::text, %(priority)s::integer, %(lock)s::text, NULL::text, %(args)s::jsonb,
    NULL::timestamptz
)]::procrastinate_job_to_defer_v1[]))[1] AS job_id
"""


async def record_reply(
    pool: DbPool, delivery: Delivery, reply: ReplyInDiscussion, *, queue: procrastinate.App | None = None
) -> IntakeResult:
    """A reply in our discussion: its text becomes the user's comment on the finding; a question
    also queues its answer (with `queue`), a dispute counts as a 👎 (api.triage.triage_note).

    A reply without a clear vote (see api.triage.reply_vote) keeps the user's existing vote.
    """
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            FINDING_BY_DISCUSSION_SQL, {"project": str(reply.project_id), "discussion_id": reply.discussion_id}
        )
        row = await cur.fetchone()
        if row is None:
            reason = f"reply is not in one of our discussions in project {reply.project_id}"
            event_id = await _insert_event(conn, delivery, status="ignored", reason=reason)
            if event_id is None and delivery.idempotency_key:
                return await _existing_by_key(conn, delivery.idempotency_key)
            return IntakeResult("ignored", event_id, reason=reason)
        finding_id = int(row["id"])
        is_author = row["mr_author_id"] is not None and row["mr_author_id"] == reply.user_id
        event_id = await _insert_event(conn, delivery, status="processed", reason=f"reply on finding {finding_id}")
        if event_id is None and delivery.idempotency_key:
            return await _existing_by_key(conn, delivery.idempotency_key)
        await conn.execute(
            """
            INSERT INTO feedback (finding_id, user_key, source, value, comment, voter_is_author)
            VALUES (%s, %s, 'reply', %s, %s, %s)
            ON CONFLICT (finding_id, user_key) DO UPDATE SET
                comment = EXCLUDED.comment,
                value = CASE WHEN EXCLUDED.value <> 0 THEN EXCLUDED.value ELSE feedback.value END,
                source = CASE WHEN EXCLUDED.value <> 0 THEN EXCLUDED.source ELSE feedback.source END,
                voter_is_author = EXCLUDED.voter_is_author,
                updated_at = now()
            """,
            (finding_id, f"gitlab:{reply.user_id}", reply.value, reply.text, is_author),
        )
        if reply.intent == "question" and queue is not None:
            task = queue.tasks[ANSWER_TASK]
            args = {"finding_id": finding_id, "discussion_id": reply.discussion_id, "note_id": reply.note_id}
            await conn.execute(
                DEFER_ANSWER_SQL,
                {
                    "queue": task.queue,
                    "task": task.name,
                    "priority": task.priority,
                    "lock": f"answer:{reply.project_id}:{reply.discussion_id}",
                    "args": Jsonb(args),
                },
            )
            return IntakeResult("processed", event_id, reason=f"question on finding {finding_id}: answer queued")
    return IntakeResult("processed", event_id, reason=f"reply on finding {finding_id}")


async def accept(
    pool: DbPool,
    queue: procrastinate.App,
    delivery: Delivery,
    decision: Decision,
    *,
    bot_user_id: int | None,
    projects: ProjectCheck | None = None,
    intake: ReviewIntake | None = None,
) -> IntakeResult:
    """Persist what the triage decided; the one entry point of the webhook route.

    A vote or a reply counts only once `projects` confirmed its project as reviews confirm theirs
    (the worker does that for a review, before it reads the project).
    """
    if isinstance(decision, Ignore):
        return await record_event(pool, delivery, status="ignored", reason=decision.reason)
    if isinstance(decision, ReviewRequest):
        return await enqueue_review(pool, queue, delivery, decision, intake=intake)
    if projects is not None:
        # raises PlatformUnavailableError when GitLab cannot answer: nothing is stored, the route
        # answers 503, and GitLab's retry of the delivery (same Idempotency-Key) is counted then
        refused = await projects.refusal(decision.project_id)
        if refused is not None:
            return await record_event(pool, delivery, status="ignored", reason=refused)
    if isinstance(decision, VoteOnNote):
        return await record_vote(pool, delivery, decision, bot_user_id=bot_user_id)
    return await record_reply(pool, delivery, decision, queue=queue)
