"""Anchoring a finding on its evidence at the head commit.

A finding rests on the code lines it quotes. Those lines must be in the file at head, compared
line by line with whitespace collapsed (a substring or a nearby line is not the same code), and
the finding is placed where they are: a model that names line 40 for code on line 43 is moved
to 43, so the thread lands on the code it talks about. Evidence that is empty or only whitespace
anchors nothing and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from reviewers.fingerprint import normalise_evidence
from reviewers.kernel.contracts import Finding


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where the evidence is: the first and last new-file line of the quoted run."""

    line: int
    end_line: int


@dataclass(frozen=True, slots=True)
class Unanchored:
    """Why a finding could not be anchored, worded for the verdict's reason."""

    reason: str


def evidence_lines(evidence: str) -> list[str]:
    """The quoted lines, whitespace-collapsed, without blank lines at either end."""
    lines = [normalise_evidence(line) for line in evidence.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _runs(wanted: list[str], have: list[str]) -> list[int]:
    """Every 1-based line where the whole run of wanted lines starts in `have`."""
    first = wanted[0]
    return [
        n + 1 for n in range(len(have) - len(wanted) + 1) if have[n] == first and have[n : n + len(wanted)] == wanted
    ]


def anchor_evidence(finding: Finding, head_text: str | None) -> Anchor | Unanchored:
    """The lines the finding's evidence occupies at head, the occurrence nearest its reported line."""
    wanted = evidence_lines(finding.evidence)
    if not wanted:
        return Unanchored("the finding quotes no code (its evidence is empty), so nothing anchors it")
    if head_text is None:
        return Unanchored(f"{finding.path} is not a readable file at the head commit")
    have = [normalise_evidence(line) for line in head_text.splitlines()]
    starts = _runs(wanted, have)
    if not starts:
        quoted = wanted[0][:80]
        return Unanchored(f"evidence not found: `{quoted}` is not in {finding.path} at the head commit")
    start = min(starts, key=lambda n: (abs(n - finding.line), n))
    return Anchor(start, start + len(wanted) - 1)


def anchored(finding: Finding, anchor: Anchor) -> Finding:
    """The finding placed on its evidence, keeping the span it claimed beyond the quoted lines."""
    shift = anchor.line - finding.line
    end_line = max(anchor.end_line, finding.end_line + shift)
    if shift == 0 and end_line == finding.end_line:
        return finding
    return finding.model_copy(update={"line": anchor.line, "end_line": end_line})
