"""Decode only the choices: grammar-forced text is appended in one step, not decoded token by token.

Under a JSON schema much of an answer is fixed by the grammar — keys, quotes, pinned fields, closing
brackets (issue 24 counted 900 of 1,012 tokens of a merge request's decisions-only plan). Token by
token, each of those costs a forward pass whose answer is known in advance. Here, after every token
the model chooses, xgrammar's jump-forward string (the longest text every continuation must start
with) is tokenized and accepted at once; the next forward pass reads those tokens together with the
chosen one, extending the key/value cache in a single call. So the forward passes are the choices
(plus the prompt), whatever the schema's boilerplate. Serving (`agent.llm.transformers_local`) and
the learning code (`learning.strata.jump_forward`) decode structured answers with this one loop.

The forced text is tokenized on its own, which may split it differently than the model would have:
the text is the same and the grammar accepts it byte for byte, but the token sequence can differ
from a token-by-token decode's, so later choices can differ slightly (the model reads another
tokenization of the same text). A forced token the grammar refuses (a tokenization across the
boundary of what is forced), or one a bounded string has no room for, is not taken: the decoder
falls back to deciding that token by a forward pass, which is always correct.

torch and xgrammar (the `train` extra) are imported when a decoder runs, not with this module, so the
learning code can name its results without loading them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    import xgrammar as xgr

    from agent.llm.grammar import StringBoundsGuard

# A prompt read once: its key/value cache and the logits of the token after it (a 1 x vocab row).
Prefilled = tuple[Any, "torch.Tensor"]


@dataclass(frozen=True)
class JumpForwardResult:
    tokens: list[int]  # the completion, up to and including its end-of-turn token
    forward_passes: int  # model calls after the prompt's: one per decided token
    decided: int  # tokens the model chose under the mask
    forced: int  # tokens appended from jump-forward strings without a forward pass of their own


class JumpForwardDecoder:
    """Completions of a causal LM under compiled grammars, a forward pass per choice.

    The caller keeps the model in eval mode while decoding; gradients are never taken here.
    """

    def __init__(self, model: Any, tokenizer: Any, *, eos_ids: Sequence[int], device: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(int(t) for t in eos_ids)
        self.device = device
        self.vocab_size = int(model.config.vocab_size)  # the logits' width, which can exceed the tokenizer's

    def prefill(self, prompt: Sequence[int]) -> Prefilled:
        """The whole prompt read once, for one or several completions (`decode` copies it)."""
        import torch

        with torch.no_grad():
            out = self.model(input_ids=self._ids(prompt), use_cache=True, logits_to_keep=1)
        return out.cache, out.logits[0, -1:].float()

    def decode(
        self,
        prompt: Sequence[int],
        grammar: xgr.CompiledGrammar,
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        seed: int = 0,
        prefilled: Prefilled | None = None,
        bounds: StringBoundsGuard | None = None,
    ) -> JumpForwardResult:
        """One completion of `prompt` under `grammar`: greedy at temperature 0, else sampled (seeded).

        `prefilled` is `prefill(prompt)` (or the caller's own reading of it), copied here so it
        serves the next completion too. `bounds` holds strings to the `maxLength` the compiled
        grammar leaves out (`JsonSchemaGrammar.bounds_guard`, fresh per completion)."""
        import torch
        import xgrammar as xgr

        matcher = xgr.GrammarMatcher(grammar)
        bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)
        generator = torch.Generator(device="cpu").manual_seed(seed)
        tokens: list[int] = []
        decided = forced = passes = 0
        with torch.no_grad():
            cache, logits = copy.deepcopy(prefilled) if prefilled is not None else self.prefill(prompt)
            while len(tokens) < max_new_tokens and not matcher.is_terminated():
                matcher.fill_next_token_bitmask(bitmask, 0)
                xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device), vocab_size=self.vocab_size)
                if bounds is not None:
                    bounds.mask(logits)
                token = _choose(logits, temperature=temperature, generator=generator)
                matcher.accept_token(token)
                if bounds is not None:
                    bounds.accept(token)
                tokens.append(token)
                decided += 1
                if token in self.eos_ids or matcher.is_terminated():
                    break
                feed = [token]
                jump = matcher.find_jump_forward_string()
                if jump:
                    room = max_new_tokens - len(tokens)
                    for piece in self._forced_tokens(jump)[:room]:
                        if bounds is not None and not bounds.allows(piece):
                            break  # no room left in a bounded string: the model decides from here
                        if not matcher.accept_token(piece):
                            break  # a split the grammar refuses: the model decides from here
                        if bounds is not None:
                            bounds.accept(piece)
                        feed.append(piece)
                        tokens.append(piece)
                        forced += 1
                if len(tokens) >= max_new_tokens:
                    break
                step = self.model(input_ids=self._ids(feed), cache=cache, use_cache=True)
                passes += 1
                cache = step.cache
                logits = step.logits[0, -1:].float()
        return JumpForwardResult(tokens=tokens, forward_passes=passes, decided=decided, forced=forced)

    def _forced_tokens(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def _ids(self, tokens: Sequence[int]) -> torch.Tensor:
        import torch

        return torch.tensor([list(tokens)], dtype=torch.long, device=self.device)


def _choose(logits: torch.Tensor, *, temperature: float, generator: torch.Generator) -> int:
    """The next token from masked logits: the most likely at temperature 0, else a seeded draw."""
    import torch

    if temperature <= 0:
        return int(torch.argmax(logits[0]))
    probs = torch.softmax(logits[0] / temperature, dim=-1).cpu()
    return int(torch.multinomial(probs, 1, generator=generator))
