"""The replay reward: what a strategy earned when it was replayed on a merge request people labeled.

`reward` matches the verified findings of an `Execution` to the case's labeled ones with the
evaluation's own matching rule, and weighs a matched accepted finding by its severity:

    R = Σ_matched accepted w(severity) − rejected_weight·#matched rejected − unlabeled_cost·#unmatched
        − step_cost·#steps

RL (learning/strata) trains on it and the evaluation gate (learning/gate) decides on it. It is not
the feedback reward of a posted review (`learning.feedback_labels.review_reward`), which counts the
votes a review's own findings got and picks the reviews that enter the datasets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.evaluation import ExpectedFinding, MatchResult, match_findings
from learning.replay import Execution, ReplayCase, ReplayFinding
from reviewers.kernel.contracts import Finding, Severity
from reviewers.kernel.errors import ConfigError

DEFAULT_SEVERITY_WEIGHTS: dict[Severity, float] = {
    "info": 0.25,
    "low": 0.5,
    "medium": 0.75,
    "high": 1.0,
    "critical": 1.25,
}


@dataclass(frozen=True)
class ReplayRewardConfig:
    """What a replayed execution earns (the feedback reward of a posted review is `learning.feedback_labels`)."""

    severity_weights: Mapping[str, float] = field(
        default_factory=lambda: {str(k): v for k, v in DEFAULT_SEVERITY_WEIGHTS.items()},
        metadata={"help": "reward of a matched accepted finding, by its labeled severity"},
    )
    rejected_weight: float = field(default=1.0, metadata={"help": "lost per matched rejected finding"})
    unlabeled_cost: float = field(
        default=0.1, metadata={"help": "lost per reported finding that matches no labeled one (noise)"}
    )
    step_cost: float = field(default=0.05, metadata={"help": "lost per reviewer step (the review's cost)"})

    def __post_init__(self) -> None:
        missing = sorted(set(DEFAULT_SEVERITY_WEIGHTS) - set(self.severity_weights))
        if missing:
            raise ConfigError(f"severity_weights lacks {', '.join(missing)}")
        if min(self.rejected_weight, self.unlabeled_cost, self.step_cost) < 0:
            raise ConfigError("rejected_weight, unlabeled_cost and step_cost are costs: they must be >= 0")


@dataclass(frozen=True)
class RewardBreakdown:
    accepted: float  # Σ severity weights of matched accepted findings
    rejected: int
    unlabeled: int
    steps: int
    total: float
    match: MatchResult


def match_labeled(reported: Sequence[Finding], case: ReplayCase) -> tuple[MatchResult, dict[int, ReplayFinding]]:
    """Match reported findings to the case's labeled ones; also maps each expected item back to its label."""
    expected: list[ExpectedFinding] = []
    back: dict[int, ReplayFinding] = {}
    for f in case.findings:
        item = ExpectedFinding(path=f.path, line=f.line, category=f.category, severity=f.severity)
        expected.append(item)
        back[id(item)] = f
    return match_findings(reported, expected), back


def reward_breakdown(execution: Execution, case: ReplayCase, config: ReplayRewardConfig) -> RewardBreakdown:
    """The reward and its parts (see the module docstring for the formula)."""
    result, labels = match_labeled(execution.findings, case)
    accepted = 0.0
    rejected = 0
    for _, expected in result.true_positives:
        labeled = labels[id(expected)]
        if labeled.label == "accepted":
            accepted += float(config.severity_weights[labeled.severity])
        else:
            rejected += 1
    unlabeled = len(result.false_positives)
    steps = execution.n_steps
    total = accepted - config.rejected_weight * rejected - config.unlabeled_cost * unlabeled - config.step_cost * steps
    return RewardBreakdown(accepted, rejected, unlabeled, steps, total, result)


def reward(execution: Execution, case: ReplayCase, config: ReplayRewardConfig) -> float:
    return reward_breakdown(execution, case, config).total
