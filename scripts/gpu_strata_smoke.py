"""End-to-end smoke run of StraTA RL's GPU path: vLLM sampling (colocated), weight sync, training on CUDA.

    python scripts/gpu_strata_smoke.py [--model DIR] [--steps 6] [--weight-sync merge|lora] [--out DIR]

Without `--model` it builds a tiny model (head size 64, which every vLLM attention backend takes)
and warm starts it on the synthetic replay set, as the CPU tests do; with `--model` it uses that
local model directory (e.g. a Qwen2.5 instruct model) as it is. It then checks that vLLM samples
the same completions for the same seed, runs `train_rl` with `generation_backend = "vllm"` for a few
steps (LoRA on, weights synced after every step), and fails loudly if sampling is not reproducible
for a seed, a step produced no valid strategy, or anything raised. Needs a CUDA GPU and the
`gpu` extra (`pip install '.[gpu]'`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path


def build_warm_tiny_model(work: Path, replay: Path) -> Path:
    from agent.strategy import STRATEGY_SYSTEM_PROMPT
    from learning.replay import ReplayEnv, ReplayEnvConfig, load_replay_cases
    from learning.strata.policy import PolicyConfig, StrategyPolicy
    from learning.strata.synthetic import uninformed_strategy
    from learning.strata.warm_start import WarmStartConfig, compact_strategy_json, warm_start
    from learning.tiny_model import build_tiny_model

    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
    rng = random.Random(0)
    train = load_replay_cases(replay, split="train")
    examples = [(env.reset(c), compact_strategy_json(uninformed_strategy(c, rng, max_focus=1))) for c in train]
    corpus = [s for s, _ in examples] + [t for _, t in examples] + [STRATEGY_SYSTEM_PROMPT] * 3
    base = build_tiny_model(work / "base", seed=0, corpus=corpus, vocab_size=1024, hidden_size=256, layers=2)
    policy = StrategyPolicy.load(base, config=PolicyConfig(use_lora=False, device="cuda"))
    warm_start(policy, examples, WarmStartConfig(steps=150))
    policy.save(work / "warm")
    return work / "warm"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="local model directory (default: a tiny one)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--weight-sync", choices=("merge", "lora"), default="merge")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    from learning.replay import ReplayEnv, ReplayEnvConfig, load_replay_cases, write_jsonl_cases
    from learning.strata.ablate import demo_config
    from learning.strata.policy import PolicyConfig, StrategyPolicy
    from learning.strata.run_config import RLTrainConfig
    from learning.strata.synthetic import SyntheticConfig, generate_replay_set
    from learning.strata.vllm_backend import VLLMConfig, VLLMSampler, require_vllm
    from learning.train_rl import train_rl

    require_vllm()
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    with tempfile.TemporaryDirectory(prefix="strata-gpu-") as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        replay = write_jsonl_cases(work / "replay.jsonl", generate_replay_set(SyntheticConfig(n_train=32, n_eval=16)))
        model = args.model or build_warm_tiny_model(work, replay)

        # 1. vLLM samples what the transformers policy would be scored on, reproducibly per seed.
        policy = StrategyPolicy.load(model, config=PolicyConfig(use_lora=True, device="cuda"))
        env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
        prompts = [policy.prompt_ids(env.reset(c)) for c in load_replay_cases(replay, split="eval")[:4]]
        vllm_config = VLLMConfig(weight_sync=args.weight_sync, gpu_memory_utilization=0.3, max_model_len=2048)
        sampler = VLLMSampler(model, eos_ids=policy.eos_ids, config=vllm_config, seed=0)
        sampler.sync(policy, 0, work_dir=work / "sync")
        first = sampler.sample(prompts, n=4, temperature=0.8, max_new_tokens=64, seed=7)
        again = sampler.sample(prompts, n=4, temperature=0.8, max_new_tokens=64, seed=7)
        assert first == again, "vLLM sampling is not reproducible for a fixed seed"
        texts = [policy.decode(ids) for rows in first for ids in rows]
        print("vLLM sample:", texts[0][:160])
        scores = policy.score([prompts[0]] * 4, first[0], temperature=0.8)
        print("transformers log-probs of vLLM's samples:", (scores.logprobs * scores.mask).sum(1).tolist())
        del sampler, policy
        torch.cuda.empty_cache()

        # 2. Train a few steps with vLLM generating and weights synced after each step.
        config = demo_config(args.steps)
        config = replace(
            config,
            policy=PolicyConfig(use_lora=True, device="cuda"),
            train=replace(config.train, generation_backend="vllm", constrained_decoding=False, cpu_threads=None),
            vllm=vllm_config,
        )
        assert isinstance(config.train, RLTrainConfig)
        started = time.monotonic()
        result = train_rl(base_model=model, replay=replay, out_dir=work / "rl", config=config)
        print(f"{result.steps} steps in {time.monotonic() - started:.1f}s")
        for m in result.step_metrics:
            print(json.dumps({k: m.get(k) for k in ("step", "reward_mean", "reward_std", "valid_share", "grad_norm")}))
        assert all(m["valid_share"] > 0 for m in result.step_metrics), "a step produced no valid strategy"
        print(json.dumps({k: v for k, v in result.metrics.items() if "mean_reward" in k}, indent=2))
    print("GPU StraTA smoke run: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
