"""Every reviewer over every dev-set merge request, from the files at head and from the diff alone.

The reviewers must run cleanly, report only on changed files with evidence that is the text at
head, and find most of the labelled problems (matching rule of the dev set: same path and
category, within 3 lines). The recall floor is a regression guard, not a target: the rules are
general and the set is small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.diff import parse_unified_diff
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers import run_reviewer
from reviewers.kernel.contracts import REVIEWERS, Finding, PlanItem, ReviewContext

MATCH_LINES = 3
RECALL_FLOOR = 0.75


def load_cases(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def matches(finding: Finding, expected: dict[str, Any]) -> bool:
    line: int = expected["line"]
    same_place = finding.path == expected["path"] and finding.category == expected["category"]
    return same_place and finding.line - MATCH_LINES <= line <= finding.end_line + MATCH_LINES


def review_case(case: dict[str, Any], *, diff_only: bool) -> tuple[ReviewContext, list[Finding]]:
    files = parse_unified_diff(case["diff"])
    files_at_head = case.get("files")
    workspace = (
        SnapshotWorkspace.from_changes(files) if diff_only or not files_at_head else SnapshotWorkspace(files_at_head)
    )
    context = ReviewContext(title=case["title"], description=case["description"], files=files, workspace=workspace)
    findings: list[Finding] = []
    for name in REVIEWERS:
        result = run_reviewer(name, context, PlanItem(reviewer=name, step_budget=10), None)
        assert result.error is None, (case["id"], name, result.error)
        assert len(result.steps) <= 10
        findings += result.findings
    return context, findings


@pytest.mark.parametrize("diff_only", [False, True], ids=["with-files", "diff-only"])
def test_reviewers_on_the_dev_set(devset_path: Path, diff_only: bool) -> None:
    found = total = 0
    for case in load_cases(devset_path):
        context, findings = review_case(case, diff_only=diff_only)
        changed = {f.path for f in context.files}
        for finding in findings:
            assert finding.path in changed, (case["id"], finding.path)
            text = context.workspace.read_file(finding.path)
            assert text is not None
            assert finding.evidence == "\n".join(text.splitlines()[finding.line - 1 : finding.end_line])
            assert finding.evidence.strip(), (case["id"], finding)
        assert len({f.fingerprint for f in findings}) == len(findings)
        for negative in case["negatives"]:
            assert not any(f.path == negative["path"] and f.line == negative["line"] for f in findings), negative
        used: set[int] = set()
        for expected in case["expected"]:
            total += 1
            hit = next((i for i, f in enumerate(findings) if i not in used and matches(f, expected)), None)
            if hit is not None:
                used.add(hit)
                found += 1
    # A bare diff shows no tests (test impact speaks only where the repository tests the code), no
    # module constants outside its hunks, and no modules to resolve imports against (the layer rule
    # does not guess): what is left is the line- and tree-level security and quality checks.
    floor = RECALL_FLOOR if not diff_only else RECALL_FLOOR - 0.15
    assert total and found / total >= floor, f"recall {found}/{total}"
