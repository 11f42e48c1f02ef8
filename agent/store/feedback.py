"""Human votes on findings: one per person per finding, the latest wins.

Votes come from GitLab award emoji, replies, thread outcomes, the API and the dashboard. A person
(`user_key`) is a GitLab user ('gitlab:<user id>') or an API token ('token:<name>'), whatever `user`
the token claims (`claimed_user`, recorded, never an identity). A person who changes their mind
overwrites their vote (value 0 withdraws it), so the learning code always sees each person's
current opinion.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, TypedDict, cast, get_args

import psycopg
from psycopg.rows import dict_row

from agent.store.db import Database, connection
from reviewers.kernel.errors import InputError

FeedbackSource = Literal["emoji", "api", "reply", "thread_outcome", "dashboard"]
VoteValue = Literal[-1, 0, 1]
FEEDBACK_SOURCES: tuple[FeedbackSource, ...] = get_args(FeedbackSource)
MAX_COMMENT_CHARS = 2000  # a reply quoted as the reason for a vote; the thread itself stays on GitLab


class FeedbackRow(TypedDict):
    id: int
    finding_id: int
    user_key: str
    source: FeedbackSource
    value: VoteValue
    comment: str | None
    claimed_user: str | None
    voter_is_author: bool
    created_at: datetime
    updated_at: datetime


def record_vote(
    db: Database,
    finding_id: int,
    *,
    user_key: str,
    source: FeedbackSource,
    value: VoteValue,
    comment: str | None = None,
    voter_is_author: bool = False,
) -> int:
    """Insert or replace `user_key`'s vote on a finding; returns the feedback row's id.
    `voter_is_author`: the voter wrote the merge request the finding is on (their own review)."""
    if value not in (-1, 0, 1):
        raise InputError(f"a vote is -1, 0 or 1, not {value!r}")
    if source not in FEEDBACK_SOURCES:
        raise InputError(f"unknown feedback source {source!r}")
    if not user_key:
        raise InputError("a vote needs a user key")
    try:
        with connection(db) as conn:
            row = conn.execute(
                "INSERT INTO feedback (finding_id, user_key, source, value, comment, voter_is_author)"
                " VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (finding_id, user_key) DO UPDATE SET value = excluded.value,"
                " source = excluded.source, comment = excluded.comment,"
                " voter_is_author = excluded.voter_is_author, updated_at = now()"
                " RETURNING id",
                (
                    finding_id,
                    user_key,
                    source,
                    value,
                    comment[:MAX_COMMENT_CHARS] if comment else comment,
                    voter_is_author,
                ),
            ).fetchone()
    except InputError as exc:
        if isinstance(exc.__cause__, psycopg.errors.ForeignKeyViolation):
            raise InputError(f"no finding with id {finding_id}") from exc
        raise
    if row is None:  # cannot happen: INSERT .. ON CONFLICT DO UPDATE .. RETURNING always returns the row
        raise InputError(f"the vote on finding {finding_id} was not stored")
    return int(row[0])


def finding_by_note_id(db: Database, note_id: int) -> int | None:
    """The finding whose first note is `note_id` (an award emoji names the note it was given to)."""
    with connection(db) as conn:
        row = conn.execute("SELECT id FROM findings WHERE note_id = %s ORDER BY id DESC LIMIT 1", (note_id,)).fetchone()
    return int(row[0]) if row else None


def finding_by_discussion_id(db: Database, discussion_id: str) -> int | None:
    """The finding posted as this discussion (replies and thread outcomes name the discussion)."""
    with connection(db) as conn:
        row = conn.execute(
            "SELECT id FROM findings WHERE discussion_id = %s ORDER BY id DESC LIMIT 1", (discussion_id,)
        ).fetchone()
    return int(row[0]) if row else None


def feedback_for_finding(db: Database, finding_id: int) -> list[FeedbackRow]:
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM feedback WHERE finding_id = %s ORDER BY id", (finding_id,)).fetchall()
    return [cast(FeedbackRow, row) for row in rows]
