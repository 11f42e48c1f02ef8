"""Rules and findings this project's people have rejected, in the scope they rejected them.

People, not votes (issue 21): the counts here are of distinct people (`agent.store.rejections`: a
GitLab user, or an API token whatever `user` it claims), and a merge request author's 👎 on their own
review is not among them. A vote acts on its own rule and scope (issue 40): a rule that three or more
people rejected in one part of this project (`path_scope`: a file's directory and what is below it),
and nobody accepted there, is one the team has told us it does not want there
(`agent.store.suppressions`, where a maintainer can also lift it). Findings of that rule in that
scope are FALSE_POSITIVE, with the count and the scope in the reason, until someone votes otherwise;
another rule's finding in the same file is not touched (votes counted by path alone once silenced it).
A model's findings share one rule name, so they are judged by the calibration of their reviewer and
category instead.

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
    # (rule, path scope) → people who rejected it, for the suppressions in force (`agent.store.suppressions`)
    suppressions: Mapping[tuple[str, str], int] = field(default_factory=dict)


def path_scope(path: str) -> str:
    """Where a vote on a finding at `path` acts: the file's directory and below ("shop/api/**"), or the
    files at the repository's root ("*")."""
    directory, slash, _ = path.rpartition("/")
    return f"{directory}/**" if slash else "*"


def in_scope(path: str, scope: str) -> bool:
    if scope == "*":
        return "/" not in path
    return path.startswith(scope.removesuffix("**"))


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
    """The verdict and reason when a suppression in force covers this finding's rule where it is
    (its own directory's, or one above it), or None."""
    if finding.rule in MODEL_RULES:
        return None
    for (rule, scope), down in votes.suppressions.items():
        if rule == finding.rule and down >= MIN_PEOPLE and in_scope(finding.path, scope):
            why = (
                f"{_people(down)} rejected this rule before ({finding.rule} in {scope} on this project;"
                " nobody accepted it)"
            )
            return people_verdict(finding, why)
    return None


def rejected_before(finding: Finding, rejected: Mapping[str, int]) -> tuple[PeopleVerdict, str] | None:
    """The verdict and reason when people rejected this same finding (its fingerprint) before, or None."""
    people = rejected.get(finding.fingerprint)
    if people is None:
        return None
    why = f"{_people(people)} rejected this same finding ({finding.fingerprint}) before: more people 👎 than 👍"
    return people_verdict(finding, why)
