"""Decode only the choices, for the policy being trained: a plan's grammar-forced text is appended in
one step, not decoded token by token (`agent.llm.jump_forward`, the loop serving decodes with too).

Under a merge request's decisions-only schema most of a plan is fixed by the grammar (issue 24
counted 900 of 1,012 tokens per plan), so the forward passes are the plan's choices (plus the
prompt). What this module adds is the policy: its prompt cache (`PromptCache`), read once whatever
the adapter, and its adapter merged while a sampler decodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent.llm.jump_forward import JumpForwardResult

if TYPE_CHECKING:
    import xgrammar as xgr

    from agent.llm.grammar import JsonSchemaGrammar
    from agent.llm.jump_forward import JumpForwardDecoder
    from learning.strata.policy import StrategyPolicy

__all__ = ["JumpForwardResult", "JumpForwardSampler", "decode_jump_forward", "prefill"]


def _decoder(policy: StrategyPolicy) -> JumpForwardDecoder:
    from agent.llm.jump_forward import JumpForwardDecoder

    return JumpForwardDecoder(policy.model, policy.tokenizer, eos_ids=policy.eos_ids, device=policy.device)


def prefill(policy: StrategyPolicy, prompt: Sequence[int]) -> tuple[Any, Any]:
    """The prompt read once: its key/value cache and the next token's logits, for several completions."""
    import torch

    if policy.prompt_cache is None:
        return _decoder(policy).prefill(prompt)
    with torch.no_grad():  # all but the last token read once, whatever the adapter
        out = policy.model(
            input_ids=torch.tensor([list(prompt[-1:])], dtype=torch.long, device=policy.device),
            cache=policy.prompt_cache.get(policy, prompt),
            use_cache=True,
        )
    return out.cache, out.logits[0, -1:].float()


def decode_jump_forward(
    policy: StrategyPolicy,
    prompt: Sequence[int],
    grammar: xgr.CompiledGrammar,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    prefilled: tuple[Any, Any] | None = None,
) -> JumpForwardResult:
    """One completion of `prompt` under `grammar`: greedy at temperature 0, else sampled (seeded).
    `prefilled` is `prefill(policy, prompt)`, copied here so it serves the next completion too."""
    model: Any = policy.model
    was_training = model.training
    model.eval()
    try:
        read = prefilled
        if read is None and policy.prompt_cache is not None:
            read = prefill(policy, prompt)  # else the decoder reads the whole prompt itself
        return _decoder(policy).decode(
            prompt, grammar, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, prefilled=read
        )
    finally:
        model.train(was_training)


class JumpForwardSampler:
    """A `StrategySampler` that decodes only the choices, prompt i under `schemas[i]` (what
    `ConstrainedSampler` samples token by token), under `StrategyPolicy.decoding` as there.

    Completions are decoded `batch_size` at a time (`JumpForwardDecoder.decode_batch`: a forward pass
    per step for the whole batch, the weights read once), the same choices as one at a time up to
    rounding; `batch_size=1` decodes them one by one, each prompt read once for its `n` completions."""

    def __init__(
        self,
        policy: StrategyPolicy,
        grammar: JsonSchemaGrammar,
        schemas: Sequence[Mapping[str, Any]],
        *,
        batch_size: int = 8,
    ) -> None:
        self.policy = policy
        self.grammar = grammar
        self.schemas = list(schemas)
        self.batch_size = batch_size
        self.forward_passes = 0  # model calls after the prompts', over every completion sampled
        self.decided = 0
        self.forced = 0

    def sample(
        self, prompts: Sequence[Sequence[int]], *, n: int, temperature: float, max_new_tokens: int, seed: int
    ) -> list[list[list[int]]]:
        from reviewers.kernel.errors import TrainingError

        if len(prompts) != len(self.schemas):
            raise TrainingError(f"{len(prompts)} prompts but {len(self.schemas)} schemas")
        if temperature <= 0 and n != 1:
            raise TrainingError("greedy decoding gives one completion per prompt; use n=1")
        policy = self.policy
        rows = [(i, j, seed * 1_000_003 + i * 101 + j) for i in range(len(prompts)) for j in range(n)]
        out: list[list[list[int]]] = [[[] for _ in range(n)] for _ in prompts]
        compiled: dict[int, Any] = {}
        with policy.decoding():
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start : start + self.batch_size]
                read = {i: prefill(policy, prompts[i]) for i in dict.fromkeys(i for i, _, _ in chunk)}
                for i in read:
                    if i not in compiled:
                        compiled[i] = self.grammar.compile(self.schemas[i])
                if len(chunk) == 1:
                    [(i, j, row_seed)] = chunk
                    results = [
                        decode_jump_forward(
                            policy,
                            prompts[i],
                            compiled[i],
                            max_new_tokens=max_new_tokens,
                            temperature=temperature,
                            seed=row_seed,
                            prefilled=read[i],
                        )  # fmt: skip
                    ]
                else:
                    results = _decoder(policy).decode_batch(
                        [read[i] for i, _, _ in chunk], [compiled[i] for i, _, _ in chunk],
                        max_new_tokens=max_new_tokens, seeds=[s for _, _, s in chunk], temperature=temperature,
                    )  # fmt: skip
                for (i, j, _), result in zip(chunk, results, strict=True):
                    self.forward_passes += result.forward_passes
                    self.decided += result.decided
                    self.forced += result.forced
                    out[i][j] = policy._trim(result.tokens)
        return out
