"""What the guard-removal scan says when it cannot look (`reviewers.analyzers.guard_removal.report`)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from agent.diff import parse_unified_diff
from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.guard_removal import protections
from reviewers.analyzers.python_security import SecurityAnalysis, analyse_security, project_for

CASE = Path(__file__).resolve().parents[2] / "fixtures" / "security" / "removed_guards" / "vuln_containment"


def _changed(base: str, head: str, path: str = "app.py") -> ChangedFile:
    lines = difflib.unified_diff(base.splitlines(True), head.splitlines(True), f"a/{path}", f"b/{path}")
    return ChangedFile(parse_unified_diff(f"diff --git a/{path} b/{path}\n" + "".join(lines))[0], head)


def _analyse(file: ChangedFile) -> SecurityAnalysis:
    analysis = analyse_security(file, project_for(lambda p: file.text if p == file.path else None))
    assert analysis is not None
    return analysis


def test_the_case_is_found_within_the_budget() -> None:
    analysis = _analyse(_changed((CASE / "base" / "app.py").read_text(), (CASE / "head" / "app.py").read_text()))
    assert [i.cwe for i in analysis.issues if i.rule == "python:removed-guard"] == ["CWE-22"]
    assert analysis.base_unread is None


def test_over_the_step_budget_it_is_named_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protections, "MAX_SCAN_STEPS", 3)
    analysis = _analyse(_changed((CASE / "base" / "app.py").read_text(), (CASE / "head" / "app.py").read_text()))
    assert not [i for i in analysis.issues if i.rule == "python:removed-guard"]
    assert analysis.base_unread is not None and "step budget" in analysis.base_unread
