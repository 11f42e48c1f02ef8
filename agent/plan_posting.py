"""Train = serve: what a strategy's plan decides about which findings become threads.

Analyzers run on every changed file whatever the plan says (coverage is never the plan's to lower). A
learned plan decides what a team *sees*: a finding on a (reviewer, file) the plan visits is posted; the
rest are listed in the summary for a person (never dropped), except a floor the plan cannot lower.
The replay environment (`learning.replay`) and serving (`agent.graph`'s verifier node) both call
`plan_visits` and `split_by_plan`, so what RL optimises is what production posts (issue 41).

The floor, each with its reason (the rule sets are `agent.verdicts.posting`'s):
- critical findings (a live key, a removed authentication check): never the plan's to hide;
- the project's own rules (its `[[layers]]` architecture rules): the team wrote them to be told;
- regressions that remove or weaken a guard (the change itself is the evidence).

Request data reaching an injection sink is deliberately not in the floor: it is what the learning
environment's planted defects are, so a floor there would leave the plan nothing to decide about them;
the gate (`learning.gate`) refuses a plan that finds fewer of them than the best fixed rule.

A rule-based strategy (no model in service) plans every reviewer over every file it reads, so it
posts what the verifier keeps, as before.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from agent.strategy import Strategy
from agent.verdicts.posting import PROJECT_RULES, removed_guard
from reviewers.kernel.contracts import Finding
from reviewers.loop import plan_targets

Visit = tuple[str, str]  # (reviewer, file path)

OUTSIDE_PLAN_REASON = "outside the strategy's plan (this reviewer did not visit this file): listed for a person"


def plan_visits(z: Strategy, readable: Mapping[str, Sequence[str]], *, review_budget: int | None) -> tuple[Visit, ...]:
    """The (reviewer, file) items z's steps visit, in order, under each item's step budget and the
    review's shared budget (first come, first served). `readable`: per reviewer, the changed files it
    reads in full, in diff order."""
    left = review_budget
    visits: list[Visit] = []
    for item in z.plan:
        if left is not None and left < 1:
            break
        targets, _ = plan_targets(item, list(readable.get(item.reviewer, ())))
        allowed = item.step_budget if left is None else min(item.step_budget, left)
        seen = [p for p in targets if (item.reviewer, p) not in visits][:allowed]
        visits += [(item.reviewer, p) for p in seen]
        if left is not None:
            left -= len(seen)
    return tuple(visits)


def floor_reason(finding: Finding) -> str | None:
    """Why this finding posts whatever the plan says, or None."""
    if finding.severity == "critical":
        return "critical"
    if finding.rule in PROJECT_RULES:
        return "the project's own rule"
    if removed_guard(finding):
        return "the change removes a guard"
    return None


@dataclass(frozen=True)
class PlanSplit:
    posted: list[Finding]  # the plan visits them, or the floor holds them
    listed: list[Finding]  # found by the analyzers outside the plan: the summary lists them


def split_by_plan(findings: Sequence[Finding], visits: Collection[Visit]) -> PlanSplit:
    """Which findings the plan posts and which it leaves to the summary (see the module docstring)."""
    visited = set(visits)
    posted: list[Finding] = []
    listed: list[Finding] = []
    for f in findings:
        (posted if (f.reviewer, f.path) in visited or floor_reason(f) is not None else listed).append(f)
    return PlanSplit(posted, listed)
