"""Paths are data (issue 21): any byte GitLab allows in a path survives rendering a diff and reading it
back, quoted by git's own rules (`core.quotePath`), and reads the same as git writes it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from agent.context import render_unified_diff
from agent.diff import parse_unified_diff, quote_path
from agent.reporter import artifact_uri
from reviewers.kernel.contracts import DiffLine, FileChange, Hunk

ODD_PATHS = {
    "newline": "notes\nfor ops.py",
    "tab": "tab\there.py",
    "double quote": 'say "hi".py',
    "backslash": "back\\slash.py",
    "leading dash": "-rf.py",
    "non-ascii": "café/naïve.py",
    "dot-dot": "../outside/x.py",
    "inner dot-dot": "a/../b.py",
    "space and b/": "a b/c b/d.py",
    "control byte": "bell\x07.py",
}
ADDED = FileChange(
    path="x.py",
    old_path="x.py",
    status="added",
    hunks=(Hunk(0, 0, 1, 2, "", (DiffLine("add", "import os", None, 1), DiffLine("add", "x = 1", None, 2))),),
)


@pytest.mark.parametrize("path", list(ODD_PATHS.values()), ids=list(ODD_PATHS))
@pytest.mark.parametrize("status", ["added", "modified", "deleted", "renamed"])
def test_a_rendered_diff_reads_back_the_same_paths(path: str, status: str) -> None:
    old_path = f"old/{path}" if status == "renamed" else path
    change = dataclasses.replace(ADDED, path=path, old_path=old_path, status=status)  # type: ignore[arg-type]
    if status == "deleted":
        change = dataclasses.replace(change, hunks=(Hunk(1, 1, 0, 0, "", (DiffLine("del", "gone = 1", 1, None),)),))
    (back,) = parse_unified_diff(render_unified_diff([change]))
    assert (back.path, back.old_path, back.status) == (path, old_path, status)
    assert back.hunks == change.hunks


def _git(repo: Path, *args: str) -> bytes:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "HOME": str(repo)}
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@x.invalid"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True).stdout


def test_quoting_matches_git_and_git_output_reads_back(tmp_path: Path) -> None:
    """Every odd path as git itself writes it in `diff --git` (core.quotePath on) equals `quote_path`,
    and `git diff` of all of them parses back into exactly those paths."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "keep").write_text("x\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    # a file system resolves ".." (git refuses a path outside the tree): those are the GitLab test's
    inside = {name: p for name, p in ODD_PATHS.items() if ".." not in p}
    for p in inside.values():
        (repo / p).parent.mkdir(parents=True, exist_ok=True)
        (repo / p).write_text("import os\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "odd")
    out = _git(repo, "-c", "core.quotePath=true", "diff", "HEAD~1", "HEAD").decode()
    headers = {line for line in out.split("\n") if line.startswith("diff --git ")}
    assert headers == {f"diff --git {quote_path('a/' + p)} {quote_path('b/' + p)}" for p in inside.values()}
    assert {f.path for f in parse_unified_diff(out)} == set(inside.values())


@pytest.mark.parametrize("path", list(ODD_PATHS.values()), ids=list(ODD_PATHS))
def test_a_sarif_uri_holds_no_byte_a_uri_may_not(path: str) -> None:
    uri = artifact_uri(path)
    assert uri.isascii() and all(c.isprintable() and c not in ' "\\#?' for c in uri)
