"""Issue 21, item 9: the workspace keeps what it read up to a number of bytes, not every changed file.

A merge request of many large files is reviewed through the pipeline (graph, strategy, the four
reviewers, verifier) with its files read from the GitLab-compatible server over HTTP: once with a
cache far smaller than the change, once with the default. The small cache never holds more than its
bound, files it evicted are read again, and the review comes out the same.
"""

from __future__ import annotations

from fakes.gitlab_server import BOT_TOKEN, FakeGitLab

from agent.context import ReviewRequest
from agent.gitlab.client import GitLabPlatform
from agent.gitlab.review import load_gitlab_snapshot
from agent.gitlab.workspace import GitLabWorkspace
from agent.pipeline import run_review
from agent.runtime import Runtime
from agent.workspaces.text_cache import TextCache

PID, IID = 42, 7
FILES = 16
SMALL_CACHE = 100 * 1024  # about four of the files below


def large_module(i: int) -> str:
    """~22 KB of plain code with one shell-injection at the top."""
    head = (
        "import subprocess\n\n\n"
        f"def run_{i}(command):\n    return subprocess.run(command, shell=True, check=False)\n\n\n"
    )
    body = "".join(f"def helper_{i}_{n}(value):\n    return value * {n} + {i}\n\n\n" for n in range(500))
    return head + body


def review(cache_bytes: int | None) -> tuple[list[tuple[str, int, str, str]], list[GitLabWorkspace]]:
    files = {f"svc/module_{i:02d}.py": large_module(i) for i in range(FILES)}
    assert sum(len(t) for t in files.values()) > 3 * SMALL_CACHE
    with FakeGitLab() as gitlab:
        gitlab.add_project(PID, "team/svc")
        mr = gitlab.add_merge_request(PID, IID, files_base={}, files_head=files, title="Many modules")
        platform = (
            GitLabPlatform(gitlab.url, BOT_TOKEN)
            if cache_bytes is None
            else GitLabPlatform(gitlab.url, BOT_TOKEN, workspace_cache_bytes=cache_bytes)
        )
        used: list[GitLabWorkspace] = []

        def loader(request: ReviewRequest) -> tuple[object, GitLabWorkspace, object]:
            snapshot, workspace, changed = load_gitlab_snapshot(platform, request, since_head=None)
            assert isinstance(workspace, GitLabWorkspace)
            used.append(workspace)
            return snapshot, workspace, changed

        request = ReviewRequest(source="gitlab", project="team/svc", mr_iid=IID, head=mr.latest.head_sha)
        outcome = run_review(Runtime(pool=None, llm=None, loaders={"gitlab": loader}), request, dsn=None)  # type: ignore[dict-item]
    found = sorted((v.finding.path, v.finding.line, v.finding.rule, v.verdict) for v in outcome.verified)
    return found, used


def test_a_large_review_stays_within_the_cache_bound_with_the_same_result() -> None:
    bounded, [small] = review(SMALL_CACHE)
    unbounded, [default] = review(None)
    assert small.cache.peak_bytes <= SMALL_CACHE
    assert small.cache.misses > FILES  # evicted files were read again
    assert default.cache.peak_bytes > SMALL_CACHE  # the change is larger than the small bound
    assert bounded == unbounded
    assert sum(1 for path, _line, _rule, _verdict in bounded if path.startswith("svc/module_")) >= 1


def test_the_cache_evicts_the_least_recently_used_and_never_keeps_a_text_larger_than_its_bound() -> None:
    cache = TextCache(max_bytes=3 * 1100)
    texts = {name: name * 1000 for name in "abcd"}
    for name in "abc":
        cache.store(name, texts[name])
    assert cache.lookup("a") == (True, texts["a"])  # a is now the most recent
    cache.store("d", texts["d"])  # b goes
    assert cache.lookup("b") == (False, None) and cache.lookup("a")[0] and cache.lookup("d")[0]
    assert cache.bytes <= cache.max_bytes and len(cache) == 3
    cache.store("huge", "x" * 10_000)
    assert cache.lookup("huge") == (False, None) and len(cache) == 3
    cache.store("gone", None)  # an absent file is remembered, at a small cost
    assert cache.lookup("gone") == (True, None) and cache.bytes <= cache.max_bytes
