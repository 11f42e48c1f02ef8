"""The merge request as it stands after each reviewed push: what is open on it, what was listed, what
a person was asked about, and what was not analysed in full (issue 40).

A new push is reviewed only where it changed things, so the summary of a merge request cannot be
rebuilt from the latest push alone: each review records the state it left on its row
(`reviews.mr_state`), and the next review carries it forward (`agent.gitlab.mr_state`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict, cast

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from agent.store.db import Database, connection
from agent.store.reviews import FindingRow
from reviewers.kernel.errors import InputError

ItemKind = Literal["thread", "listed", "held"]
"""thread: posted as a discussion; listed: REAL, past the comment budget, in the summary; held: for a person."""


class StateItem(TypedDict):
    fingerprint: str
    finding_id: int
    kind: ItemKind
    cwe: NotRequired[str | None]  # the findings table keeps no CWE; the summary names it


class MergeRequestState(TypedDict):
    findings: list[StateItem]
    not_reviewed: list[dict[str, Any]]


def record_mr_state(db: Database, review_id: int, state: MergeRequestState) -> None:
    with connection(db) as conn:
        row = conn.execute(
            "UPDATE reviews SET mr_state = %s WHERE id = %s RETURNING id", (Jsonb(dict(state)), review_id)
        ).fetchone()
    if row is None:
        raise InputError(f"no review with id {review_id}")


def previous_mr_state(db: Database, *, project: str, mr_iid: int, before_review: int) -> MergeRequestState | None:
    """The state the latest earlier review of this merge request left (None: no review recorded one)."""
    with connection(db) as conn:
        row = conn.execute(
            "SELECT mr_state FROM reviews WHERE project = %s AND mr_iid = %s AND source = 'gitlab'"
            " AND NOT is_shadow AND id <> %s AND mr_state IS NOT NULL ORDER BY id DESC LIMIT 1",
            (project, mr_iid, before_review),
        ).fetchone()
    return cast(MergeRequestState, row[0]) if row else None


def findings_by_id(db: Database, finding_ids: Sequence[int]) -> dict[int, FindingRow]:
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM findings WHERE id = ANY(%s)", (list(finding_ids),)).fetchall()
    return {int(r["id"]): cast(FindingRow, r) for r in rows}


def earlier_open_findings(db: Database, *, project: str, mr_iid: int, before_review: int) -> list[FindingRow]:
    """Without a recorded state (reviews from before states were kept): the REAL and held findings of
    this merge request's earlier reviews whose thread is not closed, the newest row per fingerprint."""
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT DISTINCT ON (f.fingerprint) f.* FROM findings f JOIN reviews r ON r.id = f.review_id"
            " WHERE r.project = %s AND r.mr_iid = %s AND r.source = 'gitlab' AND NOT r.is_shadow AND r.id <> %s"
            " AND f.verdict IN ('REAL', 'NEEDS_HUMAN_REVIEW') AND coalesce(f.thread_state, 'open') = 'open'"
            " ORDER BY f.fingerprint, f.id DESC",
            (project, mr_iid, before_review),
        ).fetchall()
    return [cast(FindingRow, r) for r in rows]


def state_items(rows: Mapping[int, FindingRow], items: Sequence[StateItem]) -> list[tuple[StateItem, FindingRow]]:
    return [(item, rows[item["finding_id"]]) for item in items if item["finding_id"] in rows]


def mr_author_of(db: Database, review_id: int) -> int | None:
    """The merge request's author as recorded for this review (`reviews.record_mr_author`)."""
    with connection(db) as conn:
        row = conn.execute("SELECT mr_author_id FROM reviews WHERE id = %s", (review_id,)).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def relabel_superseded_by_late_delivery(
    db: Database, *, project: str, mr_iid: int, event_id: int, event_head: str, reviewed_head: str
) -> int:
    """A late delivery of an older push supersedes the pending review of a newer one at intake, which
    then reads "superseded by event N (a newer push)"; its job reviews the newest head all the same.
    Say what happened instead. Returns how many events were relabelled."""
    reason = (
        f"superseded by event {event_id}, a late delivery of an older push (head {event_head[:12]});"
        f" that job reviewed the newest head {reviewed_head[:12]}"
    )
    with connection(db) as conn:
        cur = conn.execute(
            "UPDATE webhook_events SET reason = %s WHERE project_id = %s AND mr_iid = %s"
            " AND status = 'ignored' AND reason = %s",
            (reason, int(project), mr_iid, f"superseded by event {event_id} (a newer push)"),
        )
        return cur.rowcount
