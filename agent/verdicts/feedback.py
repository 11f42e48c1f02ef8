"""Rules and paths this project's people have rejected.

A rule whose findings drew three or more 👎 in this project and never a 👍 is one the team has
told us it does not want; so is a path where every vote on our findings was a 👎. Findings there are
FALSE_POSITIVE, with the count in the reason, until someone votes otherwise. A model's findings
share one rule name, so they are judged by the calibration of their reviewer and category instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reviewers.kernel.contracts import Finding

MIN_REJECTIONS = 3  # one or two 👎 can be one person's bad day; three with no 👍 is a pattern
MODEL_RULES = frozenset({"", "llm"})


@dataclass(frozen=True)
class PeopleVotes:
    """(👎 votes, 👍 votes) on this project's findings, by rule and by path."""

    by_rule: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    by_path: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def _rejected(votes: tuple[int, int] | None) -> int:
    down, up = votes or (0, 0)
    return down if down >= MIN_REJECTIONS and up == 0 else 0


def rejected_by_people(finding: Finding, votes: PeopleVotes) -> str | None:
    """Why people's votes say this finding is not wanted, or None."""
    if finding.rule not in MODEL_RULES:
        down = _rejected(votes.by_rule.get(finding.rule))
        if down:
            return f"people on this project voted 👎 {down} times on {finding.rule} findings and 👍 never"
    down = _rejected(votes.by_path.get(finding.path))
    if down:
        return f"people on this project voted 👎 {down} times on findings in {finding.path} and 👍 never"
    return None
