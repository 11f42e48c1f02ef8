"""The opening of the summary note: what the change does, what was checked, what was not, what was found.

A colleague's note, not a report: a reader who opens the merge request should learn in four short
lines what the reviewer understood the change to be (the strategy's change type and risk areas,
the files that matter), what it looked at (the reviewers that ran, the analyzers on every file),
what it could not look at (the coverage list, issue 21), and what it found by severity — the lists
(threads past the budget, findings for a human, files not analyzed) follow in the publisher.

Everything here is built from the review's own records (strategy, changed files, verdicts,
coverage); no model text is quoted, so nothing here needs neutralising beyond the paths, which are
quoted as code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.diff import quote_path
from agent.strategy import Strategy
from agent.verifier import VerifiedFinding
from reviewers.kernel.contracts import SEVERITY_RANK, FileChange, NotReviewed, Severity

FILES_THAT_MATTER = 3  # the risk areas named in the opening; the strategy keeps at most 5
CHANGE_WORDS = {
    "feature": "adds behaviour",
    "bugfix": "fixes behaviour",
    "refactor": "restructures code without meaning to change behaviour",
    "docs": "changes documentation only",
    "tests": "changes tests only",
    "config": "changes configuration",
    "dependency": "changes dependencies",
    "mixed": "mixes several kinds of change",
}
REVIEWER_WORDS = {
    "security": "security (data flow from input to dangerous calls, secrets)",
    "architecture": "architecture (layer rules, import cycles)",
    "code_quality": "code quality (ruff, error handling)",
    "test_impact": "test impact (tests removed or not covering new code)",
}


@dataclass(frozen=True)
class Standing:
    """What is open on the merge request after this push, across all its pushes (`agent.gitlab.mr_state`):
    REAL findings by severity (threads and those listed past the budget), findings held for a person,
    and what changed since the last reviewed push (None on the first review)."""

    severities: Mapping[Severity, int] = field(default_factory=dict)
    threads: int = 0
    listed: int = 0
    held: int = 0
    new: int | None = None
    fixed: int | None = None


@dataclass(frozen=True)
class BelowFloor:
    """How many of this review's findings fell under the project's `min_severity` (never verified or shown)."""

    min_severity: str
    count: int


def _code(text: str) -> str:
    body = text.replace("`", "'")
    return f"`{body}`"


def summary_opening(
    *,
    strategy: Strategy,
    files: Sequence[FileChange],
    verified: Sequence[VerifiedFinding],
    not_reviewed: Sequence[NotReviewed],
    head_sha: str,
    max_discussions: int,
    standing: Standing | None = None,
    config_notes: Sequence[str] = (),
    since_head: str | None = None,
    model_steps_not_completed: Sequence[str] = (),
    below_floor: BelowFloor | None = None,
) -> str:
    """Four short paragraphs: the change, the checks, the gaps, the findings; then what changed since
    the last push and what the settings say. `not_reviewed` and `standing` describe the merge request
    as it stands across all its pushes; without `standing`, the findings are this review's alone.

    `model_steps_not_completed` names this review's model steps that did not complete, by step (the
    publisher lists each with why); `below_floor` counts the findings the project's `min_severity`
    left out — both as the local report says them (`agent.pipeline.outcome_meta`)."""
    added = sum(f.additions for f in files)
    removed = sum(f.deletions for f in files)
    what = CHANGE_WORDS.get(strategy.change_type, strategy.change_type)
    # a new push: only what it changed was reviewed again, while the findings are the whole MR's
    change = f"The change since {_code(since_head[:12])}" if since_head else "The change"
    lines = [f"**{change}** ({len(files)} file(s), +{added} −{removed}) {what}."]
    areas = strategy.risk_areas[:FILES_THAT_MATTER]
    if areas:
        named = "; ".join(f"{_code(quote_path(a.path, ascii_only=False))} ({a.why})" for a in areas)
        lines[0] += f" The files that matter most: {named}."
    if since_head:
        lines[0] += " What follows is the whole merge request's, across its pushes."

    gaps = {n.path for n in not_reviewed}
    analyzed = sum(1 for f in files if f.path not in gaps and not f.is_binary)
    reviewers = [REVIEWER_WORDS.get(p.reviewer, p.reviewer) for p in strategy.plan]
    at = _code(head_sha[:12]) if head_sha else "head"
    checked = f"**Checked** at {at}: the analyzers on {analyzed} of {len(files)} file(s)"
    checked += f"; reviewers: {', '.join(reviewers)}." if reviewers else "; no reviewer was planned for this change."
    lines.append(checked)

    if not_reviewed:
        reasons = Counter(n.reason for n in not_reviewed)
        why = ", ".join(f"{count} {reason}" for reason, count in reasons.most_common())
        lines.append(f"**Not checked in full:** {len(not_reviewed)} file(s) ({why}); they are listed below.")
    else:
        lines.append("**Not checked:** nothing; every changed file was analyzed in full.")
    if model_steps_not_completed:
        steps = ", ".join(dict.fromkeys(_step(gap) for gap in model_steps_not_completed))
        lines.append(
            f"**Model steps not completed:** {len(model_steps_not_completed)} ({steps}), listed below; "
            "the analyzers' findings do not wait for them."
        )

    real = [v for v in verified if v.verdict == "REAL"]
    human = [v for v in verified if v.verdict == "NEEDS_HUMAN_REVIEW"]
    dropped = sum(1 for v in verified if v.verdict == "FALSE_POSITIVE")
    if standing is None:  # this push alone: the budget's share estimated before posting
        threads = min(len(real), max_discussions)
        standing = Standing(Counter(v.finding.severity for v in real), threads, len(real) - threads, len(human))
    lines.append(_found(standing, dropped, below_floor))
    if standing.new is not None and standing.fixed is not None:
        lines.append(
            f"**Since the last push:** {standing.new} new, {standing.fixed} fixed or gone"
            + ("; the rest stands." if sum(standing.severities.values()) + standing.held else ".")
        )
    if config_notes:
        lines.append("**Settings:** " + "\n".join(config_notes))
    return "\n\n".join(lines)


def _step(gap: str) -> str:
    """The step a model gap names (`agent.pipeline.model_not_completed`: "strategy: why ...")."""
    return gap.split(":", 1)[0].strip()


def _found(standing: Standing, dropped: int, below_floor: BelowFloor | None = None) -> str:
    """The findings open on the merge request, by severity, and where they are."""
    by_severity = standing.severities
    if sum(by_severity.values()):
        order = sorted((s for s in by_severity if by_severity[s]), key=lambda s: -SEVERITY_RANK[s])
        counts = ", ".join(f"{by_severity[s]} {s}" for s in order)
        found = f"**Found:** {counts}; {standing.threads} posted as threads"
        if standing.listed:
            found += f", {standing.listed} listed below (comment budget)"
    else:
        found = "**Found:** nothing worth a thread"
    found += f"; {standing.held} for a human to judge" if standing.held else ""
    if below_floor is not None and below_floor.count:
        floor = _code(below_floor.min_severity)
        found += f"; {below_floor.count} below this project's severity floor ({floor}; not shown)"
    found += f"; {dropped} dropped by the verifier (not shown)." if dropped else "."
    return found
