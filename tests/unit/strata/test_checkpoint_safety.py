"""Checkpoints load with `torch.load(weights_only=True)` (issue 11): the RNG states round-trip in a
form the safe loader accepts, and a checkpoint file that would run code when unpickled is refused."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from learning.strata.checkpoint import RNG_FILE, restore_checkpoint, save_checkpoint
from reviewers.kernel.errors import TrainingError

RAN: list[str] = []


class Payload:
    """What a hostile checkpoint could hold: unpickling it calls `record` (it could call anything)."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (RAN.append, ("payload ran",))


class TinyPolicy:
    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)


def checkpoint(tmp_path: Path) -> tuple[Path, torch.optim.Optimizer]:
    weights = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([weights], lr=0.1)
    weights.grad = torch.ones(3)
    optimizer.step()
    saved = save_checkpoint(tmp_path, step=1, policy=TinyPolicy(), optimizer=optimizer, state={}, keep=2)  # type: ignore[arg-type]
    return saved, optimizer


def test_rng_states_round_trip_through_the_safe_loader(tmp_path: Path) -> None:
    random.seed(3), np.random.seed(4), torch.manual_seed(5)
    saved, optimizer = checkpoint(tmp_path)
    expected = (random.random(), float(np.random.random()), float(torch.rand(1)))
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    assert restore_checkpoint(saved, optimizer=optimizer)["step"] == 1
    assert (random.random(), float(np.random.random()), float(torch.rand(1))) == expected


def test_a_checkpoint_that_runs_code_when_loaded_is_refused(tmp_path: Path) -> None:
    saved, optimizer = checkpoint(tmp_path)
    torch.save({"torch": torch.get_rng_state(), "numpy": Payload(), "python": random.getstate()}, saved / RNG_FILE)
    RAN.clear()
    with pytest.raises(TrainingError, match="corrupt or unsafe"):
        restore_checkpoint(saved, optimizer=optimizer)
    assert RAN == []
