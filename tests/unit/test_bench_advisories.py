"""bench.advisories' pure parts: the fix's hunks, the vulnerable lines, the shape, the class, the split,
the matcher; and one case built from a small git repository and scored, end to end without tools."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.advisories.build import build_case, detect_license, fix_commits, reserved_names
from bench.advisories.cases import (
    Case,
    ChangedPy,
    Hunk,
    at_location,
    case_from_json,
    case_to_json,
    changed_head_lines,
    classify,
    classify_shape,
    is_test_path,
    parse_hunks,
    part_of,
    read_cases,
    statement_spans,
    vulnerable_lines,
    write_cases,
)
from bench.advisories.run import Hit, ToolRun, render, score, summarize

FIX_DIFF = """\
diff --git a/app/files.py b/app/files.py
--- a/app/files.py
+++ b/app/files.py
@@ -3,0 +4,2 @@ def download(name):
+    if not safe(name):
+        abort(403)
@@ -10 +12 @@ def load(data):
-    return yaml.load(data)
+    return yaml.safe_load(data)
"""


def test_hunks_of_a_zero_context_diff() -> None:
    hunks = parse_hunks(FIX_DIFF)
    assert hunks == [
        Hunk(3, 0, 4, 2, (), ("    if not safe(name):", "        abort(403)")),
        Hunk(10, 1, 12, 1, ("    return yaml.load(data)",), ("    return yaml.safe_load(data)",)),
    ]


def test_vulnerable_lines_are_the_removed_lines_and_the_place_a_guard_was_added() -> None:
    hunks = parse_hunks(FIX_DIFF)
    # the guard was added after old line 3: lines 3 and 4 of the revert's head around it; line 10 changed
    assert vulnerable_lines(hunks, head_line_count=20) == [3, 4, 10]
    assert changed_head_lines(hunks) == {3, 4, 10}


def test_blank_and_comment_lines_are_no_location() -> None:
    hunks = [Hunk(5, 2, 5, 0, ("", "# old comment"), ()), Hunk(8, 0, 7, 1, (), ("# a note",))]
    assert vulnerable_lines(hunks, head_line_count=20) == []


def test_shape_adds_dangerous_call_when_the_fix_removed_one() -> None:
    hunks = {"app/load.py": [Hunk(10, 1, 10, 1, ("    return yaml.load(data)",), ("    return yaml.safe_load(data)",))]}
    assert classify_shape(hunks) == "adds-dangerous-call"


def test_shape_removes_guard_when_the_fix_added_a_check() -> None:
    hunks = {"app/files.py": [Hunk(3, 0, 4, 2, (), ("    if not safe(name):", "        abort(403)"))]}
    assert classify_shape(hunks) == "removes-guard"


def test_shape_ignores_test_files_and_says_other_otherwise() -> None:
    hunks = {
        "tests/test_files.py": [Hunk(1, 0, 1, 1, (), ("    if x: raise ValueError",))],
        "app/util.py": [Hunk(4, 1, 4, 1, ("    total = a + b",), ("    total = a - b",))],
    }
    assert classify_shape(hunks) == "other"


def test_a_dangerous_call_kept_on_both_sides_is_not_added_back() -> None:
    hunks = {
        "app/run.py": [Hunk(4, 1, 4, 2, ("    subprocess.run(cmd)",), ("    check(cmd)", "    subprocess.run(cmd)"))]
    }
    assert classify_shape(hunks) == "removes-guard"


@pytest.mark.parametrize(
    ("text", "family", "cwe"),
    [
        ("A path traversal in the download view", "path-traversal", "CWE-22"),
        ("Unsafe deserialization with pickle allows code execution", "deserialization", "CWE-502"),
        ("Open redirect after login", "open-redirect", "CWE-601"),
        ("Stored cross-site scripting (XSS) in titles", "xss", "CWE-79"),
        ("Something odd happens", "other", "CWE-20"),
    ],
)
def test_class_from_the_advisory_text(text: str, family: str, cwe: str) -> None:
    assert classify(text) == (family, cwe)


def test_split_is_by_project_and_deterministic() -> None:
    assert part_of("Wagtail") == part_of("wagtail")
    parts = {part_of(f"project-{i}") for i in range(50)}
    assert parts == {"dev", "heldout"}
    share = sum(part_of(f"project-{i}") == "heldout" for i in range(1000)) / 1000
    assert 0.33 < share < 0.47


def test_test_paths() -> None:
    assert is_test_path("tests/test_views.py")
    assert is_test_path("pkg/tests/helpers.py")
    assert is_test_path("pkg/views_test.py")
    assert not is_test_path("pkg/testimony.py")
    assert not is_test_path("pkg/contest/views.py")


HEAD = """\
def view(request):
    url = request.GET["next"]
    return redirect(
        url,
        permanent=False,
    )


def other():
    return 1
"""


def test_a_finding_matches_near_the_line_or_on_the_same_statement() -> None:
    spans = statement_spans(HEAD)
    assert (3, 6) in spans and (1, 1) in spans  # the call's statement; the def's header only
    # vulnerable line 5 (inside the redirect call): a finding on line 3 is on the same statement
    assert at_location(3, 3, [5], spans)
    assert at_location(7, 7, [5], spans)  # two lines away
    assert not at_location(10, 10, [5], spans)
    assert not at_location(1, 1, [5], [])  # four lines away, no statement known


def test_statement_spans_of_a_file_that_does_not_parse() -> None:
    assert statement_spans("def (:\n") == []


def test_license_detection() -> None:
    assert detect_license("Permission is hereby granted, free of charge, to any person") == "MIT"
    assert detect_license("Apache License\n Version 2.0, January 2004") == "Apache-2.0"
    assert detect_license("All rights reserved.") == "unknown"


def test_fix_commits_and_reserved_names(tmp_path: Path) -> None:
    advisory = {"references": [
        {"type": "FIX", "url": "https://github.com/acme/widget/commit/ABCDEF1234567"},
        {"type": "WEB", "url": "https://github.com/acme/widget/pull/3"},
        {"type": "FIX", "url": "https://github.com/acme/widget.git/commit/0123456789"},
    ]}  # fmt: skip
    assert fix_commits(advisory) == [
        ("acme/widget", "abcdef1234567", "https://github.com/acme/widget/commit/ABCDEF1234567"),
        ("acme/widget", "0123456789", "https://github.com/acme/widget.git/commit/0123456789"),
    ]
    listing = tmp_path / "reserved.txt"
    listing.write_text("# comment\nTornado\n\nrequests\n", encoding="utf-8")
    assert reserved_names(listing) == {"tornado", "requests"}


def _git(root: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e.invalid", "HOME": str(root), "PATH": "/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=True, env=env)
    return done.stdout.decode()


VULNERABLE = """\
import os


def read(root, name):
    path = os.path.join(root, name)
    return open(path).read()
"""

FIXED = """\
import os


def read(root, name):
    path = os.path.realpath(os.path.join(root, name))
    if not path.startswith(os.path.realpath(root) + os.sep):
        raise ValueError("outside the root")
    return open(path).read()
"""


def test_a_case_built_from_a_fix_commit_and_scored(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "LICENSE").write_text("Permission is hereby granted, free of charge, to any person\n")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "files.py").write_text(VULNERABLE)
    (repo / "pkg" / "util.py").write_text("X = 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    (repo / "pkg" / "files.py").write_text(FIXED)
    _git(repo, "commit", "-q", "-am", "fix traversal")
    sha = _git(repo, "rev-parse", "HEAD").strip()
    advisory = {"id": "PYSEC-0000-1", "details": "Path traversal in read()", "aliases": ["CVE-0000-1"],
                "affected": [{"package": {"name": "pkg"}}]}  # fmt: skip
    case = build_case(advisory, "acme/pkg", sha[:8], f"https://github.com/acme/pkg/commit/{sha}", repo / ".git")
    assert isinstance(case, Case)
    assert (case.fix_commit, case.license, case.family, case.shape) == (sha, "MIT", "path-traversal", "removes-guard")
    assert case.vulnerable == {"pkg/files.py": [5]}  # the join without realpath, the line the fix changed
    assert case.context == [("pkg/util.py", "X = 1\n")]
    assert case.files == [ChangedPy("pkg/files.py", FIXED, VULNERABLE)]
    # stored and read back unchanged
    write_cases([case], tmp_path / "cases.jsonl.gz")
    assert read_cases(tmp_path / "cases.jsonl.gz") == [case]
    assert case_from_json(case_to_json(case)) == case

    hunks = {"pkg/files.py": parse_hunks(_git(repo, "diff", "-U0", f"{sha}~1", sha))}
    runs = {
        "reviewloop": ToolRun(
            [Hit("reviewloop", "r", "pkg/files.py", 6, 6, verdict="NEEDS_HUMAN_REVIEW", category="security")]
        ),
        "bandit": ToolRun([Hit("bandit", "B101", "pkg/files.py", 1, 1)]),  # far from the change
        "semgrep": ToolRun(error="timeout"),
    }
    fix_run = ToolRun([Hit("reviewloop", "s", "pkg/files.py", 5, 5, verdict="REAL", category="security")])
    result = score(case, hunks, runs, fix_run)
    assert result.found == {"reviewloop-any": True, "reviewloop-listed": True, "reviewloop-posted": False,
                            "bandit": False, "semgrep": False}  # fmt: skip
    assert result.errors == {"semgrep": "timeout"}
    assert result.fix_security_posted == 1
    summary = summarize([result])
    assert summary["recall"]["reviewloop-any"] == {"found": 1, "of": 1, "share": 1.0}
    # a finding of another kind at the vulnerable line finds a bug, not the vulnerability
    other = score(case, hunks, {"reviewloop": ToolRun([Hit("reviewloop", "ruff:F401", "pkg/files.py", 5, 5, "REAL")])},
                  ToolRun())  # fmt: skip
    assert other.found["reviewloop-posted"]
    assert summarize([other])["recall"]["reviewloop-posted"]["found"] == 0
    assert summarize([other], security_only=False)["recall"]["reviewloop-posted"]["found"] == 1
    assert summary["fix_direction"]["cases_with_security_thread"] == 1
    assert "| shape removes-guard | 0/1 (0 %) | 1/1 (100 %) | 1/1 (100 %) | 0/1 (0 %) | 0/1 (0 %) |" in render(
        summary, title="t"
    )


def test_a_commit_without_a_non_test_python_change_is_no_case(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("a\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    (repo / "README").write_text("b\n")
    _git(repo, "commit", "-q", "-am", "docs")
    sha = _git(repo, "rev-parse", "HEAD").strip()
    made = build_case({"id": "X"}, "acme/pkg", sha, "u", repo / ".git")
    assert made == "no non-test Python file changed"


def test_bugsinpy_info_fields_with_crlf_and_spaces() -> None:
    from bench.bugs.build import info_fields, repo_of

    text = 'python_version="3.7.0"\r\nbuggy_commit_id="99036a1"\r\nfixed_commit_id ="1cc47c6"\r\ntest_file="t.py"'
    assert info_fields(text) == {
        "python_version": "3.7.0",
        "buggy_commit_id": "99036a1",
        "fixed_commit_id": "1cc47c6",
        "test_file": "t.py",
    }
    assert repo_of("https://github.com/jakubroztocil/httpie/") == "jakubroztocil/httpie"
    with pytest.raises(ValueError, match="not a GitHub repository URL"):
        repo_of("https://gitlab.com/a/b")


def test_record_headline_names_both_parts_and_the_baselines() -> None:
    from bench.advisories.record import headline

    cell = {"found": 1, "of": 4, "share": 0.25}
    summary = {
        "cases": 4,
        "projects": 3,
        "recall": {k: cell for k in ("reviewloop-posted", "reviewloop-listed", "reviewloop-any", "bandit", "semgrep")},
        "fix_direction": {"cases_with_security_thread": 0, "cases_with_thread": 1},
    }
    text = headline("advisories", summary, summary)
    assert text.startswith("held-out 4 cases / 3 projects: reviewloop posted 25 %")
    assert "bandit 25 %, semgrep 25 %" in text and "security threads on 0 of 4" in text
    assert "(development 4 cases: any verdict 25 %)" in text
    assert "threads on 1 of 4" in headline("bugs", summary, None)
