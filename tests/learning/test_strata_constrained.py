"""Constrained strategy sampling for RL on the tiny model: each prompt of a batch is decoded under its
own merge request's decisions-only schema (greedy, batched; sampled, one prompt read once per group),
a LoRA adapter is merged only while sampling, and the vLLM path refuses the flag with one line."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from devices import TEST_DEVICE

from agent.strategy import Strategy
from agent.strategy_schema import strategy_json_schema, strategy_schema
from learning.strata.constrained import ConstrainedSampler, make_grammar
from learning.strata.policy import PolicyConfig, StrategyPolicy
from learning.strata.run_config import RLTrainConfig
from reviewers.kernel.errors import ConfigError

PATHS_A = ["pkg/alpha.py", "pkg/beta.py", "pkg/gamma.py"]
PATHS_B = ["lib/one.py", "lib/two.py"]


def _check(text: str, schema: dict[str, object], paths: list[str], cap: int) -> None:
    answer = json.loads(text)
    jsonschema.validate(answer, schema)
    z = Strategy.model_validate(answer)
    assert len(z.plan) <= 1  # one reviewer, or the empty plan a docs-only change gets
    for item in z.plan:
        assert set(item.focus_paths) <= set(paths) and 1 <= len(item.focus_paths) <= cap
    # The free text is pinned (empty checks, no risk areas, the default stop condition): only decisions vary.
    assert answer["risk_areas"] == [] and all(item["checks"] == "" for item in answer["plan"])


def test_each_row_follows_its_own_schema_and_the_adapter_is_unmerged_after(tiny_model_dir: Path) -> None:
    policy = StrategyPolicy.load(tiny_model_dir, config=PolicyConfig(device=TEST_DEVICE))
    schemas = [
        strategy_schema(PATHS_A, decisions_only=True, max_focus_paths=2),
        strategy_schema(PATHS_B, decisions_only=True, max_focus_paths=1),
    ]
    sampler = ConstrainedSampler(policy, make_grammar(policy), schemas)
    prompts = [policy.prompt_ids("merge request A"), policy.prompt_ids("merge request B, longer text here")]
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "layers.0." in n}
    greedy = sampler.sample(prompts, n=1, temperature=0.0, max_new_tokens=160, seed=0)
    sampled = sampler.sample(prompts, n=3, temperature=1.0, max_new_tokens=160, seed=0)
    for rows, schema, paths, cap in zip(
        zip(greedy, sampled, strict=True), schemas, (PATHS_A, PATHS_B), (2, 1), strict=True
    ):
        for ids in [*rows[0], *rows[1]]:
            assert ids[-1] in policy.eos_ids  # the grammar ended the answer within the budget
            _check(policy.decode(ids), schema, paths, cap)
    assert len({tuple(ids) for ids in sampled[0]}) > 1  # sampled, not three copies
    after = dict(policy.model.named_parameters())
    assert all(bool((after[n] == v).all()) for n, v in before.items())  # merge undone exactly enough
    assert not any(getattr(m, "merged", False) for m in policy.model.modules())


def test_sampling_is_seeded(tiny_model_dir: Path) -> None:
    policy = StrategyPolicy.load(tiny_model_dir, config=PolicyConfig(device=TEST_DEVICE, use_lora=False))
    schema = strategy_schema(PATHS_A, decisions_only=True, max_focus_paths=3)
    sampler = ConstrainedSampler(policy, make_grammar(policy), [schema])
    prompt = [policy.prompt_ids("merge request A")]
    first = sampler.sample(prompt, n=2, temperature=1.0, max_new_tokens=160, seed=5)
    assert sampler.sample(prompt, n=2, temperature=1.0, max_new_tokens=160, seed=5) == first


def test_decisions_only_schema_keeps_the_full_one_unchanged() -> None:
    full = strategy_json_schema(PATHS_A)
    assert set(full["properties"]) == {"change_type", "risk_areas", "plan", "stop_condition"}
    small = strategy_schema(PATHS_A, decisions_only=True, max_focus_paths=2)
    assert small["$defs"]["plan_security"]["properties"]["focus_paths"]["maxItems"] == 2
    with pytest.raises(ValueError, match="max_focus_paths"):
        strategy_schema(PATHS_A, decisions_only=True, max_focus_paths=0)


def test_vllm_generation_refuses_constrained_decoding() -> None:
    with pytest.raises(ConfigError, match="constrained_decoding needs generation_backend 'transformers'"):
        RLTrainConfig(constrained_decoding=True, generation_backend="vllm")
    assert RLTrainConfig().constrained_decoding is False
