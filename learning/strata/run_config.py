"""What one StraTA RL run is: `RLTrainConfig`, every field with a default and its reason, beside
`learning.strata.config.StrataConfig` (the method's own hyper-parameters) which it carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from learning.strata.rollout import DEFAULT_INVALID_REWARD
from reviewers.kernel.errors import ConfigError


@dataclass(frozen=True)
class RLTrainConfig:
    """The optimisation knobs of a StraTA run (the method's own constants are in StrataConfig)."""

    mrs_per_step: int = field(default=4, metadata={"help": "merge requests rolled out per optimizer step"})
    ppo_epochs: int = field(default=2, metadata={"help": "passes of the clipped loss over each step's rollouts"})
    minibatch_size: int | None = field(
        default=None, metadata={"help": "rollouts per gradient update within a pass; None = all of them"}
    )
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    warmup_steps: int = field(
        default=0,
        metadata={
            "help": "steps over which the learning rate rises linearly to its value: Adam's first updates move"
            " every weight by about the learning rate whatever the gradient, which can wreck a small model"
        },
    )
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    invalid_reward: float = field(
        default=DEFAULT_INVALID_REWARD, metadata={"help": "reward of a completion that is not a valid strategy"}
    )
    checkpoint_every: int = field(default=10, metadata={"help": "save a checkpoint every this many steps"})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many recent checkpoints to keep"})
    cpu_threads: int | None = field(
        default=None, metadata={"help": "torch threads on the CPU; None keeps torch's default (1 is best when busy)"}
    )
    generation_backend: Literal["transformers", "vllm"] = field(
        default="transformers",
        metadata={"help": "who samples the strategies: 'transformers' (CPU or GPU) or 'vllm' (GPU, colocated)"},
    )
    constrained_decoding: bool = field(
        default=False,
        metadata={
            "help": "sample each merge request's strategies under its JSON schema (xgrammar, transformers only):"
            " an untrained small model writes valid plans only so; the sampled tokens are scored unmasked"
            " (learning/strata/constrained.py says why)"
        },
    )
    decisions_only: bool = field(
        default=False,
        metadata={
            "help": "with constrained_decoding: the decisions-only schema (one reviewer, or security and one"
            " more on a code change; focus paths capped at the review budget; no free text), so a small model"
            " writes a plan in a few dozen tokens"
        },
    )
    jump_forward: bool = field(
        default=False,
        metadata={
            "help": "with constrained_decoding: decode only the choices, appending the grammar's forced text"
            " without a forward pass of its own (learning/strata/jump_forward.py)"
        },
    )

    def __post_init__(self) -> None:
        if self.jump_forward and not self.constrained_decoding:
            raise ConfigError("jump_forward decodes under a schema: it needs constrained_decoding")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.mrs_per_step < 1 or self.ppo_epochs < 1 or self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ConfigError(f"mrs_per_step, ppo_epochs, checkpoint_every and keep_checkpoints must be >= 1: {self}")
        if self.minibatch_size is not None and self.minibatch_size < 1:
            raise ConfigError(f"minibatch_size must be >= 1 or None, got {self.minibatch_size}")
        if self.max_grad_norm <= 0:
            raise ConfigError(f"max_grad_norm must be positive, got {self.max_grad_norm}")
        if self.constrained_decoding and self.generation_backend == "vllm":
            raise ConfigError(
                "constrained_decoding needs generation_backend 'transformers': the vLLM sampler sends its batch"
                " without a per-merge-request schema"
            )
        if self.generation_backend not in ("transformers", "vllm"):
            raise ConfigError(f"generation_backend must be 'transformers' or 'vllm', got {self.generation_backend!r}")
