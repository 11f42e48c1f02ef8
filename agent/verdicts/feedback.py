"""Rules, paths and findings this project's people have rejected.

People, not votes (issue 21): the counts here are of distinct people (`agent.store.rejections`: a
GitLab user, or an API token whatever `user` it claims), and a merge request author's 👎 on their own
review is not among them. A rule that three or more people rejected in this project, and nobody
accepted, is one the team has told us it does not want; so is a path where every person who voted
on our findings voted 👎. Findings there are FALSE_POSITIVE, with the count in the reason, until
someone votes otherwise. A model's findings share one rule name, so they are judged by the
calibration of their reviewer and category instead.

Votes alone never silence a high or critical security finding: it goes to NEEDS_HUMAN_REVIEW with
the count, so a person looks at it, instead of disappearing because some people disliked the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from reviewers.kernel.contracts import Finding

MIN_PEOPLE = 3  # one or two people can be a bad day (or one account); three who agree is the team
MODEL_RULES = frozenset({"", "llm"})
NEVER_SILENCED = frozenset({"high", "critical"})  # security severities that votes may not drop

PeopleVerdict = Literal["FALSE_POSITIVE", "NEEDS_HUMAN_REVIEW"]


@dataclass(frozen=True)
class PeopleVotes:
    """(people who voted 👎, people who voted 👍) on this project's findings, by rule and by path."""

    by_rule: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    by_path: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def _rejecters(people: tuple[int, int] | None) -> int:
    down, up = people or (0, 0)
    return down if down >= MIN_PEOPLE and up == 0 else 0


def _people(count: int) -> str:
    return f"{count} person" if count == 1 else f"{count} people"


def people_verdict(finding: Finding, why: str) -> tuple[PeopleVerdict, str]:
    """FALSE_POSITIVE for what people rejected, except a high or critical security finding: a human decides."""
    if finding.category == "security" and finding.severity in NEVER_SILENCED:
        return "NEEDS_HUMAN_REVIEW", (
            f"{why}; a {finding.severity} security finding is not dropped on votes alone: a human decides"
        )
    return "FALSE_POSITIVE", why


def rejected_by_people(finding: Finding, votes: PeopleVotes) -> tuple[PeopleVerdict, str] | None:
    """The verdict and reason when people's votes say this finding's rule or path is not wanted, or None."""
    if finding.rule not in MODEL_RULES:
        down = _rejecters(votes.by_rule.get(finding.rule))
        if down:
            why = f"{_people(down)} rejected this rule before ({finding.rule} on this project; nobody accepted it)"
            return people_verdict(finding, why)
    down = _rejecters(votes.by_path.get(finding.path))
    if down:
        why = f"{_people(down)} rejected findings in {finding.path} before (nobody accepted one)"
        return people_verdict(finding, why)
    return None


def rejected_before(finding: Finding, rejected: Mapping[str, int]) -> tuple[PeopleVerdict, str] | None:
    """The verdict and reason when people rejected this same finding (its fingerprint) before, or None."""
    people = rejected.get(finding.fingerprint)
    if people is None:
        return None
    why = f"{_people(people)} rejected this same finding ({finding.fingerprint}) before: more people 👎 than 👍"
    return people_verdict(finding, why)
