"""The ReDoS check on its own: the change's literal patterns go to regexploit within a node budget;
a pattern over the budget, or an engine that is missing, is named as not checked, never a failure."""

from __future__ import annotations

import sys

import pytest

from reviewers.analyzers import redos
from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.pysyntax import parse_python
from reviewers.kernel.contracts import DiffLine, FileChange, Hunk


def added_file(path: str, text: str) -> ChangedFile:
    lines = text.splitlines()
    hunk = Hunk(
        old_start=0,
        old_count=0,
        new_start=1,
        new_count=len(lines),
        header="",
        lines=tuple(DiffLine(kind="add", text=t, old_line=None, new_line=n) for n, t in enumerate(lines, start=1)),
    )
    return ChangedFile(FileChange(path=path, old_path=path, status="added", hunks=(hunk,)), text)


def test_literal_patterns_follow_the_re_module_under_any_name_and_read_their_flags() -> None:
    text = (
        "import re as regex\nfrom re import compile as rc\n\n"
        "A = regex.compile(r'^a+$', regex.I | regex.M)\nB = rc('x', 2)\nC = regex.sub('y', '', s, flags=FLAGS)\n"
        "D = other.compile('z')\n"
    )
    found = [(p.line, p.text, p.flags) for p in redos.literal_patterns(parse_python(text))]
    assert found == [(4, "^a+$", 2 | 8), (5, "x", 2), (6, "y", None)]


def test_a_vulnerable_pattern_is_cwe_1333_with_its_attack_string() -> None:
    file = added_file(
        "app/parse.py", "import re\n\nNAME = re.compile(r'^(\\w+\\s?)*$')\nSAFE = re.compile(r'^\\d+$')\n"
    )
    result = redos.redos_issues(file)
    assert [(i.line, i.rule, i.cwe) for i in result.issues] == [(3, "python:redos", "CWE-1333")]
    assert "Attack string: `'0' * 3456 + '!'`" in result.issues[0].body and result.unchecked == []


def test_a_pattern_over_the_node_budget_is_named_not_checked() -> None:
    alternatives = "(?:" + "|".join(f"x{i}y" for i in range(70)) + ")"
    file = added_file("app/big.py", f"import re\n\nBIG = re.compile(r'{alternatives * 2}')\n")
    result = redos.redos_issues(file)
    assert result.issues == []
    assert [(reason, "line 3" in detail and "paths" in detail) for reason, detail in result.unchecked] == [
        ("budget", True)
    ]


def test_a_missing_engine_is_coverage_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redos, "ENGINE", redos._Engine())
    monkeypatch.setitem(sys.modules, "regexploit.redos", None)  # `import` raises ImportError
    monkeypatch.setitem(sys.modules, "regexploit.ast.sre", None)
    result = redos.redos_issues(added_file("app/parse.py", "import re\n\nNAME = re.compile(r'^(a+)+$')\n"))
    assert result.issues == []
    assert len(result.unchecked) == 1 and result.unchecked[0][0] == "unavailable"
    assert "regexploit" in result.unchecked[0][1]
