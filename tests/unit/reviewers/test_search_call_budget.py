"""The model's `search` has one budget per call, counted in characters matched, never in seconds (issue 40,
after issue 21's time budget), and the review deadline holds inside long steps (the reading of test files).

A budget in seconds answered a busy machine differently from an idle one. Here the same search gives the
same answer whatever the clock says and however slowly each line is matched; the budget is spent
because lines were matched, and the search says what it left. Every clock is injected (`Tick` advances
a fixed amount per reading), so nothing rides on how fast this machine is.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from agent.diff import parse_unified_diff
from agent.gitlab.models import ProjectRef
from agent.gitlab.workspace import GitLabWorkspace
from agent.workspaces.diff import DiffWorkspace
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers import run_reviewer
from reviewers.analyzers.tests_lookup import TestIndex
from reviewers.kernel.budget import SEARCH_CALL_MAX_CHARS, SearchBudget
from reviewers.kernel.contracts import CoverageReason, PlanItem, ReviewContext, Workspace
from reviewers.pattern_search import PatternSearch
from reviewers.security import SECURITY
from reviewers.tools import Toolbox

LINES = 100
TEXT = "".join(f"value_{i} = compute()\n" for i in range(LINES))
PATCH = f"--- /dev/null\n+++ b/app/values.py\n@@ -0,0 +1,{LINES} @@\n" + "".join(f"+{x}\n" for x in TEXT.splitlines())
NO_LITERAL = r"\d{5}"  # no line has five digits in a row, and no literal lets the prefilter skip the file
FIRST_TEN = sum(len(line) for line in TEXT.splitlines()[:10])


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
def test_the_call_budget_counts_the_characters_matched(workspace: Workspace) -> None:
    # room for ten lines and half of the eleventh: the search matches ten, and says the file was cut short
    budget = SearchBudget(max_chars=FIRST_TEN + 5)
    assert workspace.search(NO_LITERAL, max_hits=20, budget=budget) == []
    assert budget.scanned == FIRST_TEN and budget.unsearched == 1
    # the hits found before the budget ran out are kept
    found = SearchBudget(max_chars=FIRST_TEN + 5)
    assert [h.line for h in workspace.search(r"value_\d+ = ", max_hits=20, budget=found)] == list(range(1, 11))
    # the call's default budget covers the file: every line matched, nothing left
    whole = SearchBudget()
    assert workspace.search(NO_LITERAL, max_hits=20, budget=whole) == []
    assert whole.scanned == len(TEXT) - LINES and whole.unsearched == 0 and whole.max_chars == SEARCH_CALL_MAX_CHARS
    # without a call budget (the analyzers' own patterns) nothing is counted
    assert [h.line for h in workspace.search(r"value_9\d ", max_hits=20)] == list(range(91, 101))


def context(clock: Tick, *, seconds_to_deadline: float | None) -> ReviewContext:
    files = parse_unified_diff(PATCH)
    ctx = ReviewContext(title="t", description="", files=files, workspace=SnapshotWorkspace({"app/values.py": TEXT}))
    ctx.clock = clock
    if seconds_to_deadline is not None:
        ctx.deadline = clock.now + seconds_to_deadline
    return ctx


SEARCHES = [NO_LITERAL, r"value_\d+ = ", r"a*a*a*a*[bc]", r"(a|a)*$", r"compute\(\)$", r"value_(1|2)\d "]


def observations(clock: Tick) -> list[str]:
    box = Toolbox(SECURITY, context(clock, seconds_to_deadline=None), ["app/values.py"])
    return [box.search(pattern).observation for pattern in SEARCHES]


def test_the_same_search_gives_the_same_answer_on_a_clock_that_races() -> None:
    """Issue 21's budget ran out when the clock said so: 0.05 s a reading was past it on this file."""
    still = observations(Tick(0.0))
    assert observations(Tick(0.05)) == still and observations(Tick(100.0)) == still
    assert still[0] == f"no match for {NO_LITERAL!r}" and "20 matches" in still[1]


def test_the_same_search_gives_the_same_answer_when_every_line_is_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine under load: each line takes 10 ms to match, 1.2 s for the six searches' lines; the
    time budget gave up after 2 s of one call on a loaded machine."""
    still = observations(Tick(0.0))
    matches = PatternSearch.matches

    def slowly(self: PatternSearch, line: str) -> bool:
        time.sleep(0.01)
        return matches(self, line)

    monkeypatch.setattr(PatternSearch, "matches", slowly)
    assert observations(Tick(0.0)) == still


def test_the_search_tool_names_what_its_budget_left_unsearched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SearchBudget, "__init__", _small_budget)
    box = Toolbox(SECURITY, context(Tick(0.0), seconds_to_deadline=None), ["app/values.py"])
    outcome = box.search(r"value_\d+ = ")
    assert outcome.valid, outcome.observation
    assert "10 matches" in outcome.observation and "app/values.py:10:" in outcome.observation
    assert "1 files of the search scope not searched in full" in outcome.observation


def _small_budget(self: SearchBudget, max_chars: int = FIRST_TEN + 5, max_reads: int = 50) -> None:
    self.max_chars, self.max_reads = FIRST_TEN + 5, max_reads
    self.scanned = self.reads = self.unread = self.unsearched = 0


def test_past_the_deadline_a_search_is_not_started() -> None:
    near = Toolbox(SECURITY, context(Tick(0.05), seconds_to_deadline=0.3), ["app/values.py"])
    first = near.search(NO_LITERAL)  # started before the deadline: it runs to its end, whatever the clock
    assert first.valid and first.observation == f"no match for {NO_LITERAL!r}"
    while not near.context.past_deadline():
        pass
    assert "deadline" in near.search("value").observation and not near.search("compute").valid


def test_a_model_searching_past_the_deadline_takes_no_step_after_it(scripted_llm: Any) -> None:
    clock = Tick(0.05)
    ctx = context(clock, seconds_to_deadline=0.5)  # ten readings of the clock
    llm = scripted_llm([{"tool": "search", "pattern": NO_LITERAL + "|" + "x" * i} for i in range(1, 30)])
    result = run_reviewer("security", ctx, PlanItem(reviewer="security", step_budget=30), llm)
    searches = [s for s in result.steps if s.tool == "search"]
    # each search the model made before the deadline ran in full and found nothing; after it no step is taken
    assert searches and all(s.valid and s.observation.startswith("no match") for s in searches)
    assert 1 <= len(searches) <= 10 and ctx.past_deadline()  # each step reads the clock at least once


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
