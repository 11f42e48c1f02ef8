"""Reading each prompt once (learning/strata/policy.py PromptCache): with LoRA only on the last layer's
query, output and MLP weights, a prompt's keys and values never change as the adapter trains, so the
prompt is read once and only the completion is scored or decoded — the same numbers as reading it all."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from devices import TEST_DEVICE

from agent.strategy import parse_valid_strategy
from bench.learning import lora_targets
from learning.replay import ReplayEnv
from learning.strata.constrained import case_schema, make_grammar
from learning.strata.jump_forward import JumpForwardSampler, decode_jump_forward
from learning.strata.policy import PolicyConfig, StrategyPolicy
from reviewers.kernel.errors import TrainingError
from tests.unit.strata.test_replay_env import hand_case


def last_layer_targets(model_dir: Path) -> tuple[str, ...]:
    """The learning bench's LoRA targets: the last layer's query, output and MLP weights."""
    return lora_targets(model_dir)


def trained_a_little(policy: StrategyPolicy) -> None:
    """Move the adapter off zero so a stale prompt cache would show."""
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(torch.randn_like(p) * 0.05, alpha=1.0)


def scoring_examples(model_dir: Path) -> tuple[StrategyPolicy, list[list[int]], list[list[int]]]:
    """A policy with the bench's last-layer adapter moved off zero, a long and a short prompt, and a
    completion for each."""
    config = PolicyConfig(device=TEST_DEVICE, lora_target_modules=last_layer_targets(model_dir))
    policy = StrategyPolicy.load(model_dir, config=config)
    trained_a_little(policy)
    env = ReplayEnv()
    prompts = [policy.prompt_ids(env.reset(hand_case())), policy.prompt_ids("a shorter prompt")]
    return policy, prompts, [[5, 6, 7, 8, 9], [11, 12]]


def test_cached_scores_match_reading_the_whole_prompt_and_train_the_same(tiny_model_dir: Path) -> None:
    policy, prompts, completions = scoring_examples(tiny_model_dir)
    plain = policy.score(prompts, completions, with_entropy=True)
    plain_grad = torch.autograd.grad(plain.logprobs.sum(), policy.trainable_parameters())
    policy.enable_prompt_cache(max_bytes=1 << 30)
    cached = policy.score(prompts, completions, with_entropy=True)
    cached_grad = torch.autograd.grad(cached.logprobs.sum(), policy.trainable_parameters())
    assert torch.equal(cached.mask, plain.mask)
    # bfloat16 storage of the prompt's keys and values: close, not bit-equal
    assert torch.allclose(cached.logprobs, plain.logprobs, atol=2e-2)
    assert cached.entropy is not None and plain.entropy is not None
    assert abs(float(cached.entropy) - float(plain.entropy)) < 2e-2
    for a, b in zip(cached_grad, plain_grad, strict=True):
        assert torch.allclose(a, b, atol=2e-2, rtol=5e-2)
    assert policy.prompt_cache is not None and policy.prompt_cache.reads == 2
    policy.score(prompts, completions)
    assert policy.prompt_cache.reads == 2  # read once


def test_a_cache_that_training_would_make_stale_is_refused(tiny_model_dir: Path) -> None:
    everywhere = StrategyPolicy.load(tiny_model_dir, config=PolicyConfig(device=TEST_DEVICE))
    with pytest.raises(TrainingError, match="not in the last layer"):
        everywhere.enable_prompt_cache(max_bytes=1 << 30)
    last = last_layer_targets(tiny_model_dir)[0].rsplit(".", 2)[0]
    keys = PolicyConfig(device=TEST_DEVICE, lora_target_modules=(f"{last}.self_attn.k_proj",))
    with pytest.raises(TrainingError, match="keys or values"):
        StrategyPolicy.load(tiny_model_dir, config=keys).enable_prompt_cache(max_bytes=1 << 30)


def test_the_cache_keeps_to_its_byte_limit(tiny_model_dir: Path) -> None:
    config = PolicyConfig(device=TEST_DEVICE, lora_target_modules=last_layer_targets(tiny_model_dir))
    policy = StrategyPolicy.load(tiny_model_dir, config=config)
    policy.enable_prompt_cache(max_bytes=1)  # room for the newest prompt only
    cache = policy.prompt_cache
    assert cache is not None
    for text in ("one", "two", "one"):
        policy.score([policy.prompt_ids(text)], [[5, 6]])
    assert cache.reads == 3 and len(cache.entries) == 1


def test_jump_forward_sampler_reads_the_prompt_once_and_writes_valid_plans(tiny_model_dir: Path) -> None:
    config = PolicyConfig(device=TEST_DEVICE, lora_target_modules=last_layer_targets(tiny_model_dir))
    policy = StrategyPolicy.load(tiny_model_dir, config=config)
    trained_a_little(policy)
    env = ReplayEnv()
    case = hand_case().model_copy(update={"review_budget": 2})
    grammar = make_grammar(policy)
    schema = case_schema(case, env, decisions_only=True)
    prompt = policy.prompt_ids(env.reset(case))
    uncached = decode_jump_forward(policy, prompt, grammar.compile(schema), max_new_tokens=400)
    policy.enable_prompt_cache(max_bytes=1 << 30)
    sampler = JumpForwardSampler(policy, grammar, [schema])
    [[greedy]] = sampler.sample([prompt], n=1, temperature=0.0, max_new_tokens=400, seed=0)
    [rows] = sampler.sample([prompt], n=3, temperature=1.0, max_new_tokens=400, seed=1)
    assert policy.decode(greedy) == policy.decode(policy._trim(uncached.tokens))  # same plan, adapter merged or not
    for row in [greedy, *rows]:
        z = parse_valid_strategy(policy.decode(row))
        assert z.plan[0].reviewer == "security"
    assert policy.prompt_cache is not None and policy.prompt_cache.reads == 1
    assert sampler.forward_passes < sampler.decided + sampler.forced
    assert not any(p.requires_grad is False for p in policy.trainable_parameters())


def test_rl_steps_with_jump_forward_and_a_shared_prompt_cache(tiny_model_dir: Path, tmp_path: Path) -> None:
    from learning.strata.config import StrataConfig
    from learning.strata.policy import PromptCache
    from learning.strata.run_config import RLTrainConfig
    from learning.strata.trainer import StrataTrainer

    cases = [hand_case().model_copy(update={"case_id": f"hand-{i}", "review_budget": 2}) for i in range(3)]
    strata = StrataConfig(
        sigma=2, n_strategies=3, m_executions=1, keep_ratio=1.0, temperature=1.0, max_new_tokens=400,
        embedder="hashing", learning_rate=5e-2, max_steps=2, seed=0,
    )  # fmt: skip
    train = RLTrainConfig(
        mrs_per_step=3, checkpoint_every=2, cpu_threads=1, invalid_reward=-0.5,
        constrained_decoding=True, decisions_only=True, jump_forward=True,
    )  # fmt: skip
    config = PolicyConfig(device=TEST_DEVICE, lora_target_modules=last_layer_targets(tiny_model_dir))
    trainer = StrataTrainer(
        strata, base_model=tiny_model_dir, train_cases=cases, out_dir=tmp_path / "rl", train_config=train,
        policy_config=config,
    )  # fmt: skip
    shared = trainer.prompt_cache = PromptCache(max_bytes=1 << 30)
    outcome = trainer.train()
    assert len(outcome.step_metrics) == 2
    assert trainer.policy is not None and trainer.policy.prompt_cache is shared
    # the three MRs render the same prompt: it was read once for both steps' sampling and scoring
    assert shared.reads == 1
    trained = [m for m in outcome.step_metrics if not m.get("skipped")]
    assert all(m["grad_norm"] == m["grad_norm"] for m in trained)  # finite, not NaN


def test_scoring_again_runs_the_last_layer_only_with_the_same_numbers(tiny_model_dir: Path) -> None:
    """The kept last-layer inputs give the numbers (and gradients) of the whole model over the cached
    prompt, and a completion scored again does not run the layers below the adapter."""
    from learning.strata.policy import PromptCache

    policy, prompts, completions = scoring_examples(tiny_model_dir)
    runs: list[int] = []
    policy.model.get_base_model().model.layers[0].register_forward_hook(lambda *_: runs.append(1))

    def scored(cache: PromptCache) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        policy.prompt_cache = cache
        out = policy.score(prompts, completions, with_entropy=True)
        assert out.entropy is not None
        return out.logprobs, out.entropy, torch.autograd.grad(out.logprobs.sum(), policy.trainable_parameters())

    whole = scored(PromptCache(max_bytes=1 << 30, keep_last_layer_inputs=False))
    fast = PromptCache(max_bytes=1 << 30)
    first = scored(fast)
    runs.clear()
    again = scored(fast)
    assert not runs  # neither the prompts nor the completions went through the lower layers again
    assert fast.reads == 2 and fast.lower_reads == 2
    for got in (first, again):
        assert torch.allclose(got[0], whole[0], rtol=1e-5, atol=1e-5)
        assert abs(float(got[1]) - float(whole[1])) < 1e-5
        for a, b in zip(got[2], whole[2], strict=True):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_kept_last_layer_inputs_keep_to_the_byte_limit(tiny_model_dir: Path) -> None:
    from learning.strata.policy import PromptCache

    config = PolicyConfig(device=TEST_DEVICE, lora_target_modules=last_layer_targets(tiny_model_dir))
    policy = StrategyPolicy.load(tiny_model_dir, config=config)
    policy.enable_prompt_cache(shared=PromptCache(max_bytes=1))  # room for the newest of each only
    prompt = policy.prompt_ids("one")
    for completion in ([5, 6], [7, 8], [5, 6]):
        policy.score([prompt], [completion])
    cache = policy.prompt_cache
    assert cache is not None
    assert cache.reads == 1 and len(cache.entries) == 1
    assert cache.lower_reads == 3 and len(cache.inputs) == 1


def test_batched_jump_forward_decodes_what_one_at_a_time_decodes(tiny_model_dir: Path) -> None:
    """Prompts of different lengths and several completions each, decoded in batches (padded prompts,
    padded feeds, one forward pass a step): the plans decoded one at a time, greedy and sampled."""
    config = PolicyConfig(device=TEST_DEVICE, lora_target_modules=last_layer_targets(tiny_model_dir))
    policy = StrategyPolicy.load(tiny_model_dir, config=config)
    with torch.no_grad():  # every weight moved a lot: a wrong position or an unmasked pad changes the plans
        generator = torch.Generator().manual_seed(0)
        for p in policy.model.parameters():
            p.add_(torch.randn(p.shape, generator=generator).to(p.device, p.dtype) * p.std().clamp(min=0.05))
    policy.enable_prompt_cache(max_bytes=1 << 30)
    env = ReplayEnv()
    grammar = make_grammar(policy)
    cases = [hand_case().model_copy(update={"review_budget": b}) for b in (2, 1, 3)]
    schemas = [case_schema(x, env, decisions_only=True) for x in cases]
    prompts = [policy.prompt_ids(env.reset(x) + "\nnote" * (7 * i)) for i, x in enumerate(cases)]
    assert len({len(p) for p in prompts}) == 3
    one = JumpForwardSampler(policy, grammar, schemas, batch_size=1)
    many = JumpForwardSampler(policy, grammar, schemas, batch_size=4)  # a batch spans two prompts
    for n, temperature in ((1, 0.0), (3, 1.0)):
        expected = one.sample(prompts, n=n, temperature=temperature, max_new_tokens=400, seed=7)
        got = many.sample(prompts, n=n, temperature=temperature, max_new_tokens=400, seed=7)
        assert got == expected
    assert many.decided == one.decided and many.forced == one.forced
    for rows in got:
        for row in rows:
            parse_valid_strategy(policy.decode(row))


def test_batched_jump_forward_matches_one_at_a_time_on_the_base_model(base_model_dir: Path) -> None:
    """The real model: two prompts of different lengths in one batch, greedy and sampled, give the
    plans decoded one at a time. Positions restarted per feed (or a pad left unmasked) change them;
    a uniform off-by-one shift of every fed position does not (rotary attention sees the same
    distances among the fed tokens, and the grammar leaves few choices), so this test does not
    catch that: comparing log-probabilities would."""
    config = PolicyConfig(device=TEST_DEVICE, lora_target_modules=last_layer_targets(base_model_dir))
    policy = StrategyPolicy.load(base_model_dir, config=config)
    policy.enable_prompt_cache(max_bytes=1 << 30)
    env = ReplayEnv()
    grammar = make_grammar(policy)
    cases = [hand_case().model_copy(update={"review_budget": b}) for b in (2, 3)]
    schemas = [case_schema(x, env, decisions_only=True) for x in cases]
    prompts = [policy.prompt_ids(s1) for s1 in ("Plan the review of a small change.", "Plan it.\nnote\nnote\nnote")]
    assert len({len(p) for p in prompts}) == 2
    one = JumpForwardSampler(policy, grammar, schemas, batch_size=1)
    many = JumpForwardSampler(policy, grammar, schemas, batch_size=4)
    for n, temperature in ((1, 0.0), (2, 1.0)):
        expected = one.sample(prompts, n=n, temperature=temperature, max_new_tokens=400, seed=3)
        assert many.sample(prompts, n=n, temperature=temperature, max_new_tokens=400, seed=3) == expected


def test_warming_reads_each_new_prompt_once_and_later_gets_read_none(tiny_model_dir: Path) -> None:
    from learning.strata.policy import PromptCache

    config = PolicyConfig(device=TEST_DEVICE, lora_target_modules=last_layer_targets(tiny_model_dir))
    policy = StrategyPolicy.load(tiny_model_dir, config=config)
    cache = PromptCache(max_bytes=1 << 30)
    prompts = [policy.prompt_ids(f"merge request {i}: adds a helper") for i in range(3)]
    assert cache.warm(policy, [*prompts, prompts[0]]) == 3
    assert cache.warm(policy, prompts) == 0
    cache.get(policy, prompts[1])
    assert cache.reads == 3
