"""The local git platform against real repositories made with the git command line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agent.diff import parse_unified_diff
from agent.gitrepo import MAX_READ_BYTES, GitRepository, open_repository
from reviewers.kernel.errors import RepositoryError

GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True)
    return result.stdout.strip()


def write(root: Path, path: str, data: str | bytes) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data.encode() if isinstance(data, str) else data)


def commit(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path: Path) -> dict[str, str]:
    """main: base → main2 (edits util.py); feature branches off base and changes app.py, adds files.

    The merge-request diff of feature against main must not show main2's edit reversed."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root, "app.py", "import os\n\n\ndef run(cmd):\n    return cmd\n")
    write(root, "util.py", "def helper():\n    return 1\n")
    write(root, "docs/readme.md", "hello\nrun it with --verbose\n")
    base = commit(root, "base")
    write(root, "util.py", "def helper():\n    return 2\n")
    main2 = commit(root, "main moves on")
    git(root, "checkout", "-q", "-b", "feature", base)
    write(root, "app.py", "import os\n\n\ndef run(cmd):\n    os.system(cmd)  # danger\n    return cmd\n")
    write(root, "pkg/new module.py", "VALUE = 'café'\n")
    write(root, "image.bin", b"\x00\x01\x02binary")
    write(root, "big.txt", "x" * (MAX_READ_BYTES + 10))
    feature = commit(root, "feature work")
    return {"root": str(root), "base": base, "main2": main2, "feature": feature}


def test_a_plain_directory_is_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="not a git repository"):
        open_repository(tmp_path)
    with pytest.raises(RepositoryError, match="not a git repository"):
        open_repository(tmp_path / "missing")


def test_subdirectory_opens_the_top_level(history: dict[str, str]) -> None:
    repo = open_repository(Path(history["root"]) / "docs")
    assert repo.root == Path(history["root"]).resolve()


def test_resolve_names_and_rejects_unknown_or_option_like_revisions(history: dict[str, str]) -> None:
    repo = open_repository(history["root"])
    assert repo.resolve("feature") == history["feature"]
    assert repo.resolve("main~1") == history["base"]
    assert repo.resolve(history["main2"][:10]) == history["main2"]
    for bad in ("no-such-branch", "--output=/tmp/x", "", "main..feature"):
        with pytest.raises(RepositoryError, match="unknown revision"):
            repo.resolve(bad)


def test_diff_starts_at_the_merge_base(history: dict[str, str]) -> None:
    repo = open_repository(history["root"])
    assert repo.merge_base("main", "feature") == history["base"]
    text = repo.diff("main", "feature")
    files = {f.path: f for f in parse_unified_diff(text)}
    # util.py changed only on main after the branch point: a merge request does not show it.
    assert set(files) == {"app.py", "pkg/new module.py", "image.bin", "big.txt"}
    app = files["app.py"]
    assert app.status == "modified"
    assert app.added_lines() == {5: "    os.system(cmd)  # danger"}
    assert files["image.bin"].is_binary
    assert files["pkg/new module.py"].status == "added"
    assert repo.diff_files("main", "feature") == parse_unified_diff(text)


def test_diff_of_unrelated_histories_falls_back_to_the_base_itself(history: dict[str, str]) -> None:
    root = Path(history["root"])
    git(root, "checkout", "-q", "--orphan", "island")
    git(root, "rm", "-q", "-rf", ".")
    write(root, "only.txt", "alone\n")
    island = commit(root, "island")
    repo = open_repository(root)
    assert repo.merge_base("main", island) is None
    files = parse_unified_diff(repo.diff("main", island))
    assert {f.path: f.status for f in files}["only.txt"] == "added"
    assert {f.path: f.status for f in files}["util.py"] == "deleted"


def test_workspace_reads_files_at_head_not_the_checkout(history: dict[str, str]) -> None:
    root = Path(history["root"])
    repo = open_repository(root)
    write(root, "app.py", "uncommitted edit\n")  # the working tree must not leak into a review
    ws = repo.workspace("feature")
    assert ws.head_sha == history["feature"]
    assert ws.read_file("app.py") == "import os\n\n\ndef run(cmd):\n    os.system(cmd)  # danger\n    return cmd\n"
    assert ws.read_file("pkg/new module.py") == "VALUE = 'café'\n"
    assert ws.read_file("image.bin") is None  # binary
    assert ws.read_file("big.txt") is None  # over 1 MiB
    assert ws.read_file("missing.py") is None
    assert ws.list_paths() == ["app.py", "big.txt", "docs/readme.md", "image.bin", "pkg/new module.py", "util.py"]
    assert repo.workspace("main").read_file("util.py") == "def helper():\n    return 2\n"


def test_many_files_read_in_one_batch_read_as_one_at_a_time(history: dict[str, str]) -> None:
    repo = open_repository(history["root"])
    batched, single = repo.workspace("feature"), repo.workspace("feature")
    paths = [*batched.list_paths(), "missing.py"]
    batched.read_files(paths)  # one git process: the texts land in the cache
    misses = batched.cache.misses
    assert [batched.read_file(p) for p in paths] == [single.read_file(p) for p in paths]
    assert batched.cache.misses - misses == 2  # only what is never read: big.txt (over 1 MiB) and missing.py


def test_workspace_caches_reads(history: dict[str, str]) -> None:
    ws = open_repository(history["root"]).workspace("feature")
    first = ws.read_file("app.py")
    assert first is not None and ws.read_file("app.py") is first


def test_search_finds_lines_bounded_and_takes_a_bad_regex_literally(history: dict[str, str]) -> None:
    ws = open_repository(history["root"]).workspace("feature")
    hits = ws.search(r"os\.system\(")
    assert [(h.path, h.line, h.text) for h in hits] == [("app.py", 5, "    os.system(cmd)  # danger")]
    assert [h.path for h in ws.search("def (run|helper)")] == ["app.py", "util.py"]
    assert len(ws.search("[a-z]", max_hits=2)) == 2
    assert ws.search("(cmd", max_hits=5) == ws.search(r"\(cmd", max_hits=5)  # unbalanced "(" as text
    assert [h.line for h in ws.search("(cmd")] == [4, 5]
    verbose = ws.search("--verbose")  # a pattern that looks like an option is still a pattern
    assert [(h.path, h.line) for h in verbose] == [("docs/readme.md", 2)]
    assert ws.search("binary") == []  # binary files are skipped
    assert ws.search("nothing matches this") == []


def test_search_hits_are_bounded_in_a_large_file(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    write(tmp_path, "many.txt", "".join(f"match {i}\n" for i in range(20_000)))
    commit(tmp_path, "many")
    hits = open_repository(tmp_path).workspace("HEAD").search("match", max_hits=7)
    assert [h.line for h in hits] == list(range(1, 8))


def test_bare_repository(history: dict[str, str], tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", history["root"], str(bare))
    repo = open_repository(bare)
    assert isinstance(repo, GitRepository)
    assert repo.workspace("feature").read_file("util.py") == "def helper():\n    return 1\n"
