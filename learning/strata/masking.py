"""Per-token loss masks and advantages for one rollout laid out as segments.

A rollout is the token sequence of one execution of one strategy: the prompt, the strategy z the
policy wrote, then the reviewer's turns (action tokens the policy wrote, tool and environment tokens
it read). Only what the policy wrote is in the loss:

- prompt, tool, env tokens: mask 0, advantage 0;
- strategy tokens: the strategy advantage, but only in the rollout with `execution_index == 0`.
  All M executions of a strategy repeat the same z; putting it in the loss once (rather than M
  times, or M times at 1/M) makes z count once in the token mean's denominator too, and it is the
  same layout whether the executor is trained or fixed (then each strategy has one rollout, index 0);
- action tokens: their execution's advantage, minus κ on the tokens of steps the judge flagged.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from learning.strata.advantages import apply_step_penalties
from reviewers.kernel.errors import TrainingError

SegmentKind = Literal["prompt", "strategy", "action", "tool", "env"]
SEGMENT_KINDS: tuple[SegmentKind, ...] = ("prompt", "strategy", "action", "tool", "env")
Segment = tuple[SegmentKind, int, int | None]
"""(kind, token_count, step_index): step_index names the reviewer step an action/tool/env segment
belongs to (`reviewers.kernel.contracts.Step.index`); it is None for prompt and strategy segments."""


@dataclass(frozen=True, slots=True)
class TokenTargets:
    """What the loss needs per token of one rollout: a 0/1 mask and an advantage (0 where masked)."""

    mask: npt.NDArray[np.float32]
    advantages: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return int(self.mask.shape[0])


def _check_segments(segments: Sequence[Segment]) -> None:
    for pos, (kind, count, step) in enumerate(segments):
        if kind not in SEGMENT_KINDS:
            raise TrainingError(f"segment {pos}: unknown kind {kind!r}")
        if count < 0:
            raise TrainingError(f"segment {pos}: negative token count {count}")
        if kind == "action" and step is None:
            raise TrainingError(f"segment {pos}: an action segment needs its step index")
        if kind in ("prompt", "strategy") and step is not None:
            raise TrainingError(f"segment {pos}: a {kind} segment belongs to no step, got step {step}")


def build_token_targets(
    segments: Sequence[Segment],
    *,
    execution_index: int,
    strategy_advantage: float,
    execution_advantage: float,
    flagged_steps: Collection[int] = (),
    kappa: float = 0.0,
) -> TokenTargets:
    """The mask and advantages for one rollout (see the module docstring for the rules)."""
    _check_segments(segments)
    if execution_index < 0:
        raise TrainingError(f"execution_index must be non-negative, got {execution_index}")
    mask: list[float] = []
    advantages: list[float] = []
    # The step of each token for the κ penalty; only action tokens are penalised.
    penalised_step: list[int | None] = []
    for kind, count, step in segments:
        if kind == "strategy" and execution_index == 0:
            mask += [1.0] * count
            advantages += [float(strategy_advantage)] * count
            penalised_step += [None] * count
        elif kind == "action":
            mask += [1.0] * count
            advantages += [float(execution_advantage)] * count
            penalised_step += [step] * count
        else:
            mask += [0.0] * count
            advantages += [0.0] * count
            penalised_step += [None] * count
    penalised = apply_step_penalties(advantages, penalised_step, flagged_steps, kappa=kappa)
    return TokenTargets(
        mask=np.asarray(mask, dtype=np.float32),
        advantages=np.asarray(penalised, dtype=np.float32),
    )


def stack_token_targets(
    targets: Sequence[TokenTargets],
    *,
    length: int | None = None,
    pad_side: Literal["left", "right"] = "right",
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """(mask, advantages) as (B, T) arrays, padded with zeros (padding is never in the loss).

    `length` defaults to the longest rollout; a rollout longer than `length` is an error, not a
    silent truncation.
    """
    if not targets:
        raise TrainingError("no rollouts to stack")
    longest = max(len(t) for t in targets)
    width = longest if length is None else length
    if width < longest:
        raise TrainingError(f"a rollout has {longest} tokens, more than the padded length {width}")
    mask = np.zeros((len(targets), width), dtype=np.float32)
    adv = np.zeros((len(targets), width), dtype=np.float32)
    for row, t in enumerate(targets):
        n = len(t)
        cols = slice(width - n, width) if pad_side == "left" else slice(0, n)
        mask[row, cols] = t.mask
        adv[row, cols] = t.advantages
    return mask, adv
