"""The model's `search` tool with catastrophic patterns (issue 11, item 6; issue 21; issue 40): patterns
that backtrack exponentially (`(a|a)*$`) or slowly on every line (`a*a*a*a*[bc]`) now run on a
linear-time engine and finish, with the same answer on every workspace — the one the worker uses
(GitLab over real HTTP, the GitLab-compatible server), the in-memory ones, and a local repository — and
patterns that need backtracking (backreferences, lookarounds) are refused as invalid steps, on the
local repository too, where they used to reach `git grep`'s engine. No clock bounds a search: what it
costs is the characters it matches, counted by the call's budget."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab

from agent.diff import parse_unified_diff
from agent.gitlab.client import GitLabPlatform
from agent.gitrepo import open_repository
from agent.workspaces.diff import DiffWorkspace
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.kernel.budget import SearchBudget
from reviewers.kernel.contracts import ReviewContext, Workspace
from reviewers.security import SECURITY
from reviewers.tools import Toolbox

EVIL = r"(a|a)*$"
# 40 lines each taking Python's re ~2^24 steps: minutes in all on a backtracking engine
HOSTILE = "".join("a" * 24 + "b\n" for _ in range(40))
# Issue 21: slow on every line for a backtracking engine (~0.08 s a line on an idle two-core box, ~10 s
# over these 120 lines); the time budget refused it, or not, depending on the machine's load
SLOW_EVERYWHERE = r"a*a*a*a*[bc]"
SLOW_TEXT = "".join("a" * 300 + "\n" for _ in range(120))
FILES = {"trap.txt": HOSTILE, "slow.txt": SLOW_TEXT}
PATCH = "".join(
    f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(text.splitlines())} @@\n"
    + "".join(f"+{line}\n" for line in text.splitlines())
    for path, text in FILES.items()
)
# git's own regex engine has backreferences and tries every split of a line: ~5 s over HOSTILE
GIT_EVIL = r"(.*)(.*)(.*)(.*)\4\3\2\1c"
REFUSED = {GIT_EVIL: "backtracking", r"(?<=a)b": "backtracking", r"(a+)\1": "backtracking", r"\pL{50}": "too large"}
SEARCHES = [EVIL, SLOW_EVERYWHERE, r"a{3}b$", r"a{300}$"]
# Not a speed test: a catastrophic pattern on a backtracking engine took minutes here; a linear one, a
# fraction of a second. The bound only catches a return to backtracking, on a loaded shared machine.
SLACK_S = 30.0


@contextmanager
def gitlab_workspace() -> Iterator[Workspace]:
    with FakeGitLab() as gitlab:
        gitlab.add_project(42, "team/service")
        mr = gitlab.add_merge_request(42, 7, files_base={}, files_head=FILES)
        yield GitLabPlatform(gitlab.url, BOT_TOKEN).workspace(42, mr.latest.head_sha, changed_paths=sorted(FILES))


@contextmanager
def repository_workspace(root: Path) -> Iterator[Workspace]:
    for path, text in FILES.items():
        (root / path).write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", *FILES], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "trap"], cwd=root, check=True)
    repo = open_repository(root)
    yield repo.workspace(repo.resolve("HEAD"))


@contextmanager
def in_memory(make: Callable[[], Workspace]) -> Iterator[Workspace]:
    yield make()


def box(workspace: Workspace) -> Toolbox:
    context = ReviewContext(title="t", description="", files=parse_unified_diff(PATCH), workspace=workspace)
    return Toolbox(SECURITY, context, sorted(FILES))


def answers(workspace: Workspace) -> list[str]:
    tools = box(workspace)
    started = time.monotonic()
    said = [tools.search(pattern).observation for pattern in SEARCHES]
    assert time.monotonic() - started < SLACK_S
    for pattern, reason in REFUSED.items():
        outcome = tools.search(pattern)
        assert not outcome.valid and reason in outcome.observation, outcome.observation
    return said


@pytest.fixture(params=["gitlab", "snapshot", "diff", "repository"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Workspace]:
    makers = {
        "gitlab": gitlab_workspace,
        "snapshot": lambda: in_memory(lambda: SnapshotWorkspace(FILES)),
        "diff": lambda: in_memory(lambda: DiffWorkspace(parse_unified_diff(PATCH))),
        "repository": lambda: repository_workspace(tmp_path),
    }
    with makers[request.param]() as made:
        yield made


def test_catastrophic_patterns_finish_with_the_same_answer_and_backtracking_ones_are_refused(
    workspace: Workspace,
) -> None:
    evil, slow_everywhere, ordinary, whole_line = answers(workspace)
    # `(a|a)*$` matches every line (at its end): the page fills, as for any pattern that matches everywhere
    assert evil.startswith(f"20 matches for {EVIL!r} (more not shown)"), evil
    # on slow.txt's lines of a's alone it finds nothing; the trap's lines end in b
    assert slow_everywhere.startswith(f"20 matches for {SLOW_EVERYWHERE!r}") and "slow.txt" not in slow_everywhere
    # an ordinary pattern finds its lines, and only those
    assert ordinary.startswith(f"20 matches for {'a{3}b$'!r}") and "trap.txt:1:" in ordinary, ordinary
    assert "slow.txt" not in ordinary
    assert "120 matches" not in whole_line and "slow.txt:1:" in whole_line, whole_line
    # every workspace gives the answer the in-memory snapshot gives
    assert [evil, slow_everywhere, ordinary, whole_line] == answers(SnapshotWorkspace(FILES))


def test_what_a_search_matches_is_counted_in_characters_not_seconds(workspace: Workspace) -> None:
    nowhere = r"a*a*a*a*[cd]"  # slow everywhere on a backtracking engine, and no line matches
    budget = SearchBudget()
    assert workspace.search(nowhere, max_hits=20, budget=budget) == []
    # every line of both files matched once, each charged its length: a linear cost, the same on any machine
    assert budget.scanned == sum(len(line) for text in FILES.values() for line in text.splitlines())
    assert budget.unsearched == 0
    # a smaller budget stops at the same line every time, and says how much it left
    for _ in range(2):
        small = SearchBudget(max_chars=300 * 50 + 10)
        assert workspace.search(nowhere, max_hits=20, budget=small) == []
        # fifty lines of slow.txt (first in path order); it was cut short and trap.txt never reached
        assert small.scanned == 300 * 50 and small.unsearched == 2
