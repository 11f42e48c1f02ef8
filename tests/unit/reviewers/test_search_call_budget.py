"""Issue 21, item 7: the model's `search` has one time budget per call, spent line by line inside the
match loop, and the review deadline holds inside long steps (a search, the reading of test files).

Every clock here is injected (`Tick` advances a fixed amount per reading), so nothing rides on how
fast this machine is: a budget is spent because the clock says so, not because matching was slow.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.diff import parse_unified_diff
from agent.gitlab.models import ProjectRef
from agent.gitlab.workspace import GitLabWorkspace
from agent.workspaces.diff import DiffWorkspace
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers import run_reviewer
from reviewers.analyzers.tests_lookup import TestIndex
from reviewers.kernel.budget import BudgetExhaustedError, SearchBudget
from reviewers.kernel.contracts import CoverageReason, PlanItem, ReviewContext, Workspace
from reviewers.pattern_search import SEARCH_CALL_BUDGET_S
from reviewers.security import SECURITY
from reviewers.tools import Toolbox

LINES = 100
TEXT = "".join(f"value_{i} = compute()\n" for i in range(LINES))
PATCH = f"--- /dev/null\n+++ b/app/values.py\n@@ -0,0 +1,{LINES} @@\n" + "".join(f"+{x}\n" for x in TEXT.splitlines())
NO_LITERAL = r"\d{5}"  # no line has five digits in a row, and no literal lets the prefilter skip the file


class Tick:
    """A clock that moves `step` seconds each time it is read."""

    def __init__(self, step: float, start: float = 1000.0) -> None:
        self.step = step
        self.now = start
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        self.now += self.step
        return self.now


class Files:
    """A `FileSource` for the GitLab workspace, in memory (the over-HTTP case is in the integration test)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def read_text(
        self, project: ProjectRef, path: str, ref: str
    ) -> tuple[str | None, tuple[CoverageReason, str] | None]:
        return self.files.get(path), None

    def list_paths(self, project: ProjectRef, ref: str) -> list[str]:
        return sorted(self.files)


def workspaces() -> list[Workspace]:
    gitlab = GitLabWorkspace(Files({"app/values.py": TEXT}), "t/s", "h", changed_paths=["app/values.py"])
    return [SnapshotWorkspace({"app/values.py": TEXT}), DiffWorkspace(parse_unified_diff(PATCH)), gitlab]


@pytest.mark.parametrize("workspace", workspaces(), ids=["snapshot", "diff", "gitlab"])
def test_the_call_budget_is_spent_line_by_line(workspace: Workspace) -> None:
    # the clock is read when a line's match starts and when it is charged: each line costs 0.1 s on
    # it, and a 1 s budget is gone after ten or eleven lines of a hundred
    clock = Tick(0.1)
    budget = SearchBudget(1.0, clock)
    with pytest.raises(BudgetExhaustedError, match="budget for one search"):
        workspace.search(NO_LITERAL, max_hits=20, budget=budget)
    assert 1.0 <= budget.spent <= 1.1 + 1e-9
    assert clock.readings <= 2 * 11  # the loop stopped at the eleventh line or so, not after the hundredth

    # a clock that does not move: the same search reads every line and finds nothing, unrefused
    assert workspace.search(NO_LITERAL, max_hits=20, budget=SearchBudget(1.0, Tick(0.0))) == []
    # without a call budget (the analyzers' own patterns) only the per-line limit applies
    assert workspace.search(r"value_9\d ", max_hits=20) != []


def context(clock: Tick, *, seconds_to_deadline: float | None) -> ReviewContext:
    files = parse_unified_diff(PATCH)
    ctx = ReviewContext(title="t", description="", files=files, workspace=SnapshotWorkspace({"app/values.py": TEXT}))
    ctx.clock = clock
    if seconds_to_deadline is not None:
        ctx.deadline = clock.now + seconds_to_deadline
    return ctx


def test_the_search_tool_gets_one_budget_per_call_and_never_more_than_the_deadline_leaves() -> None:
    box = Toolbox(SECURITY, context(Tick(0.05), seconds_to_deadline=None), ["app/values.py"])
    outcome = box.search(NO_LITERAL)  # 0.05 s a line on this clock: 100 lines, past the call budget
    assert not outcome.valid and f"{SEARCH_CALL_BUDGET_S:g} s budget for one search" in outcome.observation
    # the next call gets a fresh budget: a pattern whose hits fill the page on the first 20 lines
    found = box.search(r"value_\d+ = ")
    assert found.valid and "app/values.py:20:" in found.observation

    # 0.3 s to the deadline: the call's budget is 0.3 s, not SEARCH_CALL_BUDGET_S
    near = Toolbox(SECURITY, context(Tick(0.05), seconds_to_deadline=0.3), ["app/values.py"])
    outcome = near.search(NO_LITERAL)
    assert not outcome.valid and "budget for one search" in outcome.observation
    assert near.context.past_deadline()
    # past the deadline a search is not started at all
    assert "deadline" in near.search("value").observation and not near.search("compute").valid


def test_a_model_searching_past_the_deadline_is_stopped_inside_its_step(scripted_llm: Any) -> None:
    clock = Tick(0.05)
    ctx = context(clock, seconds_to_deadline=3.0)
    llm = scripted_llm([{"tool": "search", "pattern": NO_LITERAL + "|" + "x" * i} for i in range(1, 30)])
    result = run_reviewer("security", ctx, PlanItem(reviewer="security", step_budget=30), llm)
    searches = [s for s in result.steps if s.tool == "search"]
    # each search spends at most what is left before the deadline; after it no step is taken
    assert 1 <= len(searches) <= 3 and all(not s.valid for s in searches)
    assert ctx.past_deadline() and clock.now <= ctx.deadline + SEARCH_CALL_BUDGET_S  # type: ignore[operator]


FEES = "FEE_CENTS = 30\n\n\ndef refund(amount):\n    charged = fee(amount)\n    return -charged\n\n\ndef fee(amount):\n"
FEES += "    return amount + FEE_CENTS\n"
TESTS = "from billing.fees import fee\n\n\ndef test_fee():\n    assert fee(100) == 145\n"


def test_the_deadline_stops_the_reading_of_test_files_and_no_untested_claim_is_made(build_context: Any) -> None:
    base = {
        "billing/fees.py": "FEE_CENTS = 30\n\n\ndef fee(amount):\n    return amount + FEE_CENTS\n",
        "tests/test_fees.py": TESTS,
    }
    head = {**base, "billing/fees.py": FEES}

    def review(seconds_to_deadline: float | None) -> Any:
        ctx: ReviewContext = build_context(base, head)
        clock = Tick(1.0)
        ctx.clock = clock
        if seconds_to_deadline is not None:
            ctx.deadline = clock.now + seconds_to_deadline
        return run_reviewer("test_impact", ctx, PlanItem(reviewer="test_impact"), None)

    unhurried = review(None)
    assert "tests:untested-new" in [f.rule for f in unhurried.findings]  # refund: no test names it
    # the deadline passes after the analyzer started and before the test files are read
    hurried = review(1.5)
    assert "tests:untested-new" not in [f.rule for f in hurried.findings]
    assert "the review deadline stopped the reading of test files" in (hurried.error or "")

    index = TestIndex(SnapshotWorkspace(head), should_stop=lambda: True)
    assert index.text("tests/test_fees.py") is None and index.stopped
