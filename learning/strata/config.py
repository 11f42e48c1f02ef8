"""`StrataConfig`: every knob of StraTA-style RL on the strategy model, with the paper's defaults.

Each ablation preset switches one mechanism off, so a run can show what that mechanism is worth:
`no_fps` (σ = 1: keep every sampled strategy), `no_judge` (κ = 0), `plain_mean` (δ = 1: score a
strategy by its mean reward), `no_filter` (keep_ratio = 1: train on every informative group).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from agent.embeddings import EmbedderConfig, EmbedderKind
from learning.strata.judge import JudgeConfig, JudgeKind
from reviewers.kernel.errors import ConfigError

if TYPE_CHECKING:  # loss.py imports torch; the config must load without it (the CLI builds options from it)
    from learning.strata.loss import LossConfig

AblationName = Literal["full", "no_fps", "no_judge", "plain_mean", "no_filter"]


@dataclass(frozen=True)
class StrataConfig:
    """StraTA's method constants (the paper's defaults) and the run's training knobs."""

    sigma: int = field(
        default=8,
        metadata={"help": "Oversampling factor: sample sigma*N strategy candidates, keep N by FPS."},
    )
    n_strategies: int = field(default=4, metadata={"help": "N: strategies kept per merge request."})
    m_executions: int = field(default=4, metadata={"help": "M: executions (reviewer runs) per strategy."})
    delta: float = field(
        default=0.5,
        metadata={"help": "A strategy's score is the mean of its top delta fraction of M rewards."},
    )
    kappa: float = field(default=0.1, metadata={"help": "Penalty on the tokens of each step the judge flags."})
    eps_low: float = field(default=0.2, metadata={"help": "PPO ratio floor: 1 - eps_low."})
    eps_high: float = field(default=0.28, metadata={"help": "PPO ratio cap: 1 + eps_high (clip-higher)."})
    keep_ratio: float = field(
        default=0.75, metadata={"help": "Fraction of groups kept by reward std (RAGEN StarPO-S filtering)."}
    )
    learning_rate: float = field(default=1e-5, metadata={"help": "AdamW learning rate (LoRA parameters)."})
    max_steps: int = field(default=100, metadata={"help": "Optimizer steps to train for."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of strategy candidates."})
    max_new_tokens: int = field(
        default=256, metadata={"help": "Token limit of one sampled strategy (z renders to about 200)."}
    )
    fixed_executor: bool = field(
        default=True,
        metadata={"help": "Train only the strategy; reviewers stay fixed and the action level drops out."},
    )
    embedder: EmbedderKind = field(
        default="minilm", metadata={"help": "Embedder for FPS: 'minilm' (offline) or 'hashing'."}
    )
    judge: JudgeKind = field(default="rule", metadata={"help": "Self-judgment: 'rule' or 'model'."})
    seed: int = field(default=0, metadata={"help": "Seed for sampling, shuffling and initialisation."})

    def __post_init__(self) -> None:
        problems = []
        if self.sigma < 1:
            problems.append(f"sigma={self.sigma} (must be >= 1)")
        if self.n_strategies < 2:
            problems.append(f"n_strategies={self.n_strategies} (advantages across strategies need >= 2)")
        if self.m_executions < 1:
            problems.append(f"m_executions={self.m_executions} (must be >= 1)")
        if not 0.0 < self.delta <= 1.0:
            problems.append(f"delta={self.delta} (must be in (0, 1])")
        if self.kappa < 0:
            problems.append(f"kappa={self.kappa} (must be >= 0; the penalty is -kappa)")
        if not 0.0 <= self.eps_low < 1.0 or self.eps_high < 0.0:
            problems.append(f"eps_low={self.eps_low}, eps_high={self.eps_high}")
        if not 0.0 < self.keep_ratio <= 1.0:
            problems.append(f"keep_ratio={self.keep_ratio} (must be in (0, 1])")
        if self.learning_rate <= 0 or self.max_steps < 1:
            problems.append(f"learning_rate={self.learning_rate}, max_steps={self.max_steps}")
        if self.temperature <= 0 or self.max_new_tokens < 1:
            problems.append(f"temperature={self.temperature}, max_new_tokens={self.max_new_tokens}")
        if problems:
            raise ConfigError("invalid StraTA config: " + "; ".join(problems))

    @property
    def n_candidates(self) -> int:
        """σ·N: how many strategies to sample per merge request before farthest-point sampling."""
        return self.sigma * self.n_strategies

    def embedder_config(self) -> EmbedderConfig:
        return EmbedderConfig(kind=self.embedder)

    def judge_config(self) -> JudgeConfig:
        return JudgeConfig(kind=self.judge, kappa=self.kappa)

    def loss_config(self) -> LossConfig:
        from learning.strata.loss import LossConfig

        return LossConfig(eps_low=self.eps_low, eps_high=self.eps_high)

    # --- ablation presets: each takes a base config (default: the paper's) and switches one thing off

    @classmethod
    def no_fps(cls, base: StrataConfig | None = None) -> StrataConfig:
        """No diversity selection: sample N strategies and keep them all."""
        return dataclasses.replace(base or cls(), sigma=1)

    @classmethod
    def no_judge(cls, base: StrataConfig | None = None) -> StrataConfig:
        """No self-judgment penalty."""
        return dataclasses.replace(base or cls(), kappa=0.0)

    @classmethod
    def plain_mean(cls, base: StrataConfig | None = None) -> StrataConfig:
        """Score a strategy by the mean of all M rewards."""
        return dataclasses.replace(base or cls(), delta=1.0)

    @classmethod
    def no_filter(cls, base: StrataConfig | None = None) -> StrataConfig:
        """Train on every group with any reward variance."""
        return dataclasses.replace(base or cls(), keep_ratio=1.0)

    @classmethod
    def ablation(cls, name: AblationName, base: StrataConfig | None = None) -> StrataConfig:
        """The preset called `name` ("full" is the base itself)."""
        presets: dict[str, Callable[[StrataConfig | None], StrataConfig]] = {
            "no_fps": cls.no_fps,
            "no_judge": cls.no_judge,
            "plain_mean": cls.plain_mean,
            "no_filter": cls.no_filter,
        }
        if name == "full":
            return base or cls()
        if name not in presets:
            raise ConfigError(f"unknown ablation {name!r}; choose from full, {', '.join(presets)}")
        return presets[name](base)
