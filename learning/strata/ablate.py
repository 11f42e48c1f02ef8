"""Ablations of StraTA RL on the CPU: the same warm-started tiny model, trained once per preset.

    python -m learning.strata.ablate [--steps 30] [--out DIR] [--ablations full,no_fps,...]

Builds the synthetic replay set and a tiny model (tokenizer trained on its prompts), warm starts it
on uninformed strategies, then runs `train_rl` for each ablation preset (StrataConfig.ablation) with
the same seed, and prints held-out reward before and after (sampled at the training temperature and
greedy), the mean strategy diversity of the kept strategies, the judge-flag rate and the time. The
setup is the one tests/learning/test_strata_rl.py uses.

With the fixed executor (the analyzers, no model) an execution is deterministic, so M = 1 and the
top-δ score is the reward itself: `plain_mean` cannot differ from `full`; and the analyzer loop's
steps always follow the plan, so the judge flags none and `no_judge` cannot differ either. They are
run anyway, to show it.

Measured when every case sat at one module name (name_pool 1, held-out paths = training paths, so one
constant plan was optimal; 2 shared CPU cores, one seed, 30 steps, 16 held-out MRs; reward of a perfect
strategy ≈ 1.03). Held-out cases now use names and a layout training never shows (synthetic.py), where
the tiny model does not generalise in 30 steps (tests/learning/test_strata_rl.py); rerun for new numbers:

    ablation    sampled before→after   greedy before→after  diversity
    full          0.370 → 0.979          0.669 → 1.028        0.164
    no_fps        0.370 → 0.771          0.669 → 0.884        0.134
    no_judge      0.370 → 0.979          0.669 → 1.028        0.164
    plain_mean    0.370 → 0.979          0.669 → 1.028        0.164
    no_filter     0.370 → 0.907          0.669 → 1.028        0.145
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.strategy import STRATEGY_SYSTEM_PROMPT
from learning.replay import ReplayEnv, ReplayEnvConfig, write_jsonl_cases
from learning.strata.config import AblationName, StrataConfig
from learning.strata.policy import PolicyConfig, StrategyPolicy
from learning.strata.run_config import RLTrainConfig
from learning.strata.synthetic import SyntheticConfig, generate_replay_set, uninformed_strategy
from learning.strata.warm_start import WarmStartConfig, compact_strategy_json, warm_start
from learning.train_rl import EvalConfig, RLRunConfig, train_rl

ABLATIONS: tuple[AblationName, ...] = ("full", "no_fps", "no_judge", "plain_mean", "no_filter")


def demo_config(steps: int) -> RLRunConfig:
    """The CPU demo's run config (the test's): small groups, full weights of the tiny model."""
    return RLRunConfig(
        strata=StrataConfig(
            sigma=2,
            n_strategies=8,
            m_executions=1,
            keep_ratio=0.75,
            temperature=0.8,
            max_new_tokens=64,
            embedder="hashing",
            learning_rate=2e-3,
            max_steps=steps,
            seed=0,
        ),
        train=RLTrainConfig(
            mrs_per_step=4, checkpoint_every=max(steps, 1), cpu_threads=1, invalid_reward=-0.5, warmup_steps=5
        ),
        policy=PolicyConfig(use_lora=False, device="cpu"),
        env=ReplayEnvConfig(step_budget_cap=1),
        eval=EvalConfig(samples=4),
    )


DEMO_SYNTHETIC = SyntheticConfig(n_train=32, n_eval=16, languages=("javascript",), seed=0)


def prepare(work: Path, *, synthetic: SyntheticConfig = DEMO_SYNTHETIC, warm_steps: int = 150) -> tuple[Path, Path]:
    """(replay JSONL, warm-started model directory) in `work`."""
    from learning.tiny_model import build_tiny_model

    cases = generate_replay_set(synthetic)
    replay = write_jsonl_cases(work / "replay.jsonl", cases)
    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
    rng = random.Random(0)
    examples = [
        (env.reset(c), compact_strategy_json(uninformed_strategy(c, rng, max_focus=1)))
        for c in cases
        if c.split == "train"
    ]
    corpus = [s for s, _ in examples] + [t for _, t in examples] + [STRATEGY_SYSTEM_PROMPT] * 3
    base = build_tiny_model(work / "base", seed=0, corpus=corpus, vocab_size=1024)
    policy = StrategyPolicy.load(base, config=PolicyConfig(use_lora=False, device="cpu"))
    warm_start(policy, examples, WarmStartConfig(steps=warm_steps))
    policy.save(work / "warm")
    return replay, work / "warm"


def run_ablation(name: AblationName, *, replay: Path, warm: Path, work: Path, steps: int) -> dict[str, Any]:
    config = demo_config(steps)
    config = replace(config, strata=StrataConfig.ablation(name, config.strata))
    started = time.monotonic()
    result = train_rl(base_model=warm, replay=replay, out_dir=work / f"rl-{name}", config=config)
    trained = [m for m in result.step_metrics if not m.get("skipped")]
    m = result.metrics
    return {
        "ablation": name,
        "sampled_before": m["before_sampled_mean_reward"],
        "sampled_after": m["after_sampled_mean_reward"],
        "greedy_before": m["before_greedy_mean_reward"],
        "greedy_after": m["after_greedy_mean_reward"],
        "diversity": sum(s["strategy_diversity"] for s in result.step_metrics) / len(result.step_metrics),
        "judge_flag_rate": sum(s["judge_flag_rate"] for s in result.step_metrics) / len(result.step_metrics),
        "trained_steps": len(trained),
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="RL steps per ablation")
    parser.add_argument("--out", type=Path, default=None, help="work directory (default: a temporary one)")
    parser.add_argument("--ablations", default=",".join(ABLATIONS), help="comma-separated presets to run")
    parser.add_argument(
        "--languages", default="javascript", help="languages of the synthetic files (javascript,go,python)"
    )
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    names = [n.strip() for n in args.ablations.split(",") if n.strip()]
    unknown = [n for n in names if n not in ABLATIONS]
    if unknown:
        parser.error(f"unknown ablation(s) {', '.join(unknown)}; choose from {', '.join(ABLATIONS)}")
    with tempfile.TemporaryDirectory(prefix="strata-ablate-") as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        languages = tuple(lang.strip() for lang in args.languages.split(",") if lang.strip())
        replay, warm = prepare(work, synthetic=replace(DEMO_SYNTHETIC, languages=languages))  # type: ignore[arg-type]
        rows = [run_ablation(n, replay=replay, warm=warm, work=work, steps=args.steps) for n in names]  # type: ignore[arg-type]
    print(
        f"{'ablation':11s} {'sampled before→after':>22s} {'greedy before→after':>21s}"
        f" {'diversity':>9s} {'flags':>6s} {'secs':>6s}"
    )
    for r in rows:
        print(
            f"{r['ablation']:11s} {r['sampled_before']:9.3f} → {r['sampled_after']:7.3f}"
            f"   {r['greedy_before']:8.3f} → {r['greedy_after']:7.3f} {r['diversity']:9.3f}"
            f" {r['judge_flag_rate']:6.3f} {r['seconds']:6.1f}"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
