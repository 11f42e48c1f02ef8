"""The trainer's pure schedule: which merge requests each step draws, and the learning-rate warm-up."""

from __future__ import annotations

import pytest

from learning.replay import ReplayCase
from learning.strata.schedule import batch_for_step, learning_rate_at, rollout_seed
from reviewers.kernel.errors import TrainingError


def cases(n: int) -> list[ReplayCase]:
    return [ReplayCase(case_id=str(i), diff="") for i in range(n)]


def test_batches_walk_a_per_epoch_shuffle_and_depend_only_on_the_step() -> None:
    five = cases(5)
    steps = [[c.case_id for c in batch_for_step(five, s, size=2, seed=0)] for s in range(5)]
    # 5 steps × 2 = 10 draws: two epochs, each a permutation of the 5 cases
    flat = [i for step in steps for i in step]
    assert sorted(flat[:5]) == sorted(flat[5:]) == ["0", "1", "2", "3", "4"]
    assert steps == [[c.case_id for c in batch_for_step(five, s, size=2, seed=0)] for s in range(5)]
    assert steps != [[c.case_id for c in batch_for_step(five, s, size=2, seed=1)] for s in range(5)]
    with pytest.raises(TrainingError):
        batch_for_step([], 0, size=2, seed=0)


def test_learning_rate_warm_up() -> None:
    assert [learning_rate_at(s, peak=1.0, warmup=4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert learning_rate_at(0, peak=2e-3, warmup=0) == 2e-3
    assert rollout_seed(3, 5) == 3 * 7919 + 5
