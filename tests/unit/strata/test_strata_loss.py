"""PPO-clip with asymmetric clipping, token-mean and no KL; token entropy."""

from __future__ import annotations

import math

import pytest
import torch

from learning.strata.loss import LossConfig, ppo_clip_loss, token_entropy
from reviewers.kernel.errors import TrainingError

LOG_1_5 = math.log(1.5)
LOG_0_5 = math.log(0.5)


def _one(ratio_log: float, advantage: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    lp = torch.tensor([[ratio_log]], requires_grad=True)
    return lp, torch.zeros(1, 1), torch.tensor([[advantage]]), torch.ones(1, 1)


def test_ratio_above_one_plus_eps_high_is_clipped_for_positive_advantage() -> None:
    lp, old, adv, mask = _one(LOG_1_5, 1.0)
    loss, stats = ppo_clip_loss(lp, old, adv, mask)
    # min(1.5·1, 1.28·1) = 1.28 → loss −1.28, and the clipped token passes no gradient
    assert loss.item() == pytest.approx(-1.28)
    (grad,) = torch.autograd.grad(loss, lp)
    assert grad.item() == 0.0
    assert stats.clip_fraction == 1.0 and stats.clip_high_fraction == 1.0 and stats.clip_low_fraction == 0.0


def test_ratio_below_one_minus_eps_low_is_clipped_for_negative_advantage() -> None:
    lp, old, adv, mask = _one(LOG_0_5, -1.0)
    loss, stats = ppo_clip_loss(lp, old, adv, mask)
    # min(0.5·(−1), 0.8·(−1)) = −0.8 → loss 0.8
    assert loss.item() == pytest.approx(0.8)
    (grad,) = torch.autograd.grad(loss, lp)
    assert grad.item() == 0.0
    assert stats.clip_low_fraction == 1.0


def test_the_pessimistic_side_is_never_clipped() -> None:
    # ratio 1.5, A = −1: min(−1.5, −1.28) = −1.5 → loss 1.5; d/dlp of −r·A = r = 1.5
    lp, old, adv, mask = _one(LOG_1_5, -1.0)
    loss, stats = ppo_clip_loss(lp, old, adv, mask)
    assert loss.item() == pytest.approx(1.5)
    (grad,) = torch.autograd.grad(loss, lp)
    assert grad.item() == pytest.approx(1.5)
    assert stats.clip_fraction == 0.0
    # ratio 0.5, A = +1: min(0.5, 0.8) = 0.5 → loss −0.5
    lp, old, adv, mask = _one(LOG_0_5, 1.0)
    assert ppo_clip_loss(lp, old, adv, mask)[0].item() == pytest.approx(-0.5)


def test_clip_range_is_asymmetric() -> None:
    # ratio 1.25 is inside (0.8, 1.28): not clipped, loss −1.25. Symmetric 0.2 clipping would give −1.2.
    lp, old, adv, mask = _one(math.log(1.25), 1.0)
    assert ppo_clip_loss(lp, old, adv, mask)[0].item() == pytest.approx(-1.25)
    assert ppo_clip_loss(lp, old, adv, mask, eps_high=0.2)[0].item() == pytest.approx(-1.2)


def test_batch_stats_and_masked_tokens() -> None:
    lp = torch.tensor([[LOG_1_5, 5.0], [LOG_0_5, -5.0]])
    old = torch.zeros(2, 2)
    adv = torch.tensor([[1.0, 100.0], [-1.0, 100.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # the wild second column is padding
    loss, stats = ppo_clip_loss(lp, old, adv, mask)
    assert loss.item() == pytest.approx((-1.28 + 0.8) / 2)
    assert stats.clip_fraction == 1.0
    assert stats.mean_ratio == pytest.approx(1.0)  # (1.5 + 0.5)/2
    # k3: (r−1) − log r → 0.5 − 0.405465 = 0.094535 and −0.5 + 0.693147 = 0.193147; mean 0.143841
    assert stats.approx_kl == pytest.approx(0.143841, abs=1e-6)
    assert stats.tokens == 2


def test_token_mean_is_over_the_whole_batch_not_per_sequence() -> None:
    # ratio 1 everywhere; row 0 has three tokens with A = 1, row 1 one token with A = −3.
    lp = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-3.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    loss, _ = ppo_clip_loss(lp, lp.clone(), adv, mask)
    # token mean: −(1+1+1−3)/4 = 0; a per-sequence mean would give −(1 + (−3))/2 = 1
    assert loss.item() == pytest.approx(0.0)


def test_per_rollout_advantages_broadcast() -> None:
    lp = torch.zeros(2, 2)
    loss, _ = ppo_clip_loss(lp, lp.clone(), torch.tensor([2.0, -1.0]), torch.ones(2, 2))
    assert loss.item() == pytest.approx(-(2 + 2 - 1 - 1) / 4)


def test_bf16_inputs_are_counted_exactly() -> None:
    # 1001 is not a bf16 number (it rounds to 1000); the loss must still divide by 1001
    lp = torch.zeros(1, 1001, dtype=torch.bfloat16)
    adv = torch.ones(1, 1001, dtype=torch.bfloat16)
    mask = torch.ones(1, 1001, dtype=torch.bfloat16)
    loss, stats = ppo_clip_loss(lp, lp.clone(), adv, mask)
    assert stats.tokens == 1001
    assert loss.dtype == torch.float32 and loss.item() == -1.0


def test_bad_inputs() -> None:
    lp = torch.zeros(1, 2)
    with pytest.raises(TrainingError, match="all zeros"):
        ppo_clip_loss(lp, lp, lp, torch.zeros(1, 2))
    with pytest.raises(TrainingError, match="shape"):
        ppo_clip_loss(lp, torch.zeros(1, 3), lp, torch.ones(1, 2))
    with pytest.raises(TrainingError):
        LossConfig(eps_low=1.0)


def test_token_entropy() -> None:
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]])
    # uniform over 4 tokens: ln 4 = 1.386294; a near one-hot distribution: ≈ 0
    assert token_entropy(logits, torch.tensor([[1.0, 0.0]])).item() == pytest.approx(math.log(4))
    assert token_entropy(logits, torch.tensor([[0.0, 1.0]])).item() == pytest.approx(0.0, abs=1e-6)
    assert token_entropy(logits, torch.tensor([[1.0, 1.0]])).item() == pytest.approx(math.log(4) / 2)
    with pytest.raises(TrainingError):
        token_entropy(logits, torch.ones(1, 3))
