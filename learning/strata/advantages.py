"""Advantages at StraTA's two levels, RAGEN's low-variance group filter, and the self-judgment penalty.

Strategy level: each of the N strategies runs M executions; its score is the mean of its top δ
fraction of rewards (a strategy is judged by what it makes possible, not by its unlucky runs), and
scores are normalised across the N strategies. Execution level: each execution's reward is normalised
within its own strategy's M rollouts, so actions are compared only with actions under the same plan.
Steps the self-judgment flags lose κ on their tokens (a penalty only; nothing is ever added).
Standard deviations here are population standard deviations (ddof = 0), as GRPO uses.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np

from reviewers.kernel.errors import TrainingError

# Added to the standard deviation so that a group whose rewards are all equal gets advantages of 0
# instead of a division by zero.
NORMALISE_EPS = 1e-6
# A group whose reward spread is at or below this carries no learning signal (every advantage ≈ 0).
MIN_GROUP_STD = 1e-6
# delta * M is computed in floating point: 0.3 * 10 is 3.0000000000000004, whose ceiling is 4.
# Subtracting this before the ceiling keeps exact products exact.
_CEIL_SLACK = 1e-9


def _finite(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise TrainingError(f"{what} is empty")
    if not all(math.isfinite(v) for v in out):
        raise TrainingError(f"{what} contains NaN or infinite values: {out}")
    return out


def population_std(values: Sequence[float]) -> float:
    """Standard deviation with ddof = 0 (the spread RAGEN logs and filters on)."""
    return float(np.std(_finite(values, "values")))


def top_delta_count(m: int, delta: float) -> int:
    """How many of M rewards the top-δ score averages: ceil(δ·M), at least 1."""
    if m < 1:
        raise TrainingError(f"need at least one reward, got M={m}")
    if not 0.0 < delta <= 1.0:
        raise TrainingError(f"delta must be in (0, 1], got {delta}")
    return max(1, math.ceil(delta * m - _CEIL_SLACK))


def top_delta_score(rewards: Sequence[float], delta: float) -> float:
    """A strategy's score: the mean of its top ceil(δ·M) execution rewards (δ = 1 is the plain mean)."""
    values = _finite(rewards, "rewards")
    k = top_delta_count(len(values), delta)
    best = sorted(values, reverse=True)[:k]
    return sum(best) / k


def _normalise(values: Sequence[float], eps: float, what: str) -> list[float]:
    x = np.asarray(_finite(values, what), dtype=np.float64)
    if eps < 0:
        raise TrainingError(f"eps must be non-negative, got {eps}")
    if x.max() == x.min():
        # All equal: nothing to prefer. Said outright, because floating-point mean and std of equal
        # values can be off by an ulp, and an ulp divided by eps alone is not zero.
        return [0.0] * len(x)
    normalised = (x - x.mean()) / (x.std() + eps)
    return [float(v) for v in normalised]


def strategy_advantages(scores: Sequence[float], eps: float = NORMALISE_EPS) -> list[float]:
    """Strategy scores normalised across the N strategies of one merge request: (s − mean)/(std + eps)."""
    return _normalise(scores, eps, "strategy scores")


def execution_advantages(
    rewards_per_strategy: Sequence[Sequence[float]], eps: float = NORMALISE_EPS
) -> list[list[float]]:
    """Each strategy's M execution rewards normalised within that strategy alone."""
    if not rewards_per_strategy:
        raise TrainingError("no strategies to compute execution advantages for")
    return [_normalise(r, eps, f"rewards of strategy {i}") for i, r in enumerate(rewards_per_strategy)]


def filter_low_variance_groups(
    groups: Sequence[Sequence[float]], keep_ratio: float, *, min_std: float = MIN_GROUP_STD
) -> list[int]:
    """Indices (ascending) of the groups to train on, after RAGEN's StarPO-S uncertainty filter.

    Groups are ranked by the population std of their rewards and the top ceil(keep_ratio·G) are kept
    (RAGEN truncates; rounding up keeps at least one group for any ratio > 0). Ties go to the lower
    index. Whatever the ratio, a group whose std is at or below `min_std` is dropped: every advantage
    in it is ≈ 0, so it would only dilute the token mean. keep_ratio = 1 keeps every informative group.
    """
    if not 0.0 < keep_ratio <= 1.0:
        raise TrainingError(f"keep_ratio must be in (0, 1], got {keep_ratio}")
    if not groups:
        return []
    stds = [population_std(g) for g in groups]
    k = max(1, math.ceil(keep_ratio * len(groups) - _CEIL_SLACK))
    ranked = sorted(range(len(groups)), key=lambda i: (-stds[i], i))
    return sorted(i for i in ranked[:k] if stds[i] > min_std)


def apply_step_penalties(
    token_advantages: Sequence[float],
    token_steps: Sequence[int | None],
    flagged_steps: Collection[int],
    *,
    kappa: float,
) -> list[float]:
    """The token advantages with −κ added on every token of a flagged step.

    `token_steps[i]` is the step the i-th token belongs to (None for tokens outside any step). A
    flagged step with no token is an error: the penalty would silently vanish.
    """
    if kappa < 0:
        raise TrainingError(f"kappa must be non-negative (the penalty is −κ), got {kappa}")
    if len(token_advantages) != len(token_steps):
        raise TrainingError(f"{len(token_advantages)} token advantages but {len(token_steps)} token step labels")
    flagged = set(flagged_steps)
    missing = flagged - {s for s in token_steps if s is not None}
    if missing:
        raise TrainingError(f"flagged steps {sorted(missing)} have no tokens to penalise")
    return [
        float(a) - kappa if s is not None and s in flagged else float(a)
        for a, s in zip(token_advantages, token_steps, strict=True)
    ]
