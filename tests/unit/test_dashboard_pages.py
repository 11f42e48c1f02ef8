"""What the dashboard pages show, shaped from store rows, and the template filters that print it."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any, cast

from markupsafe import Markup

from agent.store.models import TrainingRunRow
from agent.store.reviews import FindingDetail
from api.dashboard.pages import (
    acceptance_totals,
    finding_views,
    gate_decision,
    mr_label,
    verdict_cells,
    window_start,
)
from api.dashboard.queries import WeeklyAcceptance
from api.dashboard.templating import format_value, inline_code, metric_items, render, when


def finding(
    fid: int, *, verdict: str, severity: str, path: str = "a.py", line: int = 1, votes: Any = ()
) -> FindingDetail:
    feedback = [{"user_key": user, "value": value} for user, value in votes]
    return cast(
        FindingDetail,
        {"id": fid, "verdict": verdict, "severity": severity, "path": path, "line": line, "feedback": feedback},
    )


def test_findings_are_ordered_real_first_then_by_severity_and_place() -> None:
    views = finding_views(
        [
            finding(1, verdict="FALSE_POSITIVE", severity="critical"),
            finding(2, verdict="REAL", severity="low"),
            finding(3, verdict="REAL", severity="high", path="b.py"),
            finding(4, verdict="REAL", severity="high", path="a.py", line=9),
            finding(5, verdict="NEEDS_HUMAN_REVIEW", severity="info"),
        ],
        user_key="token:alice",
    )
    assert [v.finding["id"] for v in views] == [4, 3, 2, 5, 1]


def test_vote_tallies_and_the_viewers_own_vote() -> None:
    votes = [("gitlab:1", 1), ("gitlab:2", -1), ("token:alice", -1), ("token:ci", 0)]
    [view] = finding_views([finding(1, verdict="REAL", severity="low", votes=votes)], user_key="token:alice")
    assert (view.up, view.down, view.net, view.mine) == (1, 2, -1, -1)
    [other] = finding_views([finding(1, verdict="REAL", severity="low", votes=votes)], user_key="token:bob")
    assert other.mine == 0


def test_labels_and_verdict_columns() -> None:
    assert mr_label(project="g/p", mr_iid=12) == "g/p !12"
    assert mr_label(project="", mr_iid=None, review_id=7) == "(local) review #7"
    assert mr_label(project="g/p", mr_iid=None) == "g/p"
    assert verdict_cells({"REAL": 2, "DUPLICATE": 1}) == [
        ("REAL", 2),
        ("NEEDS_HUMAN_REVIEW", 0),
        ("DUPLICATE", 1),
        ("FALSE_POSITIVE", 0),
    ]


def run(kind: str, metrics: dict[str, Any], reason: str | None = None) -> TrainingRunRow:
    return cast(TrainingRunRow, {"kind": kind, "metrics": metrics, "reason": reason})


def test_gate_decision_comes_from_eval_runs_only() -> None:
    assert gate_decision(run("eval", {"decision": "promote", "promoted": False})) == "promote"
    assert gate_decision(run("eval", {"promoted": True})) == "promote"
    assert gate_decision(run("eval", {"promoted": False})) == "keep current"
    assert gate_decision(run("eval", {}, reason="no held-out reviews")) == "no held-out reviews"
    assert gate_decision(run("sft", {"decision": "promote"})) is None


def test_acceptance_totals_sum_weeks_most_judged_first() -> None:
    w1, w2 = date(2026, 11, 9), date(2026, 11, 16)
    totals = acceptance_totals(
        [
            WeeklyAcceptance(w1, "security", "security", 1, 0),
            WeeklyAcceptance(w2, "security", "security", 1, 1),
            WeeklyAcceptance(w2, "code_quality", "code_quality", 0, 1),
        ]
    )
    assert [(t.label, t.accepted, t.rejected, t.rate) for t in totals] == [
        ("security · security", 2, 1, 2 / 3),
        ("code_quality · code_quality", 0, 1, 0.0),
    ]


def test_window_starts_at_midnight_utc_of_the_first_week() -> None:
    assert window_start(date(2026, 11, 21), weeks=[date(2026, 11, 2)]) == datetime(2026, 11, 2, tzinfo=UTC)


def test_inline_code_escapes_everything_and_keeps_code_spans() -> None:
    out = inline_code("use `<b>x</b>` & <script>`y`")
    assert isinstance(out, Markup)
    assert out == "use <code>&lt;b&gt;x&lt;/b&gt;</code> &amp; &lt;script&gt;<code>y</code>"
    assert inline_code("a `b") == "a `b"


def test_times_and_metrics_for_people() -> None:
    assert when(datetime(2026, 1, 2, 3, 4, tzinfo=timezone(timedelta(hours=2)))) == "2026-01-02 01:04 UTC"
    assert when(None) == "—"
    assert [format_value(v) for v in (0.123456, 3, True, None, float("nan"), "x")] == [
        "0.1235",
        "3",
        "yes",
        "—",
        "—",
        "x",
    ]
    assert metric_items({"a": {"b": 1.5, "c": [1, 2]}, "d": "x"}) == [("a.b", "1.5"), ("a.c", "[2 values]"), ("d", "x")]
    assert metric_items({str(i): i for i in range(30)}, limit=2) == [("0", "0"), ("1", "1")]


def test_login_page_renders_with_escaped_values() -> None:
    html = render("dashboard/login.html", viewer=None, csrf='"><x', next="/dashboard", error="<b>no</b>")
    assert 'value="&#34;&gt;&lt;x"' in html and "&lt;b&gt;no&lt;/b&gt;" in html
