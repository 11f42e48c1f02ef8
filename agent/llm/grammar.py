"""Grammar-constrained decoding in process: a JSON schema becomes a mask on the next token's logits.

xgrammar is the engine vLLM uses for guided decoding, so a model decoded here under a schema can
write exactly what it would write under the same schema on vLLM. A schema compiles (per tokenizer)
into a grammar; for each generated sequence a matcher tracks where the output is in the grammar
and fills a bitmask of the tokens that may come next; every other token's logit becomes -inf. So
the answer is valid JSON of that schema unless `max_new_tokens` cuts it short.

JSON is compiled compact (`,` and `:`, no optional whitespace): otherwise a small model spends its
budget on spaces and newlines the grammar allows. Compiled grammars are cached by schema, so the
per-step tool-call schemas of a reviewer, repeated step after step, compile once.

Bad schemas fail before any token is generated, as `LLMSchemaError`: one xgrammar cannot compile
(an empty enum, minItems above maxItems, an unknown type), or one that admits no answer at all (its
first mask allows nothing but the end of the sequence).

Import this module only where torch, transformers and xgrammar are installed (the `train` extra).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import xgrammar as xgr
from transformers import LogitsProcessor

from reviewers.kernel.errors import LLMSchemaError

COMPACT_SEPARATORS = (",", ":")
_XGRAMMAR_LOG_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")  # "[16:01:03] /project/cpp/x.cc:4944: "
GRAMMAR_CACHE_SIZE = 64  # a review compiles one strategy schema and a few tool-call schemas per reviewer
MAX_COMPILE_THREADS = 8  # xgrammar's default; fewer on a smaller machine


def _canonical(schema: Mapping[str, Any]) -> str:
    # Not key-sorted: xgrammar emits an object's properties in the schema's order, and that order is
    # the plan a model writes in (reasons before decisions); sorting would reorder every answer.
    return json.dumps(schema, separators=COMPACT_SEPARATORS, ensure_ascii=False)


class SchemaLogitsProcessor(LogitsProcessor):
    """Masks each sequence's next-token logits to what its schema allows (one `generate` call only).

    transformers calls it once per generated token: first on the prompt (nothing accepted yet), then
    with the token just chosen appended. Sequences whose grammar has ended are left unmasked;
    `generate` pads them anyway.
    """

    def __init__(self, compiled: xgr.CompiledGrammar, *, batch_size: int, vocab_size: int) -> None:
        self._matchers = [xgr.GrammarMatcher(compiled) for _ in range(batch_size)]
        self._bitmask = xgr.allocate_token_bitmask(batch_size, vocab_size)
        self._vocab_size = vocab_size
        self._started = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[0] != len(self._matchers):
            raise LLMSchemaError(f"{input_ids.shape[0]} sequences for {len(self._matchers)} grammar matchers")
        if self._started:
            for row, matcher in enumerate(self._matchers):
                if not matcher.is_terminated() and not matcher.accept_token(int(input_ids[row, -1])):
                    # Only reachable if something outside this processor changed the chosen token.
                    raise LLMSchemaError("the model produced a token the schema does not allow")
        self._started = True
        active = [row for row, matcher in enumerate(self._matchers) if not matcher.is_terminated()]
        for row in active:
            self._matchers[row].fill_next_token_bitmask(self._bitmask, row)
        if active:
            # xgrammar masks on the CPU or CUDA; another device's logits take a round trip.
            target = scores if scores.device.type in ("cpu", "cuda") else scores.to("cpu")
            xgr.apply_token_bitmask_inplace(
                target, self._bitmask.to(target.device), vocab_size=self._vocab_size, indices=active
            )
            if target is not scores:
                scores.copy_(target)
        return scores


class JsonSchemaGrammar:
    """Compiles JSON schemas for one tokenizer and hands out logits processors for `generate`."""

    def __init__(self, tokenizer: Any, *, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        # `vocab_size` is the model's (its logits' width), which can exceed the tokenizer's.
        self._info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids)
        )
        self._vocab_size = vocab_size
        self._stop_token_ids = frozenset(stop_token_ids)
        threads = max(1, min(MAX_COMPILE_THREADS, os.cpu_count() or 1))
        self._compiler = xgr.GrammarCompiler(self._info, max_threads=threads, cache_enabled=False)
        self._cache: OrderedDict[str, xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def compile(self, schema: Mapping[str, Any]) -> xgr.CompiledGrammar:
        """The compiled grammar of `schema` (cached), or `LLMSchemaError` saying why there is none."""
        key = _canonical(schema)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        try:
            compiled = self._compiler.compile_json_schema(
                key, any_whitespace=False, separators=COMPACT_SEPARATORS, strict_mode=True
            )
        except (RuntimeError, ValueError) as exc:  # xgrammar reports schema errors as RuntimeError
            lines = str(exc).strip().splitlines()
            reason = _XGRAMMAR_LOG_PREFIX.sub("", lines[-1]) if lines else type(exc).__name__
            raise LLMSchemaError(f"the JSON schema cannot constrain decoding: {_clip(reason)}") from None
        self._refuse_empty(compiled, schema)
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > GRAMMAR_CACHE_SIZE:
                self._cache.popitem(last=False)
        return compiled

    def logits_processor(self, schema: Mapping[str, Any], *, batch_size: int) -> SchemaLogitsProcessor:
        """A fresh processor for one `generate` call of `batch_size` sequences under `schema`."""
        return SchemaLogitsProcessor(self.compile(schema), batch_size=batch_size, vocab_size=self._vocab_size)

    def _refuse_empty(self, compiled: xgr.CompiledGrammar, schema: Mapping[str, Any]) -> None:
        """`LLMSchemaError` when the grammar's first step allows only the end of the sequence."""
        matcher = xgr.GrammarMatcher(compiled)
        bitmask = xgr.allocate_token_bitmask(1, self._vocab_size)
        matcher.fill_next_token_bitmask(bitmask)
        allowed = torch.zeros(1, self._vocab_size)
        xgr.apply_token_bitmask_inplace(allowed, bitmask, vocab_size=self._vocab_size)
        first = {int(t) for t in torch.isfinite(allowed[0]).nonzero().flatten().tolist()}
        if not first - self._stop_token_ids:
            title = schema.get("title") or "the schema"
            raise LLMSchemaError(f"{title} admits no answer: no JSON value satisfies it")


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
