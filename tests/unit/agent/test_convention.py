"""A ruff finding that repeats the project's own habit is listed for a person, not posted
(`agent.verdicts.convention`); ruff really runs on the other files."""

from __future__ import annotations

from typing import Any

from agent.diff import DiffIndex, parse_unified_diff
from agent.verdicts.convention import MIN_PLACES, ProjectConventions, convention_key, kind_of, project_convention
from agent.verdicts.feedback import PeopleVotes
from agent.verifier import VerifierInputs, verify_findings
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.analyzers.secrets import base62_crc32
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import Finding

CHANGED = "pkg/new.py"
NEW = """def load(path):
    try:
        return open(path).read()
    except:
        return None


def greet(name):
    return unicode(name)


def shout(name):
    return reqest(name)
"""
DIFF = "diff --git a/pkg/new.py b/pkg/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,{n} @@\n{body}\n".format(
    n=len(NEW.splitlines()), body="\n".join(f"+{line}" for line in NEW.splitlines())
)
BARE = "def f():\n    try:\n        return g()\n    except:\n        return None\n"
COMPAT = "def text(value):\n    return unicode(value)\n"
CLEAN = "def f(x):\n    return x + 1\n"


def line_of(needle: str) -> int:
    return next(n for n, line in enumerate(NEW.splitlines(), start=1) if needle in line)


def finding(needle: str, rule: str, title: str, **kw: Any) -> Finding:
    line = line_of(needle)
    values: dict[str, Any] = {
        "path": CHANGED, "line": line, "end_line": line, "category": "code_quality", "severity": "medium",
        "title": title, "body": title, "evidence": NEW.splitlines()[line - 1].strip(), "reviewer": "code_quality",
        "rule": rule,
    }  # fmt: skip
    values.update(kw)
    f = Finding.model_validate(values)
    return f.model_copy(update={"fingerprint": make_fingerprint(path=f.path, category=f.category, rule=f.rule,
                                                                evidence=f.evidence, title=f.title)})  # fmt: skip


BARE_EXCEPT = ("except:", "ruff:E722", "Do not use bare `except`")
UNICODE = ("unicode(name)", "ruff:F821", "Undefined name `unicode`")
TYPO = ("reqest(name)", "ruff:F821", "Undefined name `reqest`")


def verdicts(others: dict[str, str], *found: tuple[str, str, str], **kw: Any) -> dict[str, tuple[str, str]]:
    workspace = SnapshotWorkspace({CHANGED: NEW, **others})
    inputs = VerifierInputs(
        workspace=workspace, diff_index=DiffIndex(parse_unified_diff(DIFF)), track_record={}, posting="all", **kw
    )
    out = verify_findings([finding(*f) for f in found], inputs)
    return {v.finding.title: (v.verdict, v.reason) for v in out}


def test_a_habit_in_three_other_product_files_is_listed_not_posted() -> None:
    others = {f"pkg/old{i}.py": BARE for i in range(MIN_PLACES)}
    verdict, reason = verdicts(others, BARE_EXCEPT)["Do not use bare `except`"]
    assert verdict == "NEEDS_HUMAN_REVIEW"
    assert f"in {MIN_PLACES} other places of its product code" in reason and "pkg/old0.py" in reason


def test_a_slip_made_twice_elsewhere_still_posts() -> None:
    others = {f"pkg/old{i}.py": BARE for i in range(MIN_PLACES - 1)} | {"pkg/clean.py": CLEAN}
    assert verdicts(others, BARE_EXCEPT)["Do not use bare `except`"][0] == "REAL"


def test_the_test_suites_habits_say_nothing_about_product_code() -> None:
    others = {f"tests/test_old{i}.py": BARE for i in range(MIN_PLACES + 2)}
    assert verdicts(others, BARE_EXCEPT)["Do not use bare `except`"][0] == "REAL"


def test_an_undefined_name_is_a_convention_only_for_that_name() -> None:
    others = {f"pkg/compat{i}.py": COMPAT for i in range(MIN_PLACES)}
    found = verdicts(others, UNICODE, TYPO)
    assert found["Undefined name `unicode`"][0] == "NEEDS_HUMAN_REVIEW"
    assert "F821 on `unicode`" in found["Undefined name `unicode`"][1]
    assert found["Undefined name `reqest`"][0] == "REAL"  # a typo is a typo, whatever else the project leaves unbound


def test_python2_source_everywhere_makes_a_print_statement_the_projects_habit() -> None:
    py2 = 'def main():\n    print "hello"\n'
    conventions = ProjectConventions(
        SnapshotWorkspace({CHANGED: NEW, **{f"pkg/m{i}.py": py2 for i in range(4)}}),
        changed=[CHANGED],
        read_text=lambda p: {f"pkg/m{i}.py": py2 for i in range(4)}.get(p),
    )
    syntax = finding(
        "return None", "ruff:invalid-syntax", "Syntax error: Simple statements must be separated by newlines"
    )
    assert project_convention(syntax, conventions) is not None
    assert conventions.places(CHANGED)[("invalid-syntax", "")] == [f"pkg/m{i}.py" for i in range(4)]


def test_people_who_accepted_the_rule_get_its_threads_habit_or_not() -> None:
    others = {f"pkg/old{i}.py": BARE for i in range(MIN_PLACES)}
    votes = PeopleVotes(by_rule={"ruff:E722": (0, 3)})
    assert verdicts(others, BARE_EXCEPT, people_votes=votes)["Do not use bare `except`"][0] == "REAL"


def test_only_ruff_findings_are_judged_by_habit() -> None:
    others = {f"pkg/old{i}.py": BARE for i in range(MIN_PLACES)}
    conventions = ProjectConventions(SnapshotWorkspace(others), changed=[CHANGED], read_text=others.get)
    other_rule = finding("except:", "bandit:B110", "Try, Except, Pass detected.")
    assert project_convention(other_rule, conventions) is None


def test_the_sample_is_bounded_and_starts_near_the_change() -> None:
    files = {f"aaa/m{i:03}.py": CLEAN for i in range(50)} | {
        "pkg/near.py": CLEAN,
        CHANGED: NEW,
        "tests/test_x.py": CLEAN,
    }
    conventions = ProjectConventions(SnapshotWorkspace(files), changed=[CHANGED], read_text=files.get, max_files=10)
    sample = conventions.sample(CHANGED)
    assert len(sample) == 10 and sample[0] == "pkg/near.py"
    assert CHANGED not in sample and "tests/test_x.py" not in sample


def test_what_counts_as_the_same_thing() -> None:
    assert convention_key("F821", "Undefined name `_`") == ("F821", "_")
    assert convention_key("F401", "`os` imported but unused") == ("F401", "os")
    assert convention_key("E722", "Do not use bare `except`") == ("E722", "")
    assert (kind_of("tests/test_a.py"), kind_of("docs/conf.py"), kind_of("pkg/a.py")) == ("test", "sample", "product")


def test_a_bare_diff_shows_no_convention() -> None:
    conventions = ProjectConventions(SnapshotWorkspace({CHANGED: NEW}), changed=[CHANGED], read_text=lambda p: None)
    assert project_convention(finding(*BARE_EXCEPT), conventions) is None


PY2 = """def main():
    print "starting"
    print "done"
"""
PY2_HEAD = """def main():
    print "starting"
    print "working"
    print "done"
"""
PY2_DIFF = """diff --git a/tool.py b/tool.py
--- a/tool.py
+++ b/tool.py
@@ -1,3 +1,4 @@
 def main():
     print "starting"
+    print "working"
     print "done"
"""
BROKEN_HEAD = """def main():
    print("starting")
    print("working"
    print("done")
"""
BROKEN_DIFF = """diff --git a/tool.py b/tool.py
--- a/tool.py
+++ b/tool.py
@@ -1,3 +1,4 @@
 def main():
     print("starting")
+    print("working"
     print("done")
"""


def _one(diff: str, head: dict[str, str], line: int, evidence: str, rule: str, title: str) -> tuple[str, str]:
    f = Finding.model_validate({
        "path": "tool.py", "line": line, "end_line": line, "category": "code_quality", "severity": "high",
        "title": title, "body": title, "evidence": evidence, "reviewer": "code_quality", "rule": rule,
    })  # fmt: skip
    f = f.model_copy(update={"fingerprint": make_fingerprint(path=f.path, category=f.category, rule=f.rule,
                                                             evidence=f.evidence, title=f.title)})  # fmt: skip
    inputs = VerifierInputs(
        workspace=SnapshotWorkspace(head),
        diff_index=DiffIndex(parse_unified_diff(diff)),
        track_record={},
        posting="all",
    )
    [v] = verify_findings([f], inputs)
    return v.verdict, v.reason


def test_a_file_that_did_not_parse_before_was_not_broken_by_the_change() -> None:
    verdict, reason = _one(
        PY2_DIFF, {"tool.py": PY2_HEAD}, 3, 'print "working"', "ruff:invalid-syntax",
        "Syntax error: Simple statements must be separated by newlines or semicolons",
    )  # fmt: skip
    assert verdict == "FALSE_POSITIVE" and "did not parse before this change either" in reason


def test_a_change_that_breaks_a_parsing_file_is_still_reported() -> None:
    verdict, reason = _one(
        BROKEN_DIFF, {"tool.py": BROKEN_HEAD}, 3, 'print("working"', "ruff:invalid-syntax",
        "Syntax error: Expected `)`, found newline",
    )  # fmt: skip
    assert verdict == "REAL", reason


HABIT_HEAD = BARE.replace("def f", "def a") + BARE.replace("def f", "def b") + BARE.replace("def f", "def c") + BARE
HABIT_DIFF = """diff --git a/tool.py b/tool.py
--- a/tool.py
+++ b/tool.py
@@ -15,0 +16,5 @@
+def f():
+    try:
+        return g()
+    except:
+        return None
"""


def test_a_habit_inside_the_edited_file_counts_by_its_places_before_the_change() -> None:
    verdict, reason = _one(HABIT_DIFF, {"tool.py": HABIT_HEAD}, 19, "except:", "ruff:E722", "Do not use bare `except`")
    assert verdict == "NEEDS_HUMAN_REVIEW", reason
    assert "tool.py:4 before this change" in reason
    two_before = BARE.replace("def f", "def a") + BARE.replace("def f", "def b") + BARE
    diff = HABIT_DIFF.replace("@@ -15,0 +16,5 @@", "@@ -10,0 +11,5 @@")
    assert _one(diff, {"tool.py": two_before}, 14, "except:", "ruff:E722", "Do not use bare `except`")[0] == "REAL"


def _token_finding(path: str) -> tuple[Finding, str]:
    token = "ghp_" + "wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO" + base62_crc32("wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO")
    text = f"def test_detects():\n    assert detect('{token}')\n"
    f = Finding.model_validate({
        "path": path, "line": 2, "end_line": 2, "category": "security", "severity": "critical",
        "title": "Hard-coded GitHub token committed to the repository", "body": "Revoke it.",
        "evidence": text.splitlines()[1].strip(), "reviewer": "security", "rule": "secrets:known-prefix",
    })  # fmt: skip
    return f.model_copy(update={"fingerprint": make_fingerprint(path=f.path, category=f.category, rule=f.rule,
                                                                evidence=f.evidence, title=f.title)}), text  # fmt: skip


def test_a_secret_scanners_test_tokens_are_its_fixtures_but_a_key_in_product_code_always_posts() -> None:
    others = {
        f"tests/plugins/{name}_test.py": f"CASES = [('{prefix}{'Qx8rT2aB9' * 3}', True)]\n"
        for name, prefix in (("github", "ghp_"), ("gitlab", "glpat-"), ("slack", "xoxb-" + "4426949411-"))
    }
    for path, expected in (("tests/plugins/new_test.py", "NEEDS_HUMAN_REVIEW"), ("scanner/new.py", "REAL")):
        found, text = _token_finding(path)
        diff = (
            f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,2 @@\n"
            + "".join(f"+{line}\n" for line in text.splitlines())
        )
        workspace = SnapshotWorkspace(
            {path: text, **others, **{p.replace("tests/plugins", "scanner"): t for p, t in others.items()}}
        )
        inputs = VerifierInputs(
            workspace=workspace, diff_index=DiffIndex(parse_unified_diff(diff)), track_record={}, posting="all"
        )
        [v] = verify_findings([found], inputs)
        assert v.verdict == expected, (path, v.reason)
        if expected == "NEEDS_HUMAN_REVIEW":
            assert "vendor-prefixed tokens" in v.reason and "other places of its test code" in v.reason
    # placeholders elsewhere are no habit: a test file of one real-looking token posts
    placeholders = {f"tests/t{i}_test.py": "KEY = 'AKIAIOSFODNN7EXAMPLE'\n" for i in range(4)}
    found, text = _token_finding("tests/plugins/new_test.py")
    conventions = ProjectConventions(SnapshotWorkspace(placeholders), changed=[found.path], read_text=placeholders.get)
    assert project_convention(found, conventions) is None
