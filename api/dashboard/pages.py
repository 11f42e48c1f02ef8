"""What each dashboard page shows, built from store rows: pure functions, no I/O, no HTML.

The routes fetch rows (in a thread: the store is synchronous), these functions shape them, and the
templates only lay them out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any, Literal

from agent.store.models import ModelVersionRow, TrainingRunRow
from agent.store.reviews import FindingDetail, ReviewSummary, Verdict
from api.dashboard.charts import BarChart, LineChart, acceptance_rate, acceptance_series, bar_chart, line_chart
from api.dashboard.queries import MergeRequestVolume, WeeklyAcceptance

VERDICT_ORDER: tuple[Verdict, ...] = ("REAL", "NEEDS_HUMAN_REVIEW", "DUPLICATE", "FALSE_POSITIVE")
VERDICT_LABELS: dict[Verdict, str] = {
    "REAL": "real",
    "NEEDS_HUMAN_REVIEW": "needs human",
    "DUPLICATE": "duplicate",
    "FALSE_POSITIVE": "false positive",
}
# One chart per question the quality page answers: is each reviewer getting better, and where (which
# project) is it worth having. (Category was a second copy of reviewer: each reviewer has one category.)
GROUPINGS: tuple[Literal["reviewer", "project"], ...] = ("reviewer", "project")
MERGE_REQUEST_PATH = re.compile(r"^https?://[^/\s]+/(?P<project>[^\s]+?)/-/merge_requests/(?P<iid>[0-9]+)$")
SEVERITY_RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4}


@dataclass(frozen=True)
class FindingView:
    finding: FindingDetail
    up: int
    down: int
    net: int
    mine: int  # the viewer's current vote: -1, 0 or 1


@dataclass(frozen=True)
class AcceptanceTotal:
    label: str
    accepted: int
    rejected: int
    rate: float | None


@dataclass(frozen=True)
class RunView:
    run: TrainingRunRow
    version_name: str | None
    gate: str | None  # the gate's decision, for eval runs


def merge_request_url(web_url: str | None) -> str | None:
    """The merge request's page when GitLab gave a well-formed http(s) address for it, else None (a
    stored value is never trusted to be a link: no other scheme, nothing but a merge request path)."""
    return web_url if web_url and MERGE_REQUEST_PATH.match(web_url) else None


def project_label(*, project: str, web_url: str | None = None) -> str:
    """The project's path from its merge request's address (`group/project`), else what it was stored as."""
    match = MERGE_REQUEST_PATH.match(web_url or "")
    return match.group("project") if match else project


def mr_label(*, project: str, mr_iid: int | None, review_id: int | None = None, web_url: str | None = None) -> str:
    """`group/project !12`; a review without a merge request is named by its id."""
    where = project_label(project=project, web_url=web_url) or "(local)"
    if mr_iid is not None:
        return f"{where} !{mr_iid}"
    return f"{where} review #{review_id}" if review_id is not None else where


def verdict_cells(counts: Mapping[Verdict, int]) -> list[tuple[Verdict, int]]:
    """Every verdict in display order with its count (zeros included, so columns line up)."""
    return [(verdict, int(counts.get(verdict, 0))) for verdict in VERDICT_ORDER]


def review_rows(
    reviews: Sequence[ReviewSummary], counts: Mapping[int, Mapping[Verdict, int]]
) -> list[tuple[ReviewSummary, list[tuple[Verdict, int]]]]:
    return [(review, verdict_cells(counts.get(review["id"], {}))) for review in reviews]


def finding_views(findings: Sequence[FindingDetail], *, user_key: str) -> list[FindingView]:
    """Findings with their vote tallies, REAL first, then by severity, then by place in the diff."""
    views = []
    for finding in findings:
        votes = finding["feedback"]
        mine = next((int(fb["value"]) for fb in votes if fb["user_key"] == user_key), 0)
        views.append(
            FindingView(
                finding=finding,
                up=sum(1 for fb in votes if fb["value"] > 0),
                down=sum(1 for fb in votes if fb["value"] < 0),
                net=sum(int(fb["value"]) for fb in votes),
                mine=mine,
            )
        )
    views.sort(
        key=lambda v: (
            VERDICT_ORDER.index(v.finding["verdict"]),
            SEVERITY_RANK.get(v.finding["severity"], len(SEVERITY_RANK)),
            v.finding["path"],
            v.finding["line"],
        )
    )
    return views


def window_start(today: date, *, weeks: Sequence[date]) -> datetime:
    """Midnight UTC of the first week shown: the queries' lower bound."""
    first = weeks[0] if weeks else today
    return datetime.combine(first, time.min, tzinfo=UTC)


def acceptance_charts(rows: Sequence[WeeklyAcceptance], weeks: Sequence[date]) -> dict[str, LineChart]:
    """One line chart per grouping ("reviewer", "category"), a line per reviewer or category."""
    labels = [week.strftime("%b %d") for week in weeks]
    return {by: line_chart(acceptance_series(rows, by=by, weeks=weeks), labels) for by in GROUPINGS}


def acceptance_totals(rows: Sequence[WeeklyAcceptance]) -> list[AcceptanceTotal]:
    """Per (reviewer, category) over the whole window, most judged first."""
    sums: dict[tuple[str, str], tuple[int, int]] = {}
    for row in rows:
        acc, rej = sums.get((row.reviewer, row.category), (0, 0))
        sums[(row.reviewer, row.category)] = (acc + row.accepted, rej + row.rejected)
    totals = [
        AcceptanceTotal(f"{reviewer} · {category}", acc, rej, acceptance_rate(acc, rej))
        for (reviewer, category), (acc, rej) in sums.items()
    ]
    return sorted(totals, key=lambda t: (-(t.accepted + t.rejected), t.label))


@dataclass(frozen=True)
class RuleAcceptance:
    rule: str
    reviewer: str
    accepted: int
    rejected: int
    rate: float | None


def rule_acceptance(rows: Sequence[WeeklyAcceptance]) -> list[RuleAcceptance]:
    """Per rule over the window: which rules people accept and which they reject, most judged first."""
    sums: dict[tuple[str, str], tuple[int, int]] = {}
    for row in rows:
        key = (row.rule or "(model)", row.reviewer)
        acc, rej = sums.get(key, (0, 0))
        sums[key] = (acc + row.accepted, rej + row.rejected)
    out = [RuleAcceptance(rule, rev, acc, rej, acceptance_rate(acc, rej)) for (rule, rev), (acc, rej) in sums.items()]
    return sorted(out, key=lambda r: (-(r.accepted + r.rejected), r.rule))


def volume_chart(volumes: Sequence[MergeRequestVolume]) -> BarChart:
    """REAL findings per merge request: the comments the reporter posts (or would, for local reviews)."""
    return bar_chart(
        [
            (mr_label(project=v.project, mr_iid=v.mr_iid, review_id=v.review_id, web_url=v.web_url), v.real)
            for v in volumes
        ]
    )


def gate_decision(run: TrainingRunRow) -> str | None:
    """An eval run's verdict on its candidate, from its metrics (`decision`, else `promoted`), or its reason."""
    if run["kind"] != "eval":
        return None
    metrics: Mapping[str, Any] = run["metrics"] or {}
    if "decision" in metrics:
        return str(metrics["decision"])
    if "promoted" in metrics:
        return "promote" if metrics["promoted"] else "keep current"
    return run["reason"]


def run_views(runs: Sequence[TrainingRunRow], versions: Sequence[ModelVersionRow]) -> list[RunView]:
    names = {v["id"]: v["name"] for v in versions}
    return [
        RunView(run, names.get(run["model_version_id"]) if run["model_version_id"] else None, gate_decision(run))
        for run in runs
    ]


def version_names(versions: Sequence[ModelVersionRow]) -> dict[int, str]:
    return {v["id"]: v["name"] for v in versions}
