"""Direct preference optimisation in a small loop, for the CPU experiment (bench/learning.py).

TRL's DPOTrainer (learning/train_dpo.py) trains from a dataset directory built from stored reviews.
The learning benchmark instead draws its pairs from replayed rollouts and trains the LoRA adapter it
already holds, so this loop does the same objective in process: the sigmoid DPO loss

    L = −log σ(β · [(log π(c) − log π_ref(c)) − (log π(r) − log π_ref(r))])

with the reference log-probabilities computed once, before the first update, from the policy as it
stands (the SFT adapter): no second model is kept in memory.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reviewers.kernel.errors import ConfigError, TrainingError

if TYPE_CHECKING:
    import torch

    from learning.strata.policy import StrategyPolicy


@dataclass(frozen=True)
class DPOLoopConfig:
    beta: float = field(default=0.1, metadata={"help": "DPO temperature on the log-ratio margin"})
    steps: int = field(default=20, metadata={"help": "optimizer steps"})
    batch_size: int = field(default=4, metadata={"help": "pairs per step"})
    learning_rate: float = field(default=5e-4, metadata={"help": "AdamW learning rate (LoRA parameters)"})
    seed: int = field(default=0, metadata={"help": "seed of the pair order"})

    def __post_init__(self) -> None:
        if self.beta <= 0 or self.steps < 1 or self.batch_size < 1 or self.learning_rate <= 0:
            raise ConfigError(f"bad DPO loop config: {self}")


@dataclass(frozen=True)
class PreferencePair:
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]


def dpo_loss(
    chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor, *, beta: float
) -> torch.Tensor:
    """Mean sigmoid DPO loss over a batch of sequence log-probabilities (each a (B,) tensor)."""
    import torch

    margin = (chosen - ref_chosen) - (rejected - ref_rejected)
    return -torch.nn.functional.logsigmoid(beta * margin).mean()


def _sequence_logprobs(policy: StrategyPolicy, prompts: list[list[int]], completions: list[list[int]]) -> torch.Tensor:
    scores = policy.score(prompts, completions)
    return (scores.logprobs * scores.mask).sum(dim=1)


def train_dpo_pairs(policy: StrategyPolicy, pairs: Sequence[PreferencePair], config: DPOLoopConfig) -> list[float]:
    """Fit `policy` (its trainable parameters) to the pairs; returns every step's loss."""
    import torch

    if not pairs:
        raise TrainingError("no preference pairs")
    policy.model.eval()
    with torch.no_grad():
        ref = [
            (
                float(_sequence_logprobs(policy, [p.prompt_ids], [p.chosen_ids])[0]),
                float(_sequence_logprobs(policy, [p.prompt_ids], [p.rejected_ids])[0]),
            )
            for p in pairs
        ]
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=config.learning_rate)
    rng = random.Random(config.seed)
    order = list(range(len(pairs)))
    losses = []
    for _ in range(config.steps):
        idx = rng.sample(order, min(config.batch_size, len(order)))
        prompts = [pairs[i].prompt_ids for i in idx]
        both = _sequence_logprobs(
            policy, prompts + prompts, [pairs[i].chosen_ids for i in idx] + [pairs[i].rejected_ids for i in idx]
        )
        loss = dpo_loss(
            both[: len(idx)],
            both[len(idx) :],
            # on the policy's device: built on the CPU they fail on CUDA ("Expected all tensors to be on
            # the same device", seen on an H100 in bfloat16)
            torch.tensor([ref[i][0] for i in idx], device=both.device, dtype=both.dtype),
            torch.tensor([ref[i][1] for i in idx], device=both.device, dtype=both.dtype),
            beta=config.beta,
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    policy.model.eval()
    return losses
