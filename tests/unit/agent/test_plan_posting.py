"""`agent.plan_posting`: the one decision serving and the replay environment share."""

from __future__ import annotations

from agent.plan_posting import floor_reason, plan_visits, split_by_plan
from agent.strategy import Strategy
from reviewers.kernel.contracts import Finding, PlanItem


def finding(
    path: str, *, reviewer: str = "security", severity: str = "high", rule: str = "python:open-redirect", **more: str
) -> Finding:
    return Finding.model_validate(
        {"path": path, "line": 3, "end_line": 3, "category": reviewer, "confidence": "high",
         "severity": severity, "title": "t", "body": "b", "reviewer": reviewer, "rule": rule, **more}
    )  # fmt: skip


def test_visited_findings_post_the_rest_are_listed_except_the_floor() -> None:
    visits = [("security", "a.py")]
    found = [
        finding("a.py"),
        finding("b.py"),  # security on a file the plan did not visit: listed
        finding("a.py", reviewer="code_quality", rule="ruff:F401"),  # another reviewer on a visited file: listed
        finding("c.py", severity="critical", rule="secrets:aws"),  # the floor: critical
        finding("d.py", reviewer="architecture", rule="layers:forbidden-import"),  # the project's own rule
        finding("e.py", rule="python:removed-guard"),  # a removed guard
        finding("f.py", rule="python:sql-interpolation", cwe="CWE-89"),  # request data into SQL: the plan's
    ]
    split = split_by_plan(found, visits)
    assert [f.path for f in split.posted] == ["a.py", "c.py", "d.py", "e.py"]
    assert [(f.path, f.reviewer) for f in split.listed] == [
        ("b.py", "security"),
        ("a.py", "code_quality"),
        ("f.py", "security"),
    ]
    assert floor_reason(found[3]) == "critical" and floor_reason(found[1]) is None


def test_plan_visits_follow_budgets_and_the_shared_review_budget() -> None:
    z = Strategy(
        change_type="feature",
        plan=[
            PlanItem(reviewer="security", focus_paths=["b.py", "a.py"], step_budget=2),
            PlanItem(reviewer="code_quality", focus_paths=[], step_budget=5),
        ],
    )
    readable = {"security": ["a.py", "b.py", "c.py"], "code_quality": ["a.py", "b.py", "c.py"]}
    assert plan_visits(z, readable, review_budget=None) == (
        ("security", "b.py"), ("security", "a.py"),
        ("code_quality", "a.py"), ("code_quality", "b.py"), ("code_quality", "c.py"),
    )  # fmt: skip
    assert plan_visits(z, readable, review_budget=3) == (
        ("security", "b.py"), ("security", "a.py"), ("code_quality", "a.py"),
    )  # fmt: skip
