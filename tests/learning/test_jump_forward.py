"""Decoding only the choices (issue 24, Build 5): jump-forward decoding under a plan schema writes a
valid plan with a forward pass per choice instead of per token. The forced text is tokenized on its
own, so a greedy plan can differ from the token-by-token one (learning/strata/jump_forward.py)."""

from __future__ import annotations

from pathlib import Path

from devices import TEST_DEVICE

from agent.strategy import parse_valid_strategy
from learning.replay import ReplayEnv
from learning.strata.constrained import ConstrainedSampler, case_schema, make_grammar
from learning.strata.jump_forward import decode_jump_forward
from learning.strata.policy import PolicyConfig, StrategyPolicy
from tests.unit.strata.test_replay_env import hand_case


def test_greedy_jump_forward_writes_a_valid_plan_with_far_fewer_forward_passes(tiny_model_dir: Path) -> None:
    policy = StrategyPolicy.load(tiny_model_dir, config=PolicyConfig(device=TEST_DEVICE, use_lora=False))
    env = ReplayEnv()
    case = hand_case().model_copy(update={"review_budget": 2})
    grammar = make_grammar(policy)
    schema = case_schema(case, env, decisions_only=True)
    prompt = policy.prompt_ids(env.reset(case))
    [[token_by_token]] = ConstrainedSampler(policy, grammar, [schema]).sample(
        [prompt], n=1, temperature=0.0, max_new_tokens=400, seed=0
    )
    jumped = decode_jump_forward(policy, prompt, grammar.compile(schema), max_new_tokens=400)
    text = policy.decode(jumped.tokens)
    parse_valid_strategy(text)  # a plan serving would take
    parse_valid_strategy(policy.decode(token_by_token))
    # the first choice reads the same context both ways
    assert text.startswith(policy.decode(token_by_token).split(",")[0])
    assert decode_jump_forward(policy, prompt, grammar.compile(schema), max_new_tokens=400) == jumped
    assert jumped.decided + jumped.forced == len(jumped.tokens)
    assert jumped.forward_passes == jumped.decided - 1  # the first choice reads the prompt's pass
    # most of a decisions-only plan is forced by its schema
    assert jumped.forced > 3 * jumped.decided and len(token_by_token) > 3 * jumped.forward_passes


def test_sampled_jump_forward_stays_inside_the_schema(tiny_model_dir: Path) -> None:
    policy = StrategyPolicy.load(tiny_model_dir, config=PolicyConfig(device=TEST_DEVICE, use_lora=False))
    env = ReplayEnv()
    case = hand_case().model_copy(update={"review_budget": 2})
    grammar = make_grammar(policy)
    compiled = grammar.compile(case_schema(case, env, decisions_only=True))
    prompt = policy.prompt_ids(env.reset(case))
    for seed in range(3):
        result = decode_jump_forward(policy, prompt, compiled, max_new_tokens=400, temperature=1.0, seed=seed)
        z = parse_valid_strategy(policy.decode(result.tokens))
        assert z.plan[0].reviewer == "security" and len(z.plan) <= 2
