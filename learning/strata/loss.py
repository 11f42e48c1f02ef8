"""The policy loss: PPO-clip with asymmetric clipping, token-mean, no KL term; and token entropy.

ε_high > ε_low (DAPO's clip-higher) lets unlikely tokens with a positive advantage grow further than
likely ones may shrink, which keeps entropy from collapsing. There is no KL penalty to a reference
model: StraTA trains without one. The mean is over every unmasked token of the whole batch, so long
rollouts weigh by their length rather than being averaged per sequence first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from reviewers.kernel.errors import TrainingError


@dataclass(frozen=True)
class LossConfig:
    """The clipping range of the PPO ratio."""

    eps_low: float = field(default=0.2, metadata={"help": "Lower clip: the ratio is floored at 1 - eps_low."})
    eps_high: float = field(
        default=0.28, metadata={"help": "Upper clip: the ratio is capped at 1 + eps_high (clip-higher)."}
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.eps_low < 1.0 or self.eps_high < 0.0:
            raise TrainingError(f"bad clip range: eps_low={self.eps_low}, eps_high={self.eps_high}")


@dataclass(frozen=True, slots=True)
class LossStats:
    """Detached numbers to log each step (all means over the unmasked tokens)."""

    clip_fraction: float  # tokens whose gradient the clip removed (either side)
    clip_low_fraction: float  # ratio < 1 - eps_low with A < 0
    clip_high_fraction: float  # ratio > 1 + eps_high with A > 0
    approx_kl: float  # k3 estimate of KL(old ‖ new): (r - 1) - log r, never negative
    mean_ratio: float
    tokens: int


def _masked_mean(values: torch.Tensor, mask: torch.Tensor, count: torch.Tensor) -> float:
    return float((values * mask).sum() / count)


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
) -> tuple[torch.Tensor, LossStats]:
    """The clipped surrogate loss, token-mean over `mask`, and its stats.

    All tensors are (B, T); `advantages` may also be (B,), one value per rollout. `old_logprobs` are
    treated as constants (detached). loss = Σ mask·(−min(r·A, clip(r, 1−ε_low, 1+ε_high)·A)) / Σ mask.
    """
    if advantages.dim() == 1 and logprobs.dim() == 2:
        advantages = advantages[:, None].expand_as(logprobs)
    shapes = {t.shape for t in (logprobs, old_logprobs, advantages, mask)}
    if len(shapes) != 1:
        raise TrainingError(f"loss inputs disagree in shape: {sorted(tuple(s) for s in shapes)}")
    LossConfig(eps_low=eps_low, eps_high=eps_high)  # validates the range
    # float32 throughout: in bf16 a token count above 256 is already rounded, and so is exp(Δ).
    mask = mask.to(torch.float32)
    count = mask.sum()
    if float(count) <= 0:
        raise TrainingError("no token is in the loss (the mask is all zeros)")
    advantages = advantages.to(torch.float32).detach()
    log_ratio = logprobs.to(torch.float32) - old_logprobs.detach().to(torch.float32)
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.minimum(ratio * advantages, clipped * advantages)
    loss = (per_token * mask).sum() / count

    with torch.no_grad():
        low = ((ratio < 1.0 - eps_low) & (advantages < 0)).to(mask.dtype)
        high = ((ratio > 1.0 + eps_high) & (advantages > 0)).to(mask.dtype)
        stats = LossStats(
            clip_fraction=_masked_mean(low + high, mask, count),
            clip_low_fraction=_masked_mean(low, mask, count),
            clip_high_fraction=_masked_mean(high, mask, count),
            approx_kl=_masked_mean((ratio - 1.0) - log_ratio, mask, count),
            mean_ratio=_masked_mean(ratio, mask, count),
            tokens=int(count.item()),
        )
    return loss, stats


def token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the next-token distribution over the unmasked positions.

    `logits` is (B, T, V) and `mask` (B, T). Computed in float32: bf16 log-softmax loses the tail
    that entropy is about. RAGEN logs this each step because it falls before the reward does.
    """
    if logits.dim() != 3 or logits.shape[:2] != mask.shape:
        raise TrainingError(f"logits {tuple(logits.shape)} do not match mask {tuple(mask.shape)}")
    m = mask.to(torch.float32)
    count = m.sum()
    if float(count) <= 0:
        raise TrainingError("no token to measure entropy on (the mask is all zeros)")
    logp = torch.log_softmax(logits.to(torch.float32), dim=-1)
    entropy = -(logp.exp() * logp).sum(dim=-1)
    return (entropy * m).sum() / count
