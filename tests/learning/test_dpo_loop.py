"""The in-process DPO loop (learning/strata/preference.py `train_dpo_pairs`, the learning bench's DPO
stage) on the test device: the CPU in CI, CUDA under scripts/device_check.sh. On CUDA it once crashed
at its first step (the reference log-probabilities were built on the CPU beside the policy's CUDA
ones: "Expected all tensors to be on the same device"), seen only on a lent H100, not by any test."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from devices import TEST_DEVICE

from bench.learning import lora_targets
from learning.strata.policy import PolicyConfig, StrategyPolicy
from learning.strata.preference import DPOLoopConfig, PreferencePair, _sequence_logprobs, train_dpo_pairs
from reviewers.kernel.errors import TrainingError

CHOSEN = '{"change_type": "feature", "focus": ["api/routes.py"]}'
REJECTED = '{"change_type": "docs", "focus": ["README.md"]}'


def bench_policy(model_dir: Path) -> StrategyPolicy:
    """As the learning bench loads it: LoRA on the last layer, its prompts read once and cached."""
    config = PolicyConfig(device=TEST_DEVICE, lora_target_modules=lora_targets(model_dir))
    policy = StrategyPolicy.load(model_dir, config=config)
    policy.enable_prompt_cache(max_bytes=1 << 30)
    return policy


def pairs_for(policy: StrategyPolicy) -> list[PreferencePair]:
    end = policy.tokenizer.eos_token or ""

    def ids(text: str) -> list[int]:
        return list(policy.tokenizer(text + end, add_special_tokens=False)["input_ids"])

    prompts = [f"Changed: api/routes.py (+{n} -3), README.md (+1 -0). Plan the review." for n in (4, 12, 30)]
    return [PreferencePair(policy.prompt_ids(p), ids(CHOSEN), ids(REJECTED)) for p in prompts]


def margins(policy: StrategyPolicy, pairs: list[PreferencePair]) -> list[float]:
    """log π(chosen) − log π(rejected) per pair."""
    with torch.no_grad():
        return [
            float(_sequence_logprobs(policy, [p.prompt_ids], [p.chosen_ids])[0])
            - float(_sequence_logprobs(policy, [p.prompt_ids], [p.rejected_ids])[0])
            for p in pairs
        ]


def test_dpo_loop_trains_on_the_test_device(tiny_model_dir: Path) -> None:
    policy = bench_policy(tiny_model_dir)
    assert policy.device == TEST_DEVICE
    assert all(p.device.type == TEST_DEVICE for p in policy.trainable_parameters())
    pairs = pairs_for(policy)
    before = margins(policy, pairs)
    # batches of 2 and more: a (B,) reference tensor on the wrong device cannot broadcast as a scalar would
    losses = train_dpo_pairs(policy, pairs, DPOLoopConfig(steps=12, batch_size=3, learning_rate=5e-3, beta=0.5))
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses)
    # the first step's policy is its own reference: the margin is 0 and the loss log 2 (bfloat16 on
    # CUDA reads the pair batched and padded, the references one by one: close, not equal)
    assert abs(losses[0] - math.log(2)) < (1e-4 if TEST_DEVICE == "cpu" else 0.1)
    assert losses[-1] < losses[0]
    after = margins(policy, pairs)
    assert sum(after) > sum(before)  # chosen gained on rejected
    assert all(p.device.type == TEST_DEVICE for p in policy.trainable_parameters())


def test_no_pairs_is_one_clear_error(tiny_model_dir: Path) -> None:
    with pytest.raises(TrainingError, match="no preference pairs"):
        train_dpo_pairs(bench_policy(tiny_model_dir), [], DPOLoopConfig(steps=1))
