"""A supervised warm start for the strategy policy: teacher forcing on (s1, strategy JSON) pairs.

RL needs a policy that already writes valid strategy JSON, or every sample is invalid and every
advantage zero. On a real instruct model that is `train sft` (TRL's SFTTrainer on strategy_sft); for
a tiny model built on the fly in a test or a CPU demo, this small loop does the same job in seconds:
loss on the completion tokens only, AdamW, fixed seed. `compact_strategy_json` is the short form
such examples use (defaults left out), which keeps completions and tokens few.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.strategy import Strategy
from learning.strata.policy import StrategyPolicy
from reviewers.kernel.errors import ConfigError, TrainingError


@dataclass(frozen=True)
class WarmStartConfig:
    """The warm start's optimisation knobs."""

    steps: int = field(default=200, metadata={"help": "optimizer steps"})
    batch_size: int = field(default=8, metadata={"help": "examples per step"})
    learning_rate: float = field(default=3e-3, metadata={"help": "AdamW learning rate"})
    seed: int = field(default=0, metadata={"help": "seed of the example order"})

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.learning_rate <= 0:
            raise ConfigError(f"bad warm start config: {self}")


def compact_strategy_json(z: Strategy) -> str:
    """z as JSON without the fields that hold their defaults (it validates back to the same Strategy)."""
    return json.dumps(z.model_dump(mode="json", exclude_defaults=True), separators=(",", ":"), ensure_ascii=False)


def warm_start(
    policy: StrategyPolicy, examples: Sequence[tuple[str, str]], config: WarmStartConfig | None = None
) -> list[float]:
    """Fit `policy` to (s1, completion text) pairs; returns the loss of every step."""
    import torch

    config = config or WarmStartConfig()
    if not examples:
        raise TrainingError("no warm start examples")
    end = policy.tokenizer.eos_token or ""
    rows = [
        (policy.prompt_ids(s1), list(policy.tokenizer(text + end, add_special_tokens=False)["input_ids"]))
        for s1, text in examples
    ]
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=config.learning_rate)
    rng = random.Random(config.seed)
    losses = []
    policy.model.train()
    for _ in range(config.steps):
        batch = rng.sample(rows, min(config.batch_size, len(rows)))
        scores = policy.score([p for p, _ in batch], [c for _, c in batch])
        loss = -(scores.logprobs * scores.mask).sum() / scores.mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        losses.append(float(loss.detach()))
    policy.model.eval()
    return losses
