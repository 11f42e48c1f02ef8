"""An adapter on the last K layers that re-reads the prompt (learning/strata/deep_cache.py, deep_sft.py):
the cache gives what a full read gives, the decision log-probabilities are the constrained decoder's,
gradients reach the adapted key and value projections, and SFT on one MR's decisions moves the greedy
plan to its target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from devices import TEST_DEVICE

from learning.headroom import strategy_of
from learning.replay import ReplayEnv
from learning.strata.constrained import case_schema, make_grammar
from learning.strata.decision_targets import replay, vocabulary_bytes
from learning.strata.deep_cache import DeepPromptCache, deep_lora_targets, read_frozen
from learning.strata.deep_sft import ReadCase, ReadTarget, decision_logprobs, sft_loss
from learning.strata.jump_forward import JumpForwardSampler
from learning.strata.policy import PolicyConfig, StrategyPolicy
from learning.tiny_model import build_tiny_model
from reviewers.kernel.errors import TrainingError
from tests.unit.strata.test_replay_env import hand_case

MODULES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.up_proj")


@pytest.fixture(scope="module")
def three_layers(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with three layers (its tokenizer's corpus is the conftest one's)."""
    from learning_store import synthetic_mrs

    from agent.strategy import STRATEGY_SYSTEM_PROMPT
    from learning.episodes import s1_for_snapshot

    mrs = synthetic_mrs(40, seed=99)
    corpus = [STRATEGY_SYSTEM_PROMPT] + [s1_for_snapshot(m.snapshot) for m in mrs] + [m.good.to_json() for m in mrs]
    del tiny_model_dir
    return build_tiny_model(tmp_path_factory.mktemp("tiny3") / "m", seed=0, corpus=corpus, vocab_size=1024, layers=3)


def adapted(model_dir: Path, layers: int = 2) -> StrategyPolicy:
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    targets = deep_lora_targets(config, layers, MODULES)
    torch.manual_seed(0)  # LoRA's A matrices are drawn from the global generator: the same whatever ran before
    policy = StrategyPolicy.load(model_dir, config=PolicyConfig(device=TEST_DEVICE, lora_target_modules=targets))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # move the adapter off zero so a stale cache would show
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    return policy


def test_the_deep_cache_gives_what_a_full_read_gives(three_layers: Path) -> None:
    policy = adapted(three_layers)
    prompt = policy.prompt_ids(ReplayEnv().reset(hand_case()))
    completion = [5, 6, 7, 8]
    policy.model.eval()
    with torch.no_grad():
        full = policy.model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        cache = DeepPromptCache(max_bytes=1 << 30, first_trainable=1, dtype=torch.float32)
        cache.check(policy)
        feed = torch.tensor([[prompt[-1], *completion[:-1]]])
        cached = policy.model(input_ids=feed, cache=cache.get(policy, prompt), use_cache=True).logits[0]
    assert torch.allclose(cached, full, atol=1e-4)
    assert cache.reads == 1
    # a cache that recomputes only the last layer would be stale: layer 1 is adapted too
    with pytest.raises(TrainingError, match="below the cache"):
        DeepPromptCache(max_bytes=1 << 30, first_trainable=2).check(policy)


def read_case(policy: StrategyPolicy, first: int, prompt: list[int], plans: list[list[int]]) -> ReadCase:
    from transformers import DynamicCache

    stored, hidden = read_frozen(policy, first, prompt[:-1])
    targets = []
    for tokens in plans:
        cache = DynamicCache(ddp_cache_data=[(k, v) for k, v in stored], config=policy.model.config)
        _, h = read_frozen(policy, first, [prompt[-1], *tokens[:-1]], cache)
        allowed = [[t, t + 1, t + 2] for t in tokens]  # every position a decision among three tokens
        targets.append(ReadTarget(tokens, list(range(len(tokens))), allowed, h))
    return ReadCase("hand-1", prompt, hidden, good=targets)


def test_decision_logprobs_are_the_full_models_renormalised_and_train_the_key_projection(three_layers: Path) -> None:
    policy = adapted(three_layers)
    prompt = policy.prompt_ids(ReplayEnv().reset(hand_case()))
    plans = [[5, 6, 7, 8], [9, 10]]
    case = read_case(policy, 1, prompt, plans)
    got = decision_logprobs(policy, 1, case, case.good)
    for tokens, lp in zip(plans, got, strict=True):
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
        for j, t in enumerate(tokens):
            expected = torch.log_softmax(logits[j, [t, t + 1, t + 2]], dim=-1)[0]
            assert abs(float(lp[j].detach()) - float(expected)) < 1e-4
    loss = sft_loss(policy, 1, case)
    loss.backward()
    grads = {n: p.grad for n, p in policy.model.named_parameters() if p.requires_grad}
    key = [g for n, g in grads.items() if "layers.1.self_attn.k_proj.lora_B" in n]
    assert key and float(key[0].abs().sum()) > 0  # the adapted layer's keys over the prompt train


def test_sft_on_decisions_makes_the_greedy_plan_the_target(three_layers: Path) -> None:
    policy = adapted(three_layers)
    env = ReplayEnv()
    case = hand_case()
    grammar = make_grammar(policy)
    compiled = grammar.compile(case_schema(case, env, decisions_only=True))
    vocab = int(policy.model.config.vocab_size)
    token_bytes = vocabulary_bytes(policy.tokenizer, vocab_size=vocab, eos_ids=policy.eos_ids)
    visits = [("security", "src/b.js"), ("security", "src/c.js")]
    text = strategy_of(visits, change_type="feature").to_json()
    target = replay(text, compiled, tokenizer=policy.tokenizer, token_bytes=token_bytes, vocab_size=vocab,
                    eos_ids=policy.eos_ids)  # fmt: skip
    assert target is not None and target.decisions
    assert policy.tokenizer.decode(list(target.tokens), skip_special_tokens=True) == text
    prompt = policy.prompt_ids(env.reset(case))

    def greedy() -> str:
        cache = DeepPromptCache(max_bytes=1 << 30, first_trainable=1, dtype=torch.float32)
        policy.prompt_cache = cache
        sampler = JumpForwardSampler(policy, grammar, [case_schema(case, env, decisions_only=True)])
        out = sampler.sample([prompt], n=1, temperature=0.0, max_new_tokens=200, seed=0)
        policy.prompt_cache = None
        return policy.decode(out[0][0])

    assert greedy() != text  # not the target before training (else the test shows nothing)
    from transformers import DynamicCache

    stored, hidden = read_frozen(policy, 1, prompt[:-1])
    cache = DynamicCache(ddp_cache_data=list(stored), config=policy.model.config)
    _, h = read_frozen(policy, 1, [prompt[-1], *target.tokens[:-1]], cache)
    read = ReadCase(case.case_id, prompt, hidden,
                    good=[ReadTarget(list(target.tokens), list(target.decisions), [list(a) for a in target.allowed], h)])  # fmt: skip
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=2e-2)
    for _ in range(60):
        optimizer.zero_grad()
        sft_loss(policy, 1, read).backward()
        optimizer.step()
    assert greedy() == text
