"""The gate's decision rule on hand-made numbers, its evaluation of strategies, and the RL run config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.strategy import Strategy
from learning.gate import PolicyEvaluation, evaluate_strategies, gate_decision, rule_strategies
from learning.replay import ReplayEnv, ReplayEnvConfig
from learning.replay_reward import ReplayRewardConfig
from learning.strata.synthetic import SyntheticConfig, generate_replay_set, problem_paths
from learning.train_rl import load_rl_config
from reviewers.kernel.contracts import PlanItem
from reviewers.kernel.errors import ConfigError, InputError


def numbers(reward: float, f1: float = 0.5, valid: float = 1.0) -> PolicyEvaluation:
    return PolicyEvaluation(
        cases=10, strategies=10, mean_reward=reward, precision=f1, recall=f1, f1=f1, mean_steps=1.0, valid_share=valid
    )


def test_gate_decision_rule() -> None:
    base = numbers(0.50)
    better = gate_decision(numbers(0.53), base, margin=0.02)
    assert better.promote and better.reward_delta == pytest.approx(0.03)
    assert "beats 0.500 by 0.030" in better.reason
    assert not gate_decision(numbers(0.515), base, margin=0.02).promote  # better, but not by the margin
    assert not gate_decision(numbers(0.40), base, margin=0.02).promote
    worse_f1 = gate_decision(numbers(0.60, f1=0.40), base, margin=0.02)
    assert not worse_f1.promote and "F1 fell" in worse_f1.reason
    invalid = gate_decision(numbers(0.90, valid=0.5), base, margin=0.02)
    assert not invalid.promote and "valid strategy share fell" in invalid.reason
    assert gate_decision(numbers(0.50), base, margin=0.0).promote  # zero margin: a tie is enough
    with pytest.raises(InputError, match="margin"):
        gate_decision(base, base, margin=-0.1)


def test_evaluate_strategies_with_and_without_the_rule_fallback() -> None:
    cases = generate_replay_set(SyntheticConfig(n_train=2, n_eval=1, seed=1))[:2]
    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
    rewards = ReplayRewardConfig()
    good = [
        Strategy(
            change_type="feature", plan=[PlanItem(reviewer="security", focus_paths=problem_paths(c), step_budget=1)]
        )
        for c in cases
    ]
    hits = [rewards.severity_weights[c.findings[0].severity] - rewards.step_cost for c in cases]
    perfect = evaluate_strategies(cases, [[z] for z in good], env=env, reward_config=rewards)
    assert perfect.mean_reward == pytest.approx(sum(hits) / 2)
    assert (perfect.precision, perfect.recall, perfect.f1, perfect.mean_steps, perfect.valid_share) == (1, 1, 1, 1, 1)
    # an invalid answer: serving falls back to the rules (which find the source file here) ...
    fallback = evaluate_strategies(cases, [[None], [good[1]]], env=env, reward_config=rewards)
    rules = evaluate_strategies(cases[:1], rule_strategies(cases[:1], env), env=env, reward_config=rewards)
    assert fallback.valid_share == 0.5
    assert fallback.mean_reward == pytest.approx((rules.mean_reward + hits[1]) / 2)
    # ... while training scores it as invalid
    penalised = evaluate_strategies(cases, [[None], [good[1]]], env=env, reward_config=rewards, invalid_reward=-0.5)
    assert penalised.mean_reward == pytest.approx((-0.5 + hits[1]) / 2) and penalised.strategies == 2


def test_rl_config_file_sections_and_ablations(tmp_path: Path) -> None:
    path = tmp_path / "rl.json"
    path.write_text(
        json.dumps(
            {
                "strata": {"sigma": 2, "n_strategies": 8, "embedder": "hashing", "max_steps": 3},
                "train": {"mrs_per_step": 2, "invalid_reward": -0.5},
                "policy": {"use_lora": False, "lora_target_modules": ["q_proj"]},
                "env": {"step_budget_cap": 1},
                "reward": {"step_cost": 0.1},
                "eval": {"samples": 2},
            }
        ),
        encoding="utf-8",
    )
    config = load_rl_config(path)
    assert (config.strata.sigma, config.strata.n_candidates, config.strata.max_steps) == (2, 16, 3)
    assert (config.train.mrs_per_step, config.policy.lora_target_modules, config.env.step_budget_cap) == (
        2,
        ("q_proj",),
        1,
    )
    assert config.reward.step_cost == 0.1 and config.eval.samples == 2
    assert load_rl_config(path, ablation="no_fps").strata.sigma == 1
    assert load_rl_config(path, ablation="no_filter").strata.keep_ratio == 1.0
    assert load_rl_config(path, ablation="plain_mean").strata.delta == 1.0
    assert load_rl_config(path, ablation="no_judge").strata.kappa == 0.0
    assert load_rl_config(None).strata.sigma == 8  # the paper's defaults
    # plans are sampled as the trained (analyzer-only) version is served, and a "train" section that
    # names other fields keeps that
    assert config.train.constrained_decoding and config.train.decisions_only
    assert load_rl_config(None).train.constrained_decoding
    for bad, message in (
        ({"nope": {}}, "unknown rl config section"),
        ({"strata": {"sigmaa": 2}}, "unknown field"),
        ({"strata": {"sigma": 0}}, "sigma=0"),
        ({"train": []}, "must be an object"),
    ):
        path.write_text(json.dumps(bad), encoding="utf-8")
        with pytest.raises(ConfigError, match=message):
            load_rl_config(path)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_rl_config(path)
