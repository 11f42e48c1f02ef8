"""The model's `search` tool with a catastrophic pattern (issue 11, item 6): `(a|a)*$` passes the
nested-quantifier filter and backtracks exponentially on a run of a's. The search now runs on an
engine with a time budget and the call is refused as an invalid step, on the workspace the worker
uses (GitLab over real HTTP, the GitLab-compatible server) and on the in-memory ones."""

from __future__ import annotations

import time

from fakes.gitlab_server import BOT_TOKEN, FakeGitLab

from agent.diff import parse_unified_diff
from agent.gitlab.client import GitLabPlatform
from agent.workspaces.diff import DiffWorkspace
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.kernel.contracts import ReviewContext, Workspace
from reviewers.pattern_search import SEARCH_TIME_BUDGET_S
from reviewers.security import SECURITY
from reviewers.tools import Toolbox

EVIL = r"(a|a)*$"
# 40 lines each taking Python's re ~2^24 steps: minutes in all before, one budget now
HOSTILE = "".join("a" * 24 + "b\n" for _ in range(40))
PATCH = "--- /dev/null\n+++ b/trap.txt\n@@ -0,0 +1,40 @@\n" + "".join(f"+{line}\n" for line in HOSTILE.splitlines())
SLACK_S = 30.0  # wall time on a loaded two-core machine; the budget itself is CPU-bound matching


def search_with(workspace: Workspace) -> None:
    files = parse_unified_diff(PATCH)
    box = Toolbox(SECURITY, ReviewContext(title="t", description="", files=files, workspace=workspace), ["trap.txt"])
    started = time.monotonic()
    outcome = box.search(EVIL)
    elapsed = time.monotonic() - started
    assert not outcome.valid and "budget" in outcome.observation, outcome.observation
    assert elapsed < SEARCH_TIME_BUDGET_S + SLACK_S, elapsed
    # an ordinary pattern still finds its lines
    ordinary = box.search(r"a{3}b$")
    assert ordinary.valid and "trap.txt:40" not in ordinary.observation and "trap.txt:1:" in ordinary.observation


def test_a_catastrophic_search_pattern_is_refused_on_the_gitlab_workspace() -> None:
    with FakeGitLab() as gitlab:
        gitlab.add_project(42, "team/service")
        mr = gitlab.add_merge_request(42, 7, files_base={}, files_head={"trap.txt": HOSTILE})
        platform = GitLabPlatform(gitlab.url, BOT_TOKEN)
        search_with(platform.workspace(42, mr.latest.head_sha, changed_paths=["trap.txt"]))


def test_a_catastrophic_search_pattern_is_refused_on_the_local_workspaces() -> None:
    search_with(SnapshotWorkspace({"trap.txt": HOSTILE}))
    search_with(DiffWorkspace(parse_unified_diff(PATCH)))
