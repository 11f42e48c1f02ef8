"""The dashboard's own reads: aggregates the store's repository functions do not offer.

Whole reviews, votes, model versions and training runs come from `agent.store`; what is here only
counts and groups (verdicts per review, votes per week, comments per merge request). Like the store,
every function takes a `Database` and runs synchronously: the routes call them in a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import NamedTuple

from agent.store.db import Database, connection
from agent.store.reviews import Verdict


class WeeklyAcceptance(NamedTuple):
    """Findings of one reviewer and category reviewed in one week, by the sign of their net vote."""

    week: date  # the Monday (UTC) that starts the week
    reviewer: str
    category: str
    accepted: int
    rejected: int
    rule: str = ""
    project: str = ""  # the project's path where its merge request's address is known, else its id


class MergeRequestVolume(NamedTuple):
    """How much the agent said on one merge request (a review without an MR counts on its own)."""

    project: str
    mr_iid: int | None
    review_id: int | None  # set when there is no MR: the row stands for this review alone
    reviews: int
    findings: int
    real: int
    posted: int
    last_reviewed: datetime
    web_url: str = ""  # the merge request's page, when GitLab gave one


# A review's project as people name it: the path in its merge request's address (GitLab's web_url,
# https://host/group/project/-/merge_requests/7), else what the review was stored under (an id or a path).
PROJECT_LABEL = (
    "coalesce(nullif(substring(r.web_url from '^https?://[^/]+/(.+)/-/merge_requests/[0-9]+'), ''), r.project)"
)


def verdict_counts(db: Database, review_ids: Sequence[int]) -> dict[int, dict[Verdict, int]]:
    """review id → verdict → number of findings; reviews without findings are absent."""
    if not review_ids:
        return {}
    with connection(db) as conn:
        rows = conn.execute(
            "SELECT review_id, verdict, count(*)::int FROM findings WHERE review_id = ANY(%s)"
            " GROUP BY review_id, verdict",
            (list(review_ids),),
        ).fetchall()
    out: dict[int, dict[Verdict, int]] = {}
    for review_id, verdict, n in rows:
        out.setdefault(int(review_id), {})[verdict] = int(n)
    return out


def review_of_finding(db: Database, finding_id: int, *, projects: Sequence[str] | None = None) -> int | None:
    """The review of the finding; None when there is none or its project is outside `projects`."""
    with connection(db) as conn:
        row = conn.execute(
            "SELECT f.review_id FROM findings f JOIN reviews r ON r.id = f.review_id"
            " WHERE f.id = %s AND (%s::text[] IS NULL OR r.project = ANY(%s))",
            (finding_id, _scope(projects), _scope(projects)),
        ).fetchone()
    return int(row[0]) if row else None


def _scope(projects: Sequence[str] | None) -> list[str] | None:
    """An API token's projects as a `text[]` parameter; None (every project) stays None."""
    return None if projects is None else list(projects)


def weekly_acceptance(
    db: Database, *, since: datetime, projects: Sequence[str] | None = None
) -> list[WeeklyAcceptance]:
    """Per week (of the finding), reviewer and category: findings whose net vote is > 0 and < 0.

    The net vote is the same one the verifier's calibration and the learning code use (the sum of
    every user's current vote); findings nobody voted on, or whose votes cancel out, count in neither.
    Shadow reviews (candidate models run beside the one in service) stay out: nobody saw them.
    """
    with connection(db) as conn:
        rows = conn.execute(
            "WITH scored AS ("
            " SELECT f.id, f.reviewer, f.category, f.rule,"
            f" {PROJECT_LABEL} AS project,"
            " date_trunc('week', f.created_at AT TIME ZONE 'UTC')::date AS week, sum(fb.value) AS score"
            " FROM findings f JOIN reviews r ON r.id = f.review_id JOIN feedback fb ON fb.finding_id = f.id"
            " WHERE f.created_at >= %s AND NOT r.is_shadow"
            " AND (%s::text[] IS NULL OR r.project = ANY(%s)) GROUP BY f.id, r.web_url, r.project)"
            " SELECT week, reviewer, category, count(*) FILTER (WHERE score > 0)::int,"
            " count(*) FILTER (WHERE score < 0)::int, rule, project FROM scored"
            " GROUP BY week, reviewer, category, rule, project ORDER BY week, reviewer, category, rule, project",
            (since, _scope(projects), _scope(projects)),
        ).fetchall()
    return [
        WeeklyAcceptance(week, str(rev), str(cat), int(acc), int(rej), str(rule), str(project))
        for week, rev, cat, acc, rej, rule, project in rows
    ]


def comment_volume(
    db: Database, *, since: datetime, limit: int, projects: Sequence[str] | None = None
) -> list[MergeRequestVolume]:
    """Merge requests reviewed since `since`, most recently reviewed first, with their finding counts."""
    with connection(db) as conn:
        rows = conn.execute(
            "SELECT r.project, r.mr_iid, CASE WHEN r.mr_iid IS NULL THEN r.id END AS solo,"
            " count(DISTINCT r.id)::int, count(f.id)::int, count(f.id) FILTER (WHERE f.verdict = 'REAL')::int,"
            " count(f.id) FILTER (WHERE f.posted_at IS NOT NULL)::int, max(r.created_at), max(r.web_url)"
            " FROM reviews r LEFT JOIN findings f ON f.review_id = r.id"
            " WHERE r.created_at >= %s AND NOT r.is_shadow AND (%s::text[] IS NULL OR r.project = ANY(%s))"
            " GROUP BY r.project, r.mr_iid, solo ORDER BY max(r.created_at) DESC LIMIT %s",
            (since, _scope(projects), _scope(projects), limit),
        ).fetchall()
    return [
        MergeRequestVolume(str(p), mr, solo, int(n_rev), int(n_f), int(n_real), int(n_posted), last, str(url or ""))
        for p, mr, solo, n_rev, n_f, n_real, n_posted, last, url in rows
    ]


def project_labels(db: Database, projects: Sequence[str]) -> dict[str, str]:
    """Stored project (an id or a path) → how people name it (`PROJECT_LABEL`, from its newest review)."""
    if not projects:
        return {}
    with connection(db) as conn:
        rows = conn.execute(
            f"SELECT DISTINCT ON (r.project) r.project, {PROJECT_LABEL} FROM reviews r"
            " WHERE r.project = ANY(%s) ORDER BY r.project, (r.web_url = ''), r.created_at DESC",
            (list(projects),),
        ).fetchall()
    return {str(project): str(label) for project, label in rows}
