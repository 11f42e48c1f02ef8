"""Headroom references on a hand-built merge request: visit values, the oracle, random and fixed rules."""

from __future__ import annotations

import random

import pytest

from agent.strategy import Strategy
from learning.headroom import (
    MRRow,
    Outcome,
    case_table,
    fixed_rules,
    mr_row,
    oracle_visits,
    plan_examples,
    random_visits,
    summarise,
)
from learning.replay import ReplayEnv
from learning.replay_reward import ReplayRewardConfig, reward
from tests.unit.strata.test_replay_env import hand_case

CONFIG = ReplayRewardConfig()


def test_visit_values_by_hand_and_the_oracle_picks_the_defect_file_only() -> None:
    env = ReplayEnv()
    case = hand_case().model_copy(update={"review_budget": 2})
    table = case_table(env, case, CONFIG)
    assert table.required == "security" and table.budget == 2
    sec = {p: table.values[("security", p)].reward for p in table.readable["security"]}
    # a.js: +1.0 (SQL, accepted high) − 0.1 (the eval line, unlabeled) − 0.05 (the step)
    # b.js: −1.0 (the YAML load, rejected) − 0.05; c.js: the step only
    assert sec == pytest.approx({"src/a.js": 0.85, "src/b.js": -1.05, "src/c.js": -0.05})
    assert table.values[("security", "src/a.js")].found == 1.0
    assert oracle_visits(table) == [("security", "src/a.js")]
    row = mr_row(env, case, CONFIG, random_plans=8, seed=0)
    assert row.oracle.reward == pytest.approx(0.85) and row.additivity_error == pytest.approx(0.0)
    assert row.oracle.steps == 1 and row.oracle.step_cost == pytest.approx(0.05)


def test_random_and_fixed_plans_are_valid_and_within_the_budget() -> None:
    env = ReplayEnv()
    case = hand_case().model_copy(update={"review_budget": 2})
    table = case_table(env, case, CONFIG)
    rng = random.Random(0)
    for _ in range(50):
        visits = random_visits(table, rng)
        assert visits[0][0] == "security" and 1 <= len(visits) <= 2 and len(set(visits)) == len(visits)
        assert len({r for r, _ in visits}) <= 2
    for rule in fixed_rules(case.repo_config().reviewers):
        visits = rule.visits(table)
        assert visits and visits[0][0] == "security" and len(visits) <= 2


def _row(split: str, rule: float, oracle: float, fixed: float) -> MRRow:
    def o(r: float) -> Outcome:
        return Outcome(r, max(r, 0.0), 0.0, 0.0, 0.05, 1)

    return MRRow(f"{split}-{rule}-{oracle}", split, "team-0", o(rule), o(0.0), o(oracle), {"f": o(fixed)}, 0.0)


def test_summary_shares_and_paired_gap_by_hand() -> None:
    rows = [_row("train", 0.0, 1.0, 0.5), _row("eval", 0.0, 0.04, 0.0), _row("eval", 0.2, 0.5, 0.1)]
    summary = summarise(rows)
    held = summary["splits"]["eval"]  # type: ignore[index]
    assert summary["best_fixed_rule"] == "f" and held["mrs"] == 2
    assert held["share_gap_over_threshold"] == 0.5  # gaps 0.04 and 0.3
    assert held["oracle_minus_rule"]["mean"] == pytest.approx(0.17)
    assert held["oracle_minus_rule"]["p"] == 0.5  # two MRs, both positive: 2 of 4 patterns
    assert held["means"]["oracle"]["reward"] == pytest.approx(0.27)


def test_oracle_plans_become_sft_targets_and_dpo_pairs_that_execute_as_tabulated() -> None:
    env = ReplayEnv()
    case = hand_case().model_copy(update={"review_budget": 2})
    [example] = plan_examples(env, [case], CONFIG, random_plans=16)
    assert example.s1 == env.reset(case)  # the one renderer
    assert env.plan_visits(case, example.best) == (("security", "src/a.js"),)
    assert example.best_reward == pytest.approx(0.85)
    best = env.execute(case, example.best)
    assert not best.added_by_safety_net and reward(best, case, CONFIG) == pytest.approx(0.85)
    # the worst plan seen spends both steps and posts the rejected YAML finding
    assert ("security", "src/b.js") in env.plan_visits(case, example.worst)
    assert reward(env.execute(case, example.worst), case, CONFIG) == pytest.approx(example.worst_reward)
    assert example.worst_reward < -1.0
    assert Strategy.model_validate_json(example.best.to_json()) == example.best


def test_the_oracle_plan_is_one_the_decoding_schema_admits() -> None:
    """SFT targets must be writable under the per-MR decisions-only grammar RL and serving decode with."""
    import json

    import jsonschema

    from learning.strata.constrained import case_schema

    env = ReplayEnv()
    case = hand_case().model_copy(update={"review_budget": 2})
    [example] = plan_examples(env, [case], CONFIG, random_plans=16)
    schema = case_schema(case, env, decisions_only=True)
    jsonschema.validate(json.loads(example.best.to_json()), schema)
    jsonschema.validate(json.loads(example.worst.to_json()), schema)
