"""Reviews and their findings: what the agent ran, what it found, what it posted, and what humans said.

The verifier reads the threads already open on this merge request from here (what people's votes
say comes from `agent.store.rejections`); the reporter records what it posted; the read API and the
learning code read whole reviews with their feedback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple, TypedDict, cast

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from agent.store.db import Database, connection
from agent.store.feedback import FeedbackRow
from reviewers.kernel.contracts import Category, Finding, ReviewerName, Severity
from reviewers.kernel.errors import InputError

ReviewSource = Literal["gitlab", "local", "diff", "replay", "eval", "demo"]
ReviewStatus = Literal["pending", "running", "done", "failed", "superseded"]
StrategySource = Literal["model", "rule", "fallback"]
Verdict = Literal["REAL", "FALSE_POSITIVE", "DUPLICATE", "NEEDS_HUMAN_REVIEW"]
ThreadState = Literal["open", "resolved", "outdated"]

MAX_ERROR_CHARS = 4000  # a stack of nested causes can be long; the dashboard shows the start


class ReviewRow(TypedDict):
    id: int
    source: ReviewSource
    project: str
    mr_iid: int | None
    title: str
    web_url: str
    base_sha: str | None
    start_sha: str | None
    head_sha: str | None
    previous_head_sha: str | None
    status: ReviewStatus
    error: str | None
    strategy: dict[str, Any] | None
    strategy_text: str | None
    strategy_source: StrategySource | None
    model_version_id: int | None
    is_shadow: bool
    parent_review_id: int | None
    trace_id: str | None
    summary_note_id: int | None
    not_reviewed: list[dict[str, Any]]
    snapshot: dict[str, Any] | None
    stats: dict[str, Any]
    cost_tokens: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class FindingRow(TypedDict):
    id: int
    review_id: int
    fingerprint: str
    path: str
    line: int
    end_line: int
    category: Category
    severity: Severity
    title: str
    body: str
    evidence: str
    reviewer: ReviewerName
    rule: str
    verdict: Verdict
    verdict_reason: str
    discussion_id: str | None
    note_id: int | None
    position_fallback: bool
    posted_at: datetime | None
    thread_state: ThreadState | None
    created_at: datetime


class FindingDetail(FindingRow):
    feedback: list[FeedbackRow]
    score: int  # sum of the votes: > 0 accepted, < 0 rejected, 0 unknown


class ReviewDetail(ReviewRow):
    findings: list[FindingDetail]


class ReviewSummary(TypedDict):
    id: int
    source: ReviewSource
    project: str
    mr_iid: int | None
    title: str
    web_url: str
    head_sha: str | None
    status: ReviewStatus
    strategy_source: StrategySource | None
    is_shadow: bool
    cost_tokens: int
    created_at: datetime
    finished_at: datetime | None
    finding_count: int
    real_count: int


class PostedThread(NamedTuple):
    discussion_id: str
    note_id: int | None
    path: str
    line: int


# --- writing a review ------------------------------------------------------------------------------


def create_review(
    db: Database,
    *,
    source: ReviewSource,
    project: str = "",
    mr_iid: int | None = None,
    title: str = "",
    base_sha: str | None = None,
    start_sha: str | None = None,
    head_sha: str | None = None,
    previous_head_sha: str | None = None,
    is_shadow: bool = False,
    parent_review_id: int | None = None,
    snapshot: Mapping[str, Any] | None = None,
    trace_id: str | None = None,
) -> int:
    """Insert a pending review and return its id.

    A GitLab review of a (project, MR, head commit) that already has one returns the existing id:
    a retried job resumes its review instead of starting a twin (the schema's unique index).
    """
    values = (
        source,
        project,
        mr_iid,
        title,
        base_sha,
        start_sha,
        head_sha,
        previous_head_sha,
        is_shadow,
        parent_review_id,
        Jsonb(dict(snapshot)) if snapshot is not None else None,
        trace_id,
    )
    with connection(db) as conn:
        row = conn.execute(
            "INSERT INTO reviews (source, project, mr_iid, title, base_sha, start_sha, head_sha,"
            " previous_head_sha, is_shadow, parent_review_id, snapshot, trace_id)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (project, mr_iid, head_sha) WHERE source = 'gitlab' AND NOT is_shadow"
            " DO NOTHING RETURNING id",
            values,
        ).fetchone()
        if row is None:
            row = conn.execute(
                "SELECT id FROM reviews WHERE source = 'gitlab' AND NOT is_shadow"
                " AND project = %s AND mr_iid = %s AND head_sha = %s",
                (project, mr_iid, head_sha),
            ).fetchone()
        if row is None:  # the twin was deleted between the two statements
            raise InputError("review could not be created", project=project, mr_iid=mr_iid, head_sha=head_sha)
        return int(row[0])


def _update_review(db: Database, review_id: int, sql: str, params: tuple[Any, ...]) -> None:
    with connection(db) as conn:
        if conn.execute(sql + " WHERE id = %s RETURNING id", (*params, review_id)).fetchone() is None:
            raise InputError(f"no review with id {review_id}")


def mark_running(db: Database, review_id: int, *, trace_id: str | None = None) -> None:
    _update_review(
        db,
        review_id,
        "UPDATE reviews SET status = 'running', started_at = now(), error = NULL, trace_id = coalesce(%s, trace_id)",
        (trace_id,),
    )


def mark_done(
    db: Database,
    review_id: int,
    *,
    stats: Mapping[str, Any],
    cost_tokens: int,
    not_reviewed: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Finish a review. `not_reviewed` lists `{path, reason, detail}` (`NotReviewed`) for every changed file
    not analyzed in full, said in the summary."""
    _update_review(
        db,
        review_id,
        "UPDATE reviews SET status = 'done', finished_at = now(), error = NULL,"
        " stats = %s, cost_tokens = %s, not_reviewed = %s",
        (Jsonb(dict(stats)), cost_tokens, Jsonb([dict(item) for item in not_reviewed])),
    )


def mark_failed(db: Database, review_id: int, error: str) -> None:
    _update_review(
        db,
        review_id,
        "UPDATE reviews SET status = 'failed', finished_at = now(), error = %s",
        (error[:MAX_ERROR_CHARS],),
    )


def mark_superseded(db: Database, review_id: int) -> None:
    """A newer push made this review pointless; it stops without posting."""
    _update_review(db, review_id, "UPDATE reviews SET status = 'superseded', finished_at = now()", ())


def set_strategy(
    db: Database,
    review_id: int,
    *,
    strategy_json: str | Mapping[str, Any],
    strategy_text: str,
    strategy_source: StrategySource,
    model_version_id: int | None = None,
) -> None:
    """Record z: its JSON form (`Strategy.to_json()` or a dict), its rendered text, and who wrote it."""
    if isinstance(strategy_json, str):
        try:
            parsed = json.loads(strategy_json)
        except ValueError as exc:
            raise InputError(f"strategy for review {review_id} is not JSON: {exc}") from exc
    else:
        parsed = dict(strategy_json)
    _update_review(
        db,
        review_id,
        "UPDATE reviews SET strategy = %s, strategy_text = %s, strategy_source = %s, model_version_id = %s",
        (Jsonb(parsed), strategy_text, strategy_source, model_version_id),
    )


def record_summary_note(db: Database, review_id: int, *, note_id: int) -> None:
    _update_review(db, review_id, "UPDATE reviews SET summary_note_id = %s", (note_id,))


def record_mr_author(db: Database, review_id: int, *, author_id: int) -> None:
    """The merge request's author as GitLab's API answered: their votes on their own review are theirs
    alone (agent.store.rejections), so the vote intake marks them."""
    _update_review(db, review_id, "UPDATE reviews SET mr_author_id = %s", (author_id,))


def last_summary_note_id(db: Database, *, project: str, mr_iid: int) -> int | None:
    """The MR's summary note, which the reporter edits in place instead of posting another."""
    with connection(db) as conn:
        row = conn.execute(
            "SELECT summary_note_id FROM reviews WHERE project = %s AND mr_iid = %s"
            " AND summary_note_id IS NOT NULL AND NOT is_shadow ORDER BY id DESC LIMIT 1",
            (project, mr_iid),
        ).fetchone()
    return int(row[0]) if row else None


# --- findings --------------------------------------------------------------------------------------


def save_findings(db: Database, review_id: int, findings: Sequence[tuple[Finding, Verdict, str]]) -> dict[str, int]:
    """Store (finding, verdict, reason) triples; returns fingerprint → finding id.

    Idempotent: a retried step stores nothing twice, and the ids of rows already there come back.
    Within one review a fingerprint is one finding; the first of duplicates wins.
    """
    rows = []
    for finding, verdict, reason in findings:
        if not finding.fingerprint:
            raise InputError(f"finding {finding.title!r} at {finding.path}:{finding.line} has no fingerprint")
        rows.append(
            (
                review_id,
                finding.fingerprint,
                finding.path,
                finding.line,
                finding.end_line,
                finding.category,
                finding.severity,
                finding.title,
                finding.body,
                finding.evidence,
                finding.reviewer,
                finding.rule,
                verdict,
                reason,
            )
        )
    if not rows:
        return {}
    with connection(db) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO findings (review_id, fingerprint, path, line, end_line, category, severity,"
                " title, body, evidence, reviewer, rule, verdict, verdict_reason)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (review_id, fingerprint) DO NOTHING",
                rows,
            )
            cur.execute(
                "SELECT fingerprint, id FROM findings WHERE review_id = %s AND fingerprint = ANY(%s)",
                (review_id, [r[1] for r in rows]),
            )
            return {str(fp): int(fid) for fp, fid in cur.fetchall()}


def record_posted(
    db: Database,
    finding_id: int,
    *,
    discussion_id: str,
    note_id: int | None,
    position_fallback: bool,
) -> None:
    """The reporter posted this finding: as a positioned discussion, or as a note when GitLab refused."""
    with connection(db) as conn:
        row = conn.execute(
            "UPDATE findings SET discussion_id = %s, note_id = %s, position_fallback = %s,"
            " posted_at = now(), thread_state = 'open' WHERE id = %s RETURNING id",
            (discussion_id, note_id, position_fallback, finding_id),
        ).fetchone()
    if row is None:
        raise InputError(f"no finding with id {finding_id}")


def set_thread_state(db: Database, finding_id: int, state: ThreadState) -> None:
    with connection(db) as conn:
        row = conn.execute(
            "UPDATE findings SET thread_state = %s WHERE id = %s RETURNING id", (state, finding_id)
        ).fetchone()
    if row is None:
        raise InputError(f"no finding with id {finding_id}")


# --- reading ---------------------------------------------------------------------------------------

_SUMMARY_COLUMNS = (
    "r.id, r.source, r.project, r.mr_iid, r.title, r.web_url, r.head_sha, r.status, r.strategy_source, r.is_shadow,"
    " r.cost_tokens, r.created_at, r.finished_at,"
    " (SELECT count(*) FROM findings f WHERE f.review_id = r.id)::int AS finding_count,"
    " (SELECT count(*) FROM findings f WHERE f.review_id = r.id AND f.verdict = 'REAL')::int AS real_count"
)


def get_review(db: Database, review_id: int) -> ReviewDetail | None:
    """A review with its findings, each with its votes and their sum; None when there is no such review."""
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        review = cur.execute("SELECT * FROM reviews WHERE id = %s", (review_id,)).fetchone()
        if review is None:
            return None
        findings = cur.execute("SELECT * FROM findings WHERE review_id = %s ORDER BY id", (review_id,)).fetchall()
        votes = cur.execute(
            "SELECT fb.* FROM feedback fb JOIN findings f ON f.id = fb.finding_id"
            " WHERE f.review_id = %s ORDER BY fb.id",
            (review_id,),
        ).fetchall()
    by_finding: dict[int, list[FeedbackRow]] = {}
    for vote in votes:
        by_finding.setdefault(vote["finding_id"], []).append(cast(FeedbackRow, vote))
    details = []
    for finding in findings:
        feedback = by_finding.get(finding["id"], [])
        details.append(
            cast(FindingDetail, {**finding, "feedback": feedback, "score": sum(v["value"] for v in feedback)})
        )
    return cast(ReviewDetail, {**review, "findings": details})


def list_reviews(
    db: Database,
    *,
    limit: int = 50,
    offset: int = 0,
    project: str | None = None,
    projects: Sequence[str] | None = None,
) -> list[ReviewSummary]:
    """Newest first, with finding counts; the snapshot and strategy stay out (see get_review).
    `projects` (an API token's scope; None: every project) bounds the list beside `project`."""
    if limit < 1 or offset < 0:
        raise InputError(f"invalid page: limit {limit}, offset {offset}")
    scope = None if projects is None else list(projects)
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            f"SELECT {_SUMMARY_COLUMNS} FROM reviews r"
            " WHERE (%(project)s::text IS NULL OR r.project = %(project)s)"
            " AND (%(projects)s::text[] IS NULL OR r.project = ANY(%(projects)s))"
            " ORDER BY r.created_at DESC, r.id DESC LIMIT %(limit)s OFFSET %(offset)s",
            {"project": project, "projects": scope, "limit": limit, "offset": offset},
        ).fetchall()
    return [cast(ReviewSummary, row) for row in rows]


def posted_fingerprints(db: Database, *, project: str, mr_iid: int) -> dict[str, PostedThread]:
    """Open threads we posted on this merge request, by fingerprint (newest post wins)."""
    with connection(db) as conn:
        rows = conn.execute(
            "SELECT DISTINCT ON (f.fingerprint) f.fingerprint, f.discussion_id, f.note_id, f.path, f.line"
            " FROM findings f JOIN reviews r ON r.id = f.review_id"
            " WHERE r.project = %s AND r.mr_iid = %s AND NOT r.is_shadow"
            " AND f.discussion_id IS NOT NULL AND coalesce(f.thread_state, 'open') = 'open'"
            " ORDER BY f.fingerprint, f.posted_at DESC NULLS LAST, f.id DESC",
            (project, mr_iid),
        ).fetchall()
    return {
        str(fp): PostedThread(str(disc), int(note) if note is not None else None, str(path), int(line))
        for fp, disc, note, path, line in rows
    }


def last_reviewed_head(db: Database, *, project: str, mr_iid: int) -> str | None:
    """The head commit of the latest finished review of this MR: a new push is reviewed from there."""
    with connection(db) as conn:
        row = conn.execute(
            "SELECT head_sha FROM reviews WHERE project = %s AND mr_iid = %s AND status = 'done'"
            " AND NOT is_shadow AND head_sha IS NOT NULL"
            " ORDER BY finished_at DESC NULLS LAST, id DESC LIMIT 1",
            (project, mr_iid),
        ).fetchone()
    return str(row[0]) if row else None


class OpenThreadRow(TypedDict):
    finding_id: int
    review_id: int
    discussion_id: str
    fingerprint: str
    path: str
    line: int
    evidence: str


def open_threads(db: Database, *, project: str, mr_iid: int) -> list[OpenThreadRow]:
    """Our posted threads on this MR that are still open (candidates for "outdated" on a new push)."""
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT f.id AS finding_id, f.review_id, f.discussion_id, f.fingerprint, f.path, f.line, f.evidence"
            " FROM findings f JOIN reviews r ON r.id = f.review_id"
            " WHERE r.project = %s AND r.mr_iid = %s AND NOT r.is_shadow AND f.discussion_id IS NOT NULL"
            " AND coalesce(f.thread_state, 'open') = 'open' ORDER BY f.id",
            (project, mr_iid),
        ).fetchall()
    return cast(list[OpenThreadRow], rows)


def review_status(db: Database, *, project: str, mr_iid: int, head_sha: str) -> tuple[int, ReviewStatus] | None:
    """The GitLab review of this head commit, if one exists: (id, status)."""
    with connection(db) as conn:
        row = conn.execute(
            "SELECT id, status FROM reviews WHERE source = 'gitlab' AND NOT is_shadow"
            " AND project = %s AND mr_iid = %s AND head_sha = %s",
            (project, mr_iid, head_sha),
        ).fetchone()
    return (int(row[0]), cast(ReviewStatus, row[1])) if row else None
