"""The model's `search` on the GitLab workspace: files it must fetch over HTTP are counted by the call's
budget, and a file without the pattern's required literal is not matched line by line (issue 40,
low items). At 2a83aab a search fetched every file of its scope uncounted, and matched every line of
each. Real HTTP to the GitLab fake with python-gitlab."""

from __future__ import annotations

import pytest
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab

from agent.diff import parse_unified_diff
from agent.gitlab.client import GitLabPlatform
from reviewers.kernel.budget import SearchBudget
from reviewers.kernel.contracts import ReviewContext
from reviewers.pattern_search import PatternSearch
from reviewers.security import SECURITY
from reviewers.tools import Toolbox

FOLDER = 30  # files beside the changed one, in its folder: all in the search scope
MAX_READS = 10


def file_reads(gitlab: FakeGitLab) -> int:
    return sum(1 for r in gitlab.requests if "/repository/files/" in r.path)


def test_search_counts_its_http_reads_and_says_what_it_left_unread() -> None:
    head = {"pkg/changed.py": "import os\nTOKEN = os.environ['TOKEN']\n"}
    head |= {f"pkg/mod_{i:02}.py": f"VALUE_{i} = {i}\n" + ("x = 1\n" * 50) for i in range(FOLDER)}
    with FakeGitLab() as gitlab:
        gitlab.add_project(42, "team/service")
        mr = gitlab.add_merge_request(
            42, 7, files_base={k: v for k, v in head.items() if k != "pkg/changed.py"}, files_head=head
        )
        platform = GitLabPlatform(gitlab.url, BOT_TOKEN)
        workspace = platform.workspace(42, mr.latest.head_sha, changed_paths=["pkg/changed.py"])
        before = file_reads(gitlab)
        budget = SearchBudget(max_reads=MAX_READS)
        hits = workspace.search(r"VALUE_\d+ = ", budget=budget)
        assert file_reads(gitlab) - before <= MAX_READS + 1  # the changed file, and the budget's reads
        assert budget.reads == MAX_READS
        assert budget.unread == FOLDER + 1 - MAX_READS
        assert 0 < len(hits) <= MAX_READS
        # the files already read cost no read a second time
        again = SearchBudget(max_reads=0)
        assert {h.path for h in workspace.search(r"VALUE_\d+ = ", budget=again)} == {h.path for h in hits}
        assert again.reads == 0


def test_the_prefilter_skips_files_without_the_required_literal() -> None:
    head = {"a/changed.py": "def f():\n    return eval(x)\n", "a/other.py": "y = 2\n" * 200}
    with FakeGitLab() as gitlab:
        gitlab.add_project(42, "team/service")
        mr = gitlab.add_merge_request(42, 7, files_base={"a/other.py": head["a/other.py"]}, files_head=head)
        platform = GitLabPlatform(gitlab.url, BOT_TOKEN)
        workspace = platform.workspace(42, mr.latest.head_sha, changed_paths=["a/changed.py"])
        matched: list[str] = []
        original = PatternSearch.matches

        def counting(self: PatternSearch, line: str) -> bool:
            matched.append(line)
            return original(self, line)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(PatternSearch, "matches", counting)
            hits = workspace.search(r"eval\(", budget=SearchBudget())
        assert [(h.path, h.line) for h in hits] == [("a/changed.py", 2)]
        assert len(matched) == 3  # the changed file's lines only: other.py lacks "eval("


def test_the_search_tool_names_the_files_it_left_unread() -> None:
    head = {"pkg/changed.py": "import os\n"} | {f"pkg/m{i:03}.py": "z = 0\n" for i in range(80)}
    with FakeGitLab() as gitlab:
        gitlab.add_project(42, "team/service")
        mr = gitlab.add_merge_request(
            42, 7, files_base={k: v for k, v in head.items() if k != "pkg/changed.py"}, files_head=head
        )
        platform = GitLabPlatform(gitlab.url, BOT_TOKEN)
        workspace = platform.workspace(42, mr.latest.head_sha, changed_paths=["pkg/changed.py"])
        patch = "--- /dev/null\n+++ b/pkg/changed.py\n@@ -0,0 +1 @@\n+import os\n"
        context = ReviewContext(title="t", description="", files=parse_unified_diff(patch), workspace=workspace)
        outcome = Toolbox(SECURITY, context, ["pkg/changed.py"]).search("never_present_anywhere")
        assert outcome.valid
        assert "no match" in outcome.observation and "not read" in outcome.observation, outcome.observation
