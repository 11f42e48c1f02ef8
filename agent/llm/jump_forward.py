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

import contextlib
import copy
import functools
import os
from collections.abc import Callable, Iterator, Sequence
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
    stopped: bool = False  # `should_stop` said so between two steps: the tokens are unfinished


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
        should_stop: Callable[[], bool] | None = None,
    ) -> JumpForwardResult:
        """One completion of `prompt` under `grammar`: greedy at temperature 0, else sampled (seeded).

        `prefilled` is `prefill(prompt)` (or the caller's own reading of it), copied here so it
        serves the next completion too. `bounds` holds strings to the `maxLength` the compiled
        grammar leaves out (`JsonSchemaGrammar.bounds_guard`, fresh per completion). `should_stop`
        is asked before every step (each choice and its forward pass; the serving backend: whether
        the model's deadline passed, `agent.llm.deadline`): when it says so the decode ends there,
        unfinished, with `stopped` set — a step at most past it, however long the answer would be."""
        import torch
        import xgrammar as xgr

        matcher = xgr.GrammarMatcher(grammar)
        bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)
        generator = torch.Generator(device="cpu").manual_seed(seed)
        tokens: list[int] = []
        decided = forced = passes = 0
        stopped = False
        with torch.no_grad():
            cache, logits = copy.deepcopy(prefilled) if prefilled is not None else self.prefill(prompt)
            while len(tokens) < max_new_tokens and not matcher.is_terminated():
                if should_stop is not None and should_stop():
                    stopped = True
                    break
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
        return JumpForwardResult(tokens=tokens, forward_passes=passes, decided=decided, forced=forced, stopped=stopped)

    def decode_batch(
        self,
        rows: Sequence[Prefilled],
        grammars: Sequence[xgr.CompiledGrammar],
        *,
        max_new_tokens: int,
        seeds: Sequence[int],
        temperature: float = 0.0,
    ) -> list[JumpForwardResult]:
        """`decode` of several prompts at once, row i from `rows[i]` (`prefill` of its prompt, which
        several rows may share) under `grammars[i]` with `seeds[i]`: one forward pass per step for every
        row still deciding, so the weights are read once for all of them. On a CPU a pass over a few
        tokens is bound by reading the weights (~0.5 GB for a 135M model in float32), so eight rows cost
        about twice one. Each row's choices and forced text are its own, as in `decode`; its prompt is
        left-padded to the longest and its steps' feeds to the longest feed, padding masked out, each
        token at its own position. The numbers differ from `decode`'s in rounding only (another
        attention kernel over padded rows)."""
        import torch
        import xgrammar as xgr
        from transformers import DynamicCache

        count = len(rows)
        matchers = [xgr.GrammarMatcher(g) for g in grammars]
        generators = [torch.Generator(device="cpu").manual_seed(s) for s in seeds]
        bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)
        lengths = [int(cache.get_seq_length()) for cache, _ in rows]
        width = max(lengths)
        room = max_new_tokens + 1
        layers = []
        for i in range(len(rows[0][0].layers)):
            keys = [cache.layers[i].keys for cache, _ in rows]
            values = [cache.layers[i].values for cache, _ in rows]
            layers.append(_growing_layer().left_padded(keys, values, width=width, room=room * 2))
        cache = DynamicCache(config=self.model.config)
        cache.layers = layers
        seen = torch.zeros((count, width + room * 2), dtype=torch.long, device=self.device)  # 1: a real token
        for row, length in enumerate(lengths):
            seen[row, width - length : width] = 1
        filled = width
        logits = torch.cat([row_logits for _, row_logits in rows]).float()
        tokens: list[list[int]] = [[] for _ in rows]
        decided, forced, passes = [0] * count, [0] * count, [0] * count
        done = [False] * count
        with torch.no_grad():
            while True:
                feeds: list[list[int]] = [[] for _ in rows]
                for row in range(count):
                    if done[row]:
                        continue
                    matcher, out = matchers[row], tokens[row]
                    if len(out) >= max_new_tokens or matcher.is_terminated():
                        done[row] = True
                        continue
                    row_logits = logits[row : row + 1]
                    matcher.fill_next_token_bitmask(bitmask, 0)
                    xgr.apply_token_bitmask_inplace(row_logits, bitmask.to(logits.device), vocab_size=self.vocab_size)
                    token = _choose(row_logits, temperature=temperature, generator=generators[row])
                    matcher.accept_token(token)
                    out.append(token)
                    decided[row] += 1
                    if token in self.eos_ids or matcher.is_terminated():
                        done[row] = True
                        continue
                    feed = [token]
                    jump = matcher.find_jump_forward_string()
                    if jump:
                        for piece in self._forced_tokens(jump)[: max_new_tokens - len(out)]:
                            if not matcher.accept_token(piece):
                                break  # a split the grammar refuses: the model decides from here
                            feed.append(piece)
                            out.append(piece)
                            forced[row] += 1
                    if len(out) >= max_new_tokens:
                        done[row] = True
                        continue
                    feeds[row] = feed
                live = [row for row in range(count) if feeds[row]]
                if not live:
                    break
                step = max(len(feeds[row]) for row in live)
                if filled + step > seen.shape[1]:  # room for another max_new_tokens of padded steps
                    for layer in layers:
                        layer.grow(room)
                    seen = torch.nn.functional.pad(seen, (0, room))
                ids = torch.full((count, step), self._pad_id(), dtype=torch.long, device=self.device)
                positions = torch.zeros((count, step), dtype=torch.long, device=self.device)
                for row in range(count):
                    feed = feeds[row]
                    start = lengths[row] + len(tokens[row]) - len(feed)  # this feed's first position
                    if feed:  # right-aligned: every row's last token is the step's last column
                        ids[row, step - len(feed) :] = torch.tensor(feed, dtype=torch.long)
                        seen[row, filled + step - len(feed) : filled + step] = 1
                    positions[row] = torch.arange(start + len(feed) - step, start + len(feed)).clamp(min=0)
                filled += step
                with _sdpa_grouped_query_attention():
                    out_step = self.model(
                        input_ids=ids, attention_mask=seen[:, :filled], position_ids=positions, cache=cache,
                        use_cache=True, logits_to_keep=1,
                    )  # fmt: skip
                for row in live:
                    passes[row] += 1
                logits = out_step.logits[:, -1, :].float()
        return [
            JumpForwardResult(tokens=tokens[r], forward_passes=passes[r], decided=decided[r], forced=forced[r])
            for r in range(count)
        ]

    def _pad_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        return int(pad) if pad is not None else min(self.eos_ids)

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


# transformers 5.24 (integrations/sdpa_attention.py, `use_gqa_in_sdpa`) asks torch's SDPA for grouped-query
# attention on the CPU only without a mask; with the padded batch's mask it repeats every key and value
# head three times first (SmolLM2: 9 query heads, 3 key/value heads), copying the whole batch's cache
# each layer each step: two thirds of a batched step's time. torch 2.13's CPU SDPA takes a mask with
# `enable_gqa`, and this switch of transformers' asks for it. Drop once transformers does so by itself.
SDPA_FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"


@contextlib.contextmanager
def _sdpa_grouped_query_attention() -> Iterator[None]:
    before = os.environ.get(SDPA_FORCE_GQA)
    os.environ[SDPA_FORCE_GQA] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[SDPA_FORCE_GQA]
        else:
            os.environ[SDPA_FORCE_GQA] = before


@functools.cache
def _growing_layer() -> Any:
    """A `DynamicLayer` whose keys and values live in a buffer with room to grow: `update` writes the
    step's keys in place and hands back views, where `DynamicLayer` copies the whole cache (a batch of
    prompts, hundreds of MB) into a new tensor every step. Built on first use: transformers loads late."""
    import torch
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):  # type: ignore[misc,no-untyped-call]
        buffer_k: Any
        buffer_v: Any
        filled: int
        dtype: Any

        @classmethod
        def left_padded(cls, keys: list[Any], values: list[Any], *, width: int, room: int) -> Any:
            layer = cls()
            first = keys[0]
            shape = (len(keys), first.shape[1], width + room, first.shape[3])
            layer.buffer_k = first.new_zeros(shape)
            layer.buffer_v = values[0].new_zeros(shape)
            for row, (k, v) in enumerate(zip(keys, values, strict=True)):
                layer.buffer_k[row, :, width - k.shape[2] : width] = k[0]
                layer.buffer_v[row, :, width - v.shape[2] : width] = v[0]
            layer.filled = width
            layer.device, layer.dtype, layer.is_initialized = first.device, first.dtype, True
            layer._views()
            return layer

        def _views(self) -> None:
            self.keys = self.buffer_k[:, :, : self.filled]
            self.values = self.buffer_v[:, :, : self.filled]

        def grow(self, room: int) -> None:
            self.buffer_k = torch.nn.functional.pad(self.buffer_k, (0, 0, 0, room))
            self.buffer_v = torch.nn.functional.pad(self.buffer_v, (0, 0, 0, room))
            self._views()

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            end = self.filled + key_states.shape[-2]
            self.buffer_k[:, :, self.filled : end] = key_states
            self.buffer_v[:, :, self.filled : end] = value_states
            self.filled = end
            self._views()
            return self.keys, self.values

    return GrowingLayer
