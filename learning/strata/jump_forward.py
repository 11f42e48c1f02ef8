"""Decode only the choices: grammar-forced text is appended in one step, not decoded token by token.

Under a merge request's decisions-only schema most of a plan is fixed by the grammar — keys, quotes,
the pinned empty fields, the closing brackets (issue 24 counted 900 of 1,012 tokens per plan). Token
by token, each of those costs a forward pass whose answer is known in advance. Here, after every
token the model chooses, xgrammar's jump-forward string (the longest text every continuation must
start with) is tokenized and accepted at once; the next forward pass reads those tokens together
with the chosen one, extending the key/value cache in a single call. So the forward passes are the
choices (plus the prompt), whatever the schema's boilerplate.

The forced text is tokenized on its own, which may split it differently than the model would have:
the text is the same and the grammar accepts it byte for byte, but the token sequence can differ
from a token-by-token decode's, so later choices can differ slightly (the model reads another
tokenization of the same text). A forced token the grammar refuses (a tokenization across the
boundary of what is forced) is not taken: the decoder falls back to deciding that token by a
forward pass, which is always correct.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import xgrammar as xgr

    from agent.llm.grammar import JsonSchemaGrammar
    from learning.strata.policy import StrategyPolicy


@dataclass(frozen=True)
class JumpForwardResult:
    tokens: list[int]  # the completion, up to and including its end-of-turn token
    forward_passes: int  # model calls after the prompt's: one per decided token
    decided: int  # tokens the model chose under the mask
    forced: int  # tokens appended from jump-forward strings without a forward pass of their own


def prefill(policy: StrategyPolicy, prompt: Sequence[int]) -> tuple[Any, Any]:
    """The prompt read once: its key/value cache and the next token's logits, for several completions."""
    import torch

    def ids(tokens: Sequence[int]) -> torch.Tensor:
        return torch.tensor([list(tokens)], dtype=torch.long, device=policy.device)

    with torch.no_grad():
        if policy.prompt_cache is not None:  # all but the last token read once, whatever the adapter
            out = policy.model(
                input_ids=ids(prompt[-1:]), cache=policy.prompt_cache.get(policy, prompt), use_cache=True
            )
        else:
            out = policy.model(input_ids=ids(prompt), use_cache=True, logits_to_keep=1)
    return out.past_key_values, out.logits[0, -1:].float()


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
    import copy

    import torch
    import xgrammar as xgr

    model: Any = policy.model
    vocab = int(model.config.vocab_size)
    matcher = xgr.GrammarMatcher(grammar)
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    was_training = model.training
    model.eval()
    tokens: list[int] = []
    decided = forced = passes = 0
    try:
        with torch.no_grad():
            cache, logits = copy.deepcopy(prefilled) if prefilled is not None else prefill(policy, prompt)
            while len(tokens) < max_new_tokens and not matcher.is_terminated():
                matcher.fill_next_token_bitmask(bitmask, 0)
                xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device), vocab_size=vocab)
                if temperature <= 0:
                    token = int(torch.argmax(logits[0]))
                else:
                    probs = torch.softmax(logits[0] / temperature, dim=-1).cpu()
                    token = int(torch.multinomial(probs, 1, generator=generator))
                matcher.accept_token(token)
                tokens.append(token)
                decided += 1
                if token in policy.eos_ids or matcher.is_terminated():
                    break
                feed = [token]
                jump = matcher.find_jump_forward_string()
                if jump:
                    room = max_new_tokens - len(tokens)
                    for piece in list(policy.tokenizer(jump, add_special_tokens=False)["input_ids"])[:room]:
                        if not matcher.accept_token(int(piece)):
                            break  # a split the grammar refuses: the model decides from here
                        feed.append(int(piece))
                        tokens.append(int(piece))
                        forced += 1
                if len(tokens) >= max_new_tokens:
                    break
                step = model(
                    input_ids=torch.tensor([feed], dtype=torch.long, device=policy.device),
                    cache=cache,
                    use_cache=True,
                )
                passes += 1
                cache = step.past_key_values
                logits = step.logits[0, -1:].float()
    finally:
        model.train(was_training)
    return JumpForwardResult(tokens=tokens, forward_passes=passes, decided=decided, forced=forced)


class JumpForwardSampler:
    """A `StrategySampler` that decodes only the choices, prompt i under `schemas[i]` (what
    `ConstrainedSampler` samples token by token). Each prompt is read once for its `n` completions,
    and a LoRA adapter is merged into the weights while sampling, as there."""

    def __init__(
        self, policy: StrategyPolicy, grammar: JsonSchemaGrammar, schemas: Sequence[Mapping[str, Any]]
    ) -> None:
        self.policy = policy
        self.grammar = grammar
        self.schemas = list(schemas)
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
        merged = policy.is_peft
        if merged:
            policy.model.merge_adapter()
        was_training = policy.model.training
        policy.model.eval()
        try:
            out: list[list[list[int]]] = []
            for i, (prompt, schema) in enumerate(zip(prompts, self.schemas, strict=True)):
                compiled = self.grammar.compile(schema)
                read = prefill(policy, prompt)
                rows = []
                for j in range(n):
                    result = decode_jump_forward(
                        policy, prompt, compiled, max_new_tokens=max_new_tokens, temperature=temperature,
                        seed=seed * 1_000_003 + i * 101 + j, prefilled=read,
                    )  # fmt: skip
                    self.forward_passes += result.forward_passes
                    self.decided += result.decided
                    self.forced += result.forced
                    rows.append(policy._trim(result.tokens))
                out.append(rows)
            return out
        finally:
            policy.model.train(was_training)
            if merged:
                policy.model.unmerge_adapter()
