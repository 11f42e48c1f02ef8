"""Reward from feedback: what a finding's votes say, and what a whole review earned.

A finding's label comes from its votes: each user's latest vote counts once (a withdrawn vote, value
0, counts as no vote), a thread's outcome is one more voter, and the majority decides; a tie or no
vote at all leaves the finding `unknown`. A review's reward is

    R = Σ accepted − α·Σ rejected − β·cost + w·Σ unknown

with cost in thousands of tokens and w (weight of unknown findings) zero by default: a finding
nobody judged says little. Shadow strategies are never posted, so their findings borrow the label of
the posted finding they match (same fingerprint, or the same path and category a few lines apart).
Everything here is pure: the dataset builder feeds it rows read from Postgres.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

FindingLabel = Literal["accepted", "rejected", "unknown"]
VoteValue = Literal[-1, 0, 1]

# Tokens are counted in thousands so that β reads as "reward lost per 1k tokens".
TOKENS_PER_COST_UNIT = 1000


@dataclass(frozen=True, slots=True)
class Vote:
    """One feedback row: a user's (or a thread outcome's) judgment of a finding at a time."""

    user_key: str
    value: VoteValue
    at: datetime


@dataclass(frozen=True, slots=True)
class LabeledFinding:
    """The parts of a finding that matching and replay need, with its label."""

    fingerprint: str
    path: str
    line: int
    category: str
    severity: str
    label: FindingLabel


@dataclass(frozen=True, slots=True)
class FeedbackRewardConfig:
    """How feedback turns into a review's reward and which reviews feed which dataset."""

    alpha: float = field(default=1.0, metadata={"help": "weight of each rejected finding"})
    beta: float = field(default=0.01, metadata={"help": "reward lost per 1000 tokens a review spent"})
    unknown_weight: float = field(default=0.0, metadata={"help": "weight of a finding nobody judged (0 ignores it)"})
    match_line_window: int = field(
        default=3, metadata={"help": "lines apart a shadow finding may be from a posted one and still match"}
    )
    sft_min_reward: float = field(
        default=1.0,
        metadata={"help": "a review's strategy enters strategy_sft when its reward is at least this"},
    )
    dpo_margin: float = field(
        default=1.0,
        metadata={"help": "two strategies for one MR form a DPO pair when rewards differ by this"},
    )
    kto_desirable_min: float = field(
        default=1.0, metadata={"help": "a strategy is a desirable KTO example at or above this reward"}
    )
    kto_undesirable_max: float = field(
        default=-1.0, metadata={"help": "a strategy is an undesirable KTO example at or below this reward"}
    )


def latest_votes(votes: Iterable[Vote]) -> dict[str, Vote]:
    """Each user's most recent vote (ties in time keep the later row)."""
    latest: dict[str, Vote] = {}
    for vote in votes:
        seen = latest.get(vote.user_key)
        if seen is None or vote.at >= seen.at:
            latest[vote.user_key] = vote
    return latest


def finding_label(votes: Iterable[Vote]) -> FindingLabel:
    """accepted / rejected by the majority of each user's latest vote; unknown on a tie or no votes."""
    tally = sum(v.value for v in latest_votes(votes).values())
    if tally > 0:
        return "accepted"
    if tally < 0:
        return "rejected"
    return "unknown"


def review_reward(labels: Iterable[FindingLabel], *, cost_tokens: int, config: FeedbackRewardConfig) -> float:
    """R = Σ accepted − α·Σ rejected − β·cost(k tokens) + w·Σ unknown."""
    counts = {"accepted": 0, "rejected": 0, "unknown": 0}
    for label in labels:
        counts[label] += 1
    cost = cost_tokens / TOKENS_PER_COST_UNIT
    return (
        counts["accepted"]
        - config.alpha * counts["rejected"]
        - config.beta * cost
        + config.unknown_weight * counts["unknown"]
    )


def inherit_label(shadow: LabeledFinding, posted: Sequence[LabeledFinding], *, line_window: int) -> FindingLabel:
    """The label a shadow finding borrows from the parent review's findings.

    A fingerprint match wins; otherwise the nearest finding at the same path and category within
    `line_window` lines, the first one listed on a tie. Unmatched findings stay unknown.
    """
    for candidate in posted:
        if candidate.fingerprint and candidate.fingerprint == shadow.fingerprint:
            return candidate.label
    best: LabeledFinding | None = None
    best_distance = line_window + 1
    for candidate in posted:
        if candidate.path != shadow.path or candidate.category != shadow.category:
            continue
        distance = abs(candidate.line - shadow.line)
        if distance < best_distance:
            best, best_distance = candidate, distance
    return best.label if best is not None else "unknown"
