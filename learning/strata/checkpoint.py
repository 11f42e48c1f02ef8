"""Checkpoints of a StraTA run: the adapter (or model), the optimizer, the RNG states and the step.

`out_dir/checkpoint-N/` holds everything needed to go on from step N: a run killed mid-training
resumes from its latest complete checkpoint and continues the same step sequence (rollout seeds and
the data order are functions of the step, so the continuation is the run it would have been). A
checkpoint is written to a temporary directory and renamed, so a crash while writing never leaves a
half checkpoint that looks complete.
"""

from __future__ import annotations

import json
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from reviewers.kernel.errors import TrainingError

if TYPE_CHECKING:
    import torch

    from learning.strata.policy import StrategyPolicy

CHECKPOINT_PREFIX = "checkpoint-"
STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng_state.pt"
_CHECKPOINT_NAME = re.compile(rf"^{CHECKPOINT_PREFIX}(\d+)$")


def checkpoint_dir(out_dir: Path, step: int) -> Path:
    return Path(out_dir) / f"{CHECKPOINT_PREFIX}{step}"


def list_checkpoints(out_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints (those with a state file), oldest first."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    found = []
    for child in out_dir.iterdir():
        match = _CHECKPOINT_NAME.match(child.name)
        if match and (child / STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(out_dir: Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1][1] if found else None


def save_checkpoint(
    out_dir: Path,
    *,
    step: int,
    policy: StrategyPolicy,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int,
) -> Path:
    """Write checkpoint-`step` atomically and keep only the newest `keep` checkpoints."""
    import torch

    target = checkpoint_dir(out_dir, step)
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    policy.save(tmp)
    torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    torch.save(
        {"torch": torch.get_rng_state(), "numpy": _numpy_state_out(), "python": random.getstate()},
        tmp / RNG_FILE,
    )
    (tmp / STATE_FILE).write_text(json.dumps({**state, "step": step}, indent=2, default=str), encoding="utf-8")
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    for _, old in list_checkpoints(out_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return target


def read_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads((Path(path) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrainingError(f"checkpoint {path} is unreadable: {exc}") from exc
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise TrainingError(f"checkpoint {path} is corrupt: no step in {STATE_FILE}")
    return state


def restore_checkpoint(path: Path, *, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Load the optimizer and RNG states from `path`; returns the trainer state (the weights load separately)."""
    import torch

    state = read_state(path)
    try:
        # weights_only for both files: unpickling arbitrary objects would run code from whoever could
        # write the checkpoint directory (issue 11); the RNG file holds tensors, numbers and tuples only
        optimizer.load_state_dict(torch.load(Path(path) / OPTIMIZER_FILE, weights_only=True))
        rng = torch.load(Path(path) / RNG_FILE, weights_only=True)
        numpy_state = _numpy_state_in(rng["numpy"])
    except (OSError, RuntimeError, ValueError, KeyError, TypeError, pickle.UnpicklingError) as exc:
        raise TrainingError(f"checkpoint {path} is corrupt or unsafe: {str(exc).splitlines()[0]}") from exc
    torch.set_rng_state(rng["torch"])
    np.random.set_state(numpy_state)
    random.setstate(rng["python"])
    return state


def _numpy_state_out() -> dict[str, Any]:
    """numpy's legacy RNG state as tensors and numbers (its tuple holds an ndarray, which a
    weights_only load refuses)."""
    import torch

    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "name": str(name),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def _numpy_state_in(saved: dict[str, Any]) -> tuple[str, Any, int, int, float]:
    keys = saved["keys"].numpy().astype(np.uint32)
    return (str(saved["name"]), keys, int(saved["pos"]), int(saved["has_gauss"]), float(saved["cached_gaussian"]))
