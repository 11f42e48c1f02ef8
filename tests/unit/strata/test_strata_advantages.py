"""Top-δ scores, two-level normalisation, group filtering and κ penalties, with hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from learning.strata.advantages import (
    apply_step_penalties,
    execution_advantages,
    filter_low_variance_groups,
    population_std,
    strategy_advantages,
    top_delta_count,
    top_delta_score,
)
from reviewers.kernel.errors import TrainingError


def test_top_delta_score() -> None:
    # sorted [3, 2, 1, 0]; δ=0.5 → top ceil(2)=2 → (3+2)/2
    assert top_delta_score([1, 0, 3, 2], 0.5) == 2.5
    assert top_delta_score([1, 0, 3, 2], 1.0) == 1.5  # plain mean
    assert top_delta_score([1, 0, 3, 2], 0.1) == 3.0  # ceil(0.4) = 1: the best run
    assert top_delta_score([1, 0, 3, 2], 0.26) == 2.5  # ceil(1.04) = 2
    assert top_delta_score([-1.0], 0.5) == -1.0


def test_top_delta_count_survives_float_products() -> None:
    # 0.3 * 10 = 3.0000000000000004 in floating point; the count is still 3.
    assert top_delta_count(10, 0.3) == 3
    assert top_delta_count(10, 0.7) == 7
    assert top_delta_count(3, 0.5) == 2


@pytest.mark.parametrize(("rewards", "delta"), [([], 0.5), ([1.0], 0.0), ([1.0], 1.5), ([math.nan], 0.5)])
def test_top_delta_score_rejects_bad_input(rewards: list[float], delta: float) -> None:
    with pytest.raises(TrainingError):
        top_delta_score(rewards, delta)


def test_strategy_advantages_by_hand() -> None:
    # mean 2.5; population variance (2.25+0.25+0.25+2.25)/4 = 1.25; std = 1.118034
    # (1-2.5)/1.118034 = -1.341641, (2-2.5)/1.118034 = -0.447214
    assert strategy_advantages([1, 2, 3, 4], eps=0.0) == pytest.approx([-1.341641, -0.447214, 0.447214, 1.341641])
    # the default eps (1e-6) moves these only in the 6th decimal
    assert strategy_advantages([1, 2, 3, 4]) == pytest.approx([-1.341641, -0.447214, 0.447214, 1.341641], rel=1e-5)


def test_equal_scores_give_zero_advantages() -> None:
    assert strategy_advantages([0.7, 0.7, 0.7]) == [0.0, 0.0, 0.0]


def test_execution_advantages_normalise_within_each_strategy() -> None:
    # [0,2]: mean 1, std 1 → [-1, 1]
    # [1,1,1]: std 0 → zeros
    # [0,0,3]: mean 1, variance (1+1+4)/3 = 2, std 1.414214 → [-0.707107, -0.707107, 1.414214]
    out = execution_advantages([[0, 2], [1, 1, 1], [0, 0, 3]], eps=0.0)
    assert out[0] == pytest.approx([-1.0, 1.0])
    assert out[1] == [0.0, 0.0, 0.0]
    assert out[2] == pytest.approx([-0.707107, -0.707107, 1.414214])
    with pytest.raises(TrainingError):
        execution_advantages([])
    with pytest.raises(TrainingError):
        execution_advantages([[1.0], []])


def test_population_std() -> None:
    assert population_std([0, 4]) == 2.0  # ddof=0: sqrt(((0-2)² + (4-2)²)/2)


def test_filter_low_variance_groups() -> None:
    # stds: g0 [1,1,1] 0; g1 [0,2] 1; g2 [0,1] 0.5; g3 [0,4] 2 → ranking g3, g1, g2, g0
    groups = [[1, 1, 1], [0, 2], [0, 1], [0, 4]]
    assert filter_low_variance_groups(groups, 0.75) == [1, 2, 3]  # ceil(3) = 3 kept
    assert filter_low_variance_groups(groups, 0.5) == [1, 3]
    assert filter_low_variance_groups(groups, 0.1) == [3]  # ceil(0.4) = 1: at least one group
    # keep_ratio = 1 would keep g0, but its std is 0: it carries no signal and is dropped anyway
    assert filter_low_variance_groups(groups, 1.0) == [1, 2, 3]


def test_filter_ties_go_to_the_lower_index() -> None:
    assert filter_low_variance_groups([[0, 1], [1, 0]], 0.5) == [0]


def test_filter_drops_only_near_zero_variance_groups() -> None:
    assert filter_low_variance_groups([[0.5, 0.5 + 1e-9], [0, 1e-3]], 1.0) == [1]
    assert filter_low_variance_groups([], 0.5) == []
    with pytest.raises(TrainingError):
        filter_low_variance_groups([[0, 1]], 0.0)


def test_apply_step_penalties() -> None:
    out = apply_step_penalties([0.5, 0.5, 0.5, -1.0], [None, 1, 1, 2], {1}, kappa=0.1)
    assert out == pytest.approx([0.5, 0.4, 0.4, -1.0])
    # κ = 0 (the no_judge ablation) changes nothing
    assert apply_step_penalties([0.5, -1.0], [1, 2], {1, 2}, kappa=0.0) == [0.5, -1.0]


def test_apply_step_penalties_rejects_what_would_be_silently_lost() -> None:
    with pytest.raises(TrainingError, match="no tokens"):
        apply_step_penalties([0.5], [1], {7}, kappa=0.1)
    with pytest.raises(TrainingError, match="non-negative"):
        apply_step_penalties([0.5], [1], {1}, kappa=-0.1)
    with pytest.raises(TrainingError):
        apply_step_penalties([0.5, 0.5], [1], set(), kappa=0.1)
