"""The gate's decision rule on hand-made numbers, its evaluation of strategies, and the RL run config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.strategy import Strategy
from learning.gate import (
    PolicyEvaluation,
    best_fixed_rule_evaluation,
    evaluate_strategies,
    gate_decision,
    rule_strategies,
)
from learning.replay import ReplayEnv, ReplayEnvConfig
from learning.replay_reward import ReplayRewardConfig
from learning.strata.synthetic import SyntheticConfig, generate_replay_set, problem_paths
from learning.train_rl import load_rl_config
from reviewers.kernel.contracts import PlanItem
from reviewers.kernel.errors import ConfigError, InputError


def numbers(per_case: list[float], f1: float = 0.5, valid: float = 1.0) -> PolicyEvaluation:
    return PolicyEvaluation(
        cases=len(per_case),
        strategies=len(per_case),
        mean_reward=sum(per_case) / len(per_case),
        precision=f1,
        recall=f1,
        f1=f1,
        mean_steps=1.0,
        valid_share=valid,
        per_case=tuple(per_case),
    )


RULES_PER_MR = [0.2, 0.5, -0.1, 0.4, 0.0, 0.3, 0.6, 0.1, 0.2, 0.5, 0.0, 0.4]


def test_gate_promotes_only_when_the_paired_lower_bound_is_above_zero() -> None:
    base = numbers(RULES_PER_MR)
    # better on every MR, by a little or a lot: the paired interval sits above zero
    better = gate_decision(numbers([r + 0.05 + 0.02 * (i % 3) for i, r in enumerate(RULES_PER_MR)]), base)
    assert better.promote, better.reason
    assert better.vs_baseline is not None and better.vs_baseline.lo > 0 and better.vs_baseline.n == 12
    # the same mean gain carried by two lucky MRs and losses elsewhere: unpaired means would promote it
    lucky = [r - 0.05 for r in RULES_PER_MR]
    lucky[0] += 0.9
    lucky[1] += 0.9
    assert sum(lucky) / 12 > base.mean_reward + 0.02
    refused = gate_decision(numbers(lucky), base)
    assert not refused.promote and "lower bound is not above 0" in refused.reason
    # a tie is not a win any more
    assert not gate_decision(numbers(RULES_PER_MR), base).promote
    worse_f1 = gate_decision(numbers([r + 0.3 for r in RULES_PER_MR], f1=0.40), base)
    assert not worse_f1.promote and "F1 fell" in worse_f1.reason
    invalid = gate_decision(numbers([r + 0.3 for r in RULES_PER_MR], valid=0.5), base)
    assert not invalid.promote and "valid strategy share fell" in invalid.reason
    with pytest.raises(InputError, match="margin"):
        gate_decision(base, base, margin=-0.1)
    with pytest.raises(InputError, match="pairs by merge request"):
        gate_decision(numbers(RULES_PER_MR[:6]), base)


def test_gate_refuses_a_candidate_that_beats_the_rules_but_not_the_best_fixed_rule() -> None:
    base = numbers(RULES_PER_MR)
    candidate = numbers([r + 0.2 for r in RULES_PER_MR])
    fixed = numbers([r + 0.25 for r in RULES_PER_MR])
    decision = gate_decision(candidate, base, best_fixed=fixed, best_fixed_rule="largest order")
    assert not decision.promote and "best fixed rule (largest order)" in decision.reason
    assert decision.vs_best_fixed is not None and decision.vs_best_fixed.hi < 0
    assert gate_decision(candidate, base, best_fixed=numbers([r + 0.1 for r in RULES_PER_MR])).promote


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


def test_the_best_fixed_rule_is_executed_as_a_plan_on_the_gates_own_cases() -> None:
    cases = [c for c in generate_replay_set(SyntheticConfig(n_train=1, n_eval=6, seed=3)) if c.split == "eval"]
    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=2))
    rewards = ReplayRewardConfig()
    name, fixed = best_fixed_rule_evaluation(cases, env=env, reward_config=rewards)
    assert "order" in name and len(fixed.per_case) == len(cases)
    rules = evaluate_strategies(cases, rule_strategies(cases, env), env=env, reward_config=rewards)
    # the best of the family is at least as good as any one member, the plain rules' plan included when
    # the family holds it; and a perfect plan (the planted files, security only) is not beaten by it
    good = [
        [
            Strategy(
                change_type="feature",
                plan=[PlanItem(reviewer="security", focus_paths=problem_paths(c)[:2], step_budget=2)],
            )
        ]
        for c in cases
    ]
    perfect = evaluate_strategies(cases, good, env=env, reward_config=rewards)
    assert perfect.mean_reward >= fixed.mean_reward
    decision = gate_decision(perfect, rules, best_fixed=fixed, best_fixed_rule=name)
    assert decision.vs_best_fixed is not None and decision.vs_best_fixed.mean == pytest.approx(
        perfect.mean_reward - fixed.mean_reward
    )
