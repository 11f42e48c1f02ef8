"""The model's `search` tool with a catastrophic pattern (issue 11, item 6): `(a|a)*$` passes the
nested-quantifier filter and backtracks exponentially on a run of a's. The search now runs on an
engine with a time budget and the call is refused as an invalid step, on the workspace the worker
uses (GitLab over real HTTP, the GitLab-compatible server), on the in-memory ones, and on a local
repository searched with `git grep`, whose engine has backreferences to backtrack on."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from fakes.gitlab_server import BOT_TOKEN, FakeGitLab

from agent.diff import parse_unified_diff
from agent.gitlab.client import GitLabPlatform
from agent.gitrepo import open_repository
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
# git's own regex engine is not fooled by EVIL, but backreferences make it try every split of a line:
# ~5 s over HOSTILE before (unbounded, growing with every group), one budget now
GIT_EVIL = r"(.*)(.*)(.*)(.*)\4\3\2\1c"
SLACK_S = 30.0  # wall time on a loaded two-core machine; the budget itself is CPU-bound matching
# Issue 21: a pattern slow on every line but under the line budget on each. `a*a*a*a*[bc]` on 300 a's takes
# ~0.08 s a line on an idle two-core box (well under SEARCH_TIME_BUDGET_S even under load), ~10 s over
# these 120 lines: before, the call ran them all and answered "no match"; now the call's budget refuses it.
SLOW_EVERYWHERE = r"a*a*a*a*[bc]"
SLOW_TEXT = "".join("a" * 300 + "\n" for _ in range(120))


def search_with(workspace: Workspace, evil: str = EVIL) -> None:
    files = parse_unified_diff(PATCH)
    box = Toolbox(SECURITY, ReviewContext(title="t", description="", files=files, workspace=workspace), ["trap.txt"])
    started = time.monotonic()
    outcome = box.search(evil)
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


def test_a_catastrophic_search_pattern_is_refused_on_a_local_repository(tmp_path: Path) -> None:
    (tmp_path / "trap.txt").write_text(HOSTILE)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "trap.txt"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "trap"], cwd=tmp_path, check=True)
    repo = open_repository(tmp_path)
    search_with(repo.workspace(repo.resolve("HEAD")), evil=GIT_EVIL)


def refused_within_one_call(workspace: Workspace) -> None:
    files = parse_unified_diff("--- /dev/null\n+++ b/slow.txt\n@@ -0,0 +1,1 @@\n+a\n")
    box = Toolbox(SECURITY, ReviewContext(title="t", description="", files=files, workspace=workspace), ["slow.txt"])
    outcome = box.search(SLOW_EVERYWHERE)
    assert not outcome.valid and "budget for one search" in outcome.observation, outcome.observation


def test_a_pattern_slow_on_every_line_is_refused_by_the_call_budget() -> None:
    with FakeGitLab() as gitlab:
        gitlab.add_project(42, "team/service")
        mr = gitlab.add_merge_request(42, 7, files_base={}, files_head={"slow.txt": SLOW_TEXT})
        platform = GitLabPlatform(gitlab.url, BOT_TOKEN)
        refused_within_one_call(platform.workspace(42, mr.latest.head_sha, changed_paths=["slow.txt"]))
    refused_within_one_call(SnapshotWorkspace({"slow.txt": SLOW_TEXT}))
