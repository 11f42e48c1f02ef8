"""The diff model: every git diff shape we meet, built with real git where git can make it."""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.diff import DiffIndex, parse_file_patch, parse_unified_diff, render_diff_overview
from bench.diff_parse import FILES, HUNKS_PER_FILE, LINES_PER_SIDE, large_diff
from reviewers.kernel.contracts import DiffLine, FileChange
from reviewers.kernel.errors import DiffParseError

# Keep the user's and the system's git config out: a global diff.noprefix would change the output.
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


class Repo:
    """A scratch repository: write files, commit, and diff the last commit the way a review would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=self.root, env=GIT_ENV, check=True, capture_output=True).stdout

    def write(self, path: str, data: str | bytes) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)

    def commit(self) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", "c")

    def diff(self, *extra: str) -> bytes:
        return self.git("diff", "-M", "--no-color", *extra, "HEAD~1", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


def one(files: list[FileChange]) -> FileChange:
    assert len(files) == 1, files
    return files[0]


def lines_of(change: FileChange) -> list[tuple[str, str, int | None, int | None]]:
    return [(ln.kind, ln.text, ln.old_line, ln.new_line) for h in change.hunks for ln in h.lines]


# --- shapes of change -----------------------------------------------------------------------------


@pytest.mark.parametrize("empty", ["", b"", "\n", "  \n\n"])
def test_empty_diff_is_no_files(empty: str | bytes) -> None:
    assert parse_unified_diff(empty) == []


def test_modified_file_numbers_every_line_by_hand() -> None:
    text = (
        "diff --git a/app.py b/app.py\n"
        "index 1111111..2222222 100644\n"
        "--- a/app.py\n"
        "+++ b/app.py\n"
        "@@ -3,4 +3,5 @@ def main():\n"
        " a\n"
        "-b\n"
        "+B\n"
        "+B2\n"
        " c\n"
        " d\n"
        "@@ -20,2 +21,1 @@\n"
        " x\n"
        "-y\n"
    )
    f = one(parse_unified_diff(text))
    assert (f.path, f.old_path, f.status, f.old_mode, f.new_mode) == (
        "app.py",
        "app.py",
        "modified",
        "100644",
        "100644",
    )
    assert [h.header for h in f.hunks] == [" def main():", ""]
    assert lines_of(f) == [
        ("context", "a", 3, 3),
        ("del", "b", 4, None),
        ("add", "B", None, 4),
        ("add", "B2", None, 5),
        ("context", "c", 5, 6),
        ("context", "d", 6, 7),
        ("context", "x", 20, 21),
        ("del", "y", 21, None),
    ]
    assert (f.additions, f.deletions) == (2, 2)


def test_hunk_header_with_omitted_counts_means_one_line() -> None:
    f = one(parse_unified_diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n"))
    h = f.hunks[0]
    assert (h.old_start, h.old_count, h.new_start, h.new_count) == (1, 1, 1, 1)
    assert lines_of(f) == [("del", "old", 1, None), ("add", "new", None, 1)]


def test_rename_without_content_change(repo: Repo) -> None:
    repo.write("pkg/old_name.py", "x = 1\n")
    repo.commit()
    repo.git("mv", "pkg/old_name.py", "pkg/new_name.py")
    repo.commit()
    f = one(parse_unified_diff(repo.diff()))
    assert (f.status, f.path, f.old_path, f.hunks) == ("renamed", "pkg/new_name.py", "pkg/old_name.py", ())


def test_rename_with_content_change(repo: Repo) -> None:
    body = "".join(f"line {i}\n" for i in range(1, 21))
    repo.write("a.py", body)
    repo.commit()
    (repo.root / "a.py").unlink()
    repo.write("b.py", body.replace("line 10\n", "line ten\n"))
    repo.commit()
    f = one(parse_unified_diff(repo.diff()))
    assert (f.status, f.path, f.old_path) == ("renamed", "b.py", "a.py")
    assert [ln for ln in lines_of(f) if ln[0] != "context"] == [
        ("del", "line 10", 10, None),
        ("add", "line ten", None, 10),
    ]


def test_rename_of_a_path_with_spaces_takes_the_rename_lines(repo: Repo) -> None:
    repo.write("my dir/a b.txt", "same\n")
    repo.commit()
    repo.git("mv", "my dir/a b.txt", "my dir/c d.txt")
    repo.commit()
    f = one(parse_unified_diff(repo.diff()))
    assert (f.status, f.path, f.old_path) == ("renamed", "my dir/c d.txt", "my dir/a b.txt")


def test_copy_is_an_added_file_whose_old_path_is_the_source(repo: Repo) -> None:
    body = "".join(f"v{i}\n" for i in range(30))
    repo.write("src.txt", body)
    repo.commit()
    repo.write("dst.txt", body + "extra\n")
    repo.commit()
    f = one(parse_unified_diff(repo.diff("-C", "--find-copies-harder")))
    assert (f.status, f.path, f.old_path) == ("added", "dst.txt", "src.txt")
    assert lines_of(f)[-1] == ("add", "extra", None, 31)


def test_deleted_file_keeps_its_old_path(repo: Repo) -> None:
    repo.write("gone.py", "a\nb\n")
    repo.commit()
    (repo.root / "gone.py").unlink()
    repo.commit()
    f = one(parse_unified_diff(repo.diff()))
    assert (f.status, f.path, f.old_path, f.old_mode, f.new_mode) == ("deleted", "gone.py", "gone.py", "100644", None)
    assert lines_of(f) == [("del", "a", 1, None), ("del", "b", 2, None)]


def test_new_file_and_new_empty_file(repo: Repo) -> None:
    repo.write("keep.txt", "k\n")
    repo.commit()
    repo.write("new.py", "print(1)\n")
    repo.write("empty.py", "")
    repo.commit()
    files = {f.path: f for f in parse_unified_diff(repo.diff())}
    assert set(files) == {"new.py", "empty.py"}
    new = files["new.py"]
    assert (new.status, new.old_path, new.new_mode, new.old_mode) == ("added", "new.py", "100644", None)
    assert lines_of(new) == [("add", "print(1)", None, 1)]
    assert (files["empty.py"].status, files["empty.py"].hunks) == ("added", ())


def test_binary_file_differ_line(repo: Repo) -> None:
    repo.write("logo.png", b"\x89PNG\0\0\x01")
    repo.write("t.txt", "a\n")
    repo.commit()
    repo.write("logo.png", b"\x89PNG\0\0\x02")
    repo.write("t.txt", "b\n")
    repo.commit()
    files = parse_unified_diff(repo.diff())
    assert [(f.path, f.is_binary, f.hunks == ()) for f in files] == [("logo.png", True, True), ("t.txt", False, False)]


def test_git_binary_patch_is_skipped_up_to_the_next_file(repo: Repo) -> None:
    repo.write("blob.bin", bytes(range(256)) * 4)
    repo.write("z.txt", "a\n")
    repo.commit()
    repo.write("blob.bin", bytes(reversed(range(256))) * 4)
    repo.write("z.txt", "b\n")
    repo.commit()
    raw = repo.diff("--binary")
    assert b"GIT binary patch" in raw
    files = parse_unified_diff(raw)
    assert [(f.path, f.is_binary) for f in files] == [("blob.bin", True), ("z.txt", False)]
    assert lines_of(files[1]) == [("del", "a", 1, None), ("add", "b", None, 1)]


def test_mode_only_change(repo: Repo) -> None:
    repo.write("run.sh", "echo hi\n")
    repo.commit()
    (repo.root / "run.sh").chmod(0o755)
    repo.commit()
    f = one(parse_unified_diff(repo.diff()))
    assert (f.status, f.old_mode, f.new_mode, f.hunks) == ("modified", "100644", "100755", ())


def test_no_newline_at_end_of_file_markers_are_not_lines(repo: Repo) -> None:
    repo.write("n.txt", "first\nlast")
    repo.commit()
    repo.write("n.txt", "first\nlast\nmore")
    repo.commit()
    raw = repo.diff()
    assert b"\\ No newline at end of file" in raw
    f = one(parse_unified_diff(raw))
    assert lines_of(f) == [
        ("context", "first", 1, 1),
        ("del", "last", 2, None),
        ("add", "last", None, 2),
        ("add", "more", None, 3),
    ]


def test_crlf_file_content_loses_only_the_terminator(repo: Repo) -> None:
    repo.write("w.txt", "one\r\ntwo\r\n")
    repo.commit()
    repo.write("w.txt", "one\r\nt\rwo\r\n")
    repo.commit()
    f = one(parse_unified_diff(repo.diff()))
    assert lines_of(f) == [("context", "one", 1, 1), ("del", "two", 2, None), ("add", "t\rwo", None, 2)]


def test_whole_diff_with_crlf_terminators_parses_like_lf() -> None:
    lf = "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    assert parse_unified_diff(lf.replace("\n", "\r\n")) == parse_unified_diff(lf)


def test_only_newline_ends_a_line() -> None:
    # Form feeds and U+2028 occur in real source; str.splitlines() would break the hunk on them.
    f = one(parse_unified_diff("--- a/x\n+++ b/x\n@@ -0,0 +1,2 @@\n+page\x0cbreak\n+sep\u2028arator\n"))
    assert [ln[1] for ln in lines_of(f)] == ["page\x0cbreak", "sep\u2028arator"]


def test_non_utf8_bytes_become_replacement_characters(repo: Repo) -> None:
    repo.write("latin1.txt", b"caf\xe9\n")
    repo.commit()
    repo.write("latin1.txt", b"caf\xe9 cr\xe8me\n")
    repo.commit()
    f = one(parse_unified_diff(repo.diff()))
    assert lines_of(f) == [("del", "caf\ufffd", 1, None), ("add", "caf\ufffd cr\ufffdme", None, 1)]


def test_str_holding_surrogate_escapes_still_parses() -> None:
    text = b"--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+\xff\n".decode("utf-8", errors="surrogateescape")
    assert lines_of(one(parse_unified_diff(text))) == [("add", "\udcff", None, 1)]


def test_quoted_unicode_and_special_paths(repo: Repo) -> None:
    repo.write("données/ünï.py", "a\n")
    repo.write('we"ird\tname.txt', "a\n")
    repo.write("with space.txt", "a\n")
    repo.commit()
    for name in ("données/ünï.py", 'we"ird\tname.txt', "with space.txt"):
        repo.write(name, "b\n")
    repo.commit()
    raw = repo.diff()
    assert b'"a/donn\\303\\251es/' in raw and b'"a/we\\"ird\\tname.txt"' in raw and b"with space.txt\t" in raw
    files = parse_unified_diff(raw)
    assert sorted(f.path for f in files) == sorted(["données/ünï.py", 'we"ird\tname.txt', "with space.txt"])
    assert all(f.status == "modified" and f.old_path == f.path for f in files)


def test_unicode_path_in_a_mode_only_change_comes_from_the_header(repo: Repo) -> None:
    repo.write("skript ä.sh", "x\n")
    repo.commit()
    (repo.root / "skript ä.sh").chmod(0o755)
    repo.commit()
    f = one(parse_unified_diff(repo.diff()))
    assert (f.path, f.new_mode) == ("skript ä.sh", "100755")


def test_removed_and_added_lines_that_look_like_headers(repo: Repo) -> None:
    # An SQL comment "-- x" removed reads "--- x"; "++ y" added reads "+++ y". The hunk counts decide.
    repo.write("q.sql", "-- x\nselect 1;\n")
    repo.commit()
    repo.write("q.sql", "++ y\nselect 1;\n")
    repo.commit()
    raw = repo.diff()
    assert b"\n--- x\n+++ y\n" in raw
    f = one(parse_unified_diff(raw))
    assert lines_of(f) == [("del", "-- x", 1, None), ("add", "++ y", None, 1), ("context", "select 1;", 2, 2)]


def test_format_patch_preamble_and_signature_are_skipped(repo: Repo) -> None:
    repo.write("a.txt", "a\n")
    repo.commit()
    repo.write("a.txt", "b\n")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "Subject line\n\nBody mentions --- and @@ freely.")
    patch = repo.git("format-patch", "-1", "--stdout", "HEAD")
    assert b"\n-- \n" in patch
    f = one(parse_unified_diff(patch))
    assert lines_of(f) == [("del", "a", 1, None), ("add", "b", None, 1)]


def test_plain_unified_diff_with_timestamps() -> None:
    text = (
        "--- old/config.ini\t2024-01-01 10:00:00.000000000 +0000\n"
        "+++ new/config.ini\t2024-01-02 10:00:00.000000000 +0000\n"
        "@@ -1,2 +1,2 @@\n"
        " [main]\n"
        "-debug = true\n"
        "+debug = false\n"
    )
    f = one(parse_unified_diff(text))
    assert (f.old_path, f.path) == ("old/config.ini", "new/config.ini")
    assert lines_of(f)[2] == ("add", "debug = false", None, 2)


def test_context_line_that_lost_its_space_counts_as_empty_context() -> None:
    f = one(parse_unified_diff("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n"))
    assert lines_of(f) == [("context", "a", 1, 1), ("context", "", 2, 2), ("del", "b", 3, None), ("add", "c", None, 3)]


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\nthis is not a diff\n", "line 1: not a unified diff"),
        ("\n\nrandom words\n", "line 3: not a unified diff"),
        ("@@ -1 +1 @@\n-a\n+b\n", "line 1: hunk before any file header"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n", "line 6: unexpected line after the hunks of x"),
        ("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n", "line 7: the hunk @@ -1,3 +1,3 @@ of x ends early"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n*b\n", "line 5: unexpected line inside a hunk of x"),
        ("--- a/x\n+++ b/x\n@@ -one +1 @@\n", "line 3: bad hunk header"),
        ("--- a/x\n+++ b/x\n@@ -1 +1\n", "line 3: bad hunk header"),
        ("diff --git a/x b/x\nfrobnicate 1\n", "line 2: unexpected line in the header of x"),
        ('diff --git "a/x b/x\n', "line 1: bad 'diff --git' line"),
        ("diff --git a/x b/x\n--- a/x\nnope\n", "line 2: '---' without a following '+++'"),
        ("diff --cc m.py\nindex 1,2..3\n", "line 1: combined diffs"),
    ],
)
def test_bad_input_names_the_line(text: str, message: str) -> None:
    with pytest.raises(DiffParseError) as caught:
        parse_unified_diff(text)
    assert message in str(caught.value)


def test_hunk_cut_short_by_the_next_file_says_so() -> None:
    text = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\ndiff --git a/y b/y\n"
    with pytest.raises(DiffParseError, match="line 6: .* ends early: 1 old and 1 new lines missing"):
        parse_unified_diff(text)


# --- GitLab's per-file patches --------------------------------------------------------------------


def test_file_patch_modified() -> None:
    f = parse_file_patch(
        old_path="a.py", new_path="a.py", patch="@@ -1,2 +1,2 @@\n x\n-y\n+z\n", old_mode="100644", new_mode="100644"
    )
    assert (f.status, f.path, f.old_mode) == ("modified", "a.py", "100644")
    assert lines_of(f) == [("context", "x", 1, 1), ("del", "y", 2, None), ("add", "z", None, 2)]


def test_file_patch_flags_decide_status() -> None:
    added = parse_file_patch(
        old_path="n.py", new_path="n.py", patch="@@ -0,0 +1 @@\n+a\n", new_file=True, old_mode="0", new_mode="100644"
    )
    assert (added.status, added.old_mode, added.new_mode) == ("added", None, "100644")
    deleted = parse_file_patch(old_path="d.py", new_path="d.py", patch="@@ -1 +0,0 @@\n-a\n", deleted_file=True)
    assert (deleted.status, deleted.path) == ("deleted", "d.py")
    renamed = parse_file_patch(old_path="o.py", new_path="r.py", patch="", renamed_file=True)
    assert (renamed.status, renamed.old_path, renamed.hunks, renamed.collapsed) == ("renamed", "o.py", (), False)


def test_file_patch_too_large_is_collapsed_not_dropped() -> None:
    f = parse_file_patch(old_path="big.json", new_path="big.json", patch="", too_large=True)
    assert (f.collapsed, f.collapsed_reason, f.status) == (True, "too_large", "modified")
    g = parse_file_patch(old_path="c.py", new_path="c.py", patch="", collapsed=True)
    assert (g.collapsed, g.collapsed_reason) == (True, "collapsed")


def test_file_patch_binary_and_garbage() -> None:
    f = parse_file_patch(old_path="i.png", new_path="i.png", patch="Binary files a/i.png and b/i.png differ\n")
    assert f.is_binary and f.hunks == ()
    with pytest.raises(DiffParseError, match="line 4: unexpected line in the diff of q.py"):
        parse_file_patch(old_path="q.py", new_path="q.py", patch="@@ -1 +1 @@\n-a\n+b\nstray\n")


# --- positions ------------------------------------------------------------------------------------


def index_for_sample() -> DiffIndex:
    # Hunk 1 adds two lines after old line 10; hunk 2 deletes old lines 30-31; hunk 3 replaces a line.
    text = (
        "--- a/m.py\n+++ b/m.py\n"
        "@@ -9,3 +9,5 @@\n c9\n c10\n+a11\n+a12\n c11\n"
        "@@ -29,4 +31,2 @@\n c29\n-d30\n-d31\n c32\n"
        "@@ -50,2 +50,2 @@\n c50\n-old51\n+new51\n"
        "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+n1\n+n2\n"
    )
    return DiffIndex(parse_unified_diff(text))


def test_line_kind() -> None:
    idx = index_for_sample()
    assert [idx.line_kind("m.py", n) for n in (9, 11, 12, 13, 31, 32, 33, 8, 40)] == [
        "context", "add", "add", "context", "context", "context", None, None, None,
    ]  # fmt: skip
    assert idx.line_kind("new.py", 2) == "add"
    assert idx.line_kind("other.py", 1) is None


def test_in_or_near_hunk_respects_slack() -> None:
    idx = index_for_sample()
    # Hunk 1 spans new lines 9..13; with slack 3: 6..16.
    assert [idx.in_or_near_hunk("m.py", n) for n in (5, 6, 13, 16, 17)] == [False, True, True, True, False]
    assert idx.in_or_near_hunk("m.py", 17, slack=4)
    assert not idx.in_or_near_hunk("m.py", 12 + 40, slack=0)
    assert not idx.in_or_near_hunk("nope.py", 1)


def test_old_line_for_context_added_and_outside_lines() -> None:
    idx = index_for_sample()
    assert idx.old_line_for("m.py", 13) == 11  # context inside hunk 1
    assert idx.old_line_for("m.py", 11) is None  # added
    assert idx.old_line_for("m.py", 5) == 5  # before any hunk: unchanged numbering
    assert idx.old_line_for("m.py", 20) == 18  # after hunk 1: two lines were added
    assert idx.old_line_for("m.py", 40) == 40  # after hunk 2: two removed again
    assert idx.old_line_for("m.py", 60) == 60  # after hunk 3: a one-for-one replacement
    assert idx.old_line_for("new.py", 1) is None
    assert idx.old_line_for("missing.py", 1) is None


def test_index_file_lookup() -> None:
    idx = index_for_sample()
    m = idx.file("m.py")
    assert m is not None and m.status == "modified" and len(m.hunks) == 3
    assert idx.file("nope.py") is None
    assert idx.paths() == ["m.py", "new.py"]


# --- the prompt overview --------------------------------------------------------------------------


def make_file(path: str, added: int) -> FileChange:
    from reviewers.kernel.contracts import Hunk

    lines = tuple(DiffLine("add", f"line {i}", None, i) for i in range(1, added + 1))
    return FileChange(path=path, old_path=path, status="added", hunks=(Hunk(0, 0, 1, added, "", lines),))


def test_overview_shows_a_small_diff_whole() -> None:
    text = render_diff_overview([make_file("a.py", 2)], max_lines=10)
    assert text.splitlines() == ["=== added a.py +2 -0", "@@ -0,0 +1,2 @@", "+line 1", "+line 2"]


@pytest.mark.parametrize("max_lines", [1, 3, 10, 25, 80])
def test_overview_never_exceeds_its_budget_and_says_what_was_cut(max_lines: int) -> None:
    files = [make_file(f"f{i}.py", 30) for i in range(12)]
    out = render_diff_overview(files, max_lines=max_lines).splitlines()
    assert len(out) <= max_lines
    assert any(line.startswith("…") for line in out)


def test_overview_budget_flows_to_later_files() -> None:
    files = [make_file("small.py", 1), make_file("big.py", 50)]
    out = render_diff_overview(files, max_lines=20).splitlines()
    # small.py takes 3 lines; big.py gets the remaining 17: title, 15 lines, one note.
    assert out[:3] == ["=== added small.py +1 -0", "@@ -0,0 +1,1 @@", "+line 1"]
    assert out[3] == "=== added big.py +50 -0" and len(out) == 20
    assert out[-1] == "… 36 more lines of this hunk not shown"


def test_overview_rejects_a_zero_budget() -> None:
    with pytest.raises(ValueError, match="max_lines"):
        render_diff_overview([], max_lines=0)


# --- properties and speed -------------------------------------------------------------------------

LINE = st.sampled_from(["a", "b", "c", "", "-- x", "+y", "@@ z", "\\ q", "d e"])


@settings(max_examples=60, deadline=None)
@given(st.lists(LINE, max_size=25), st.lists(LINE, max_size=25), st.integers(0, 4))
def test_difflib_output_round_trips_both_sides(old: list[str], new: list[str], context: int) -> None:
    text = "".join(difflib.unified_diff([s + "\n" for s in old], [s + "\n" for s in new], "a/f", "b/f", n=context))
    files = parse_unified_diff(text)
    if old == new:
        assert files == []
        return
    f = one(files)
    seen_old = {ln.old_line: ln.text for h in f.hunks for ln in h.lines if ln.old_line is not None}
    seen_new = {ln.new_line: ln.text for h in f.hunks for ln in h.lines if ln.new_line is not None}
    assert all(old[n - 1] == text for n, text in seen_old.items())
    assert all(new[n - 1] == text for n, text in seen_new.items())
    assert {n for n, kind in f.new_lines().items() if kind == "add"} <= set(range(1, len(new) + 1))


def test_fifty_thousand_changed_lines_in_500_files_are_all_counted() -> None:
    """Its speed is a benchmark (bench/diff_parse.py, in `make bench`), not a timed test."""
    files = parse_unified_diff(large_diff())
    assert len(files) == FILES
    assert sum(f.additions + f.deletions for f in files) == 50_000
    assert all(f.additions == f.deletions == HUNKS_PER_FILE * LINES_PER_SIDE for f in files)
