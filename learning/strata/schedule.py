"""The training schedule's pure parts: which merge requests a step trains on, the learning rate at
a step (linear warm-up), and the seed of a step's rollouts. Pure functions, tested with hand values."""

from __future__ import annotations

import random
from collections.abc import Sequence

from learning.replay import ReplayCase
from reviewers.kernel.errors import TrainingError


def batch_for_step(cases: Sequence[ReplayCase], step: int, *, size: int, seed: int) -> list[ReplayCase]:
    """The merge requests of step `step` (0-based): consecutive slices of a per-epoch shuffle.

    A function of the step alone, so a resumed run draws exactly what the uninterrupted one would.
    """
    if not cases:
        raise TrainingError("no training cases")
    out = []
    for k in range(step * size, (step + 1) * size):
        epoch, pos = divmod(k, len(cases))
        order = list(range(len(cases)))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        out.append(cases[order[pos]])
    return out


def learning_rate_at(step: int, *, peak: float, warmup: int) -> float:
    """Linear warm-up over the first `warmup` steps (0-based `step`), then constant."""
    return peak if warmup <= 0 else peak * min(1.0, (step + 1) / warmup)


def rollout_seed(seed: int, step: int) -> int:
    return seed * 7919 + step
