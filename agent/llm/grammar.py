"""Grammar-constrained decoding in process: a JSON schema becomes a mask on the next token's logits.

xgrammar is the engine vLLM uses for guided decoding, so a model decoded here under a schema can
write exactly what it would write under the same schema on vLLM. A schema compiles (per tokenizer)
into a grammar; for each generated sequence a matcher tracks where the output is in the grammar
and fills a bitmask of the tokens that may come next; every other token's logit becomes -inf. So
the answer is valid JSON of that schema unless `max_new_tokens` cuts it short.

JSON is compiled compact (`,` and `:`, no optional whitespace): otherwise a small model spends its
budget on spaces and newlines the grammar allows. Compiled grammars are cached by schema, so the
per-step tool-call schemas of a reviewer, repeated step after step, compile once.

Bounded strings (`maxLength` on an object's property) are held to their bound here, outside the
grammar: xgrammar 0.2.8 compiles `maxLength: n` into n positions, each with a token mask over the
whole vocabulary (4.7 s for the judgment's 160-character reason, 17 s for a reviewer's tool call
on this 2-core machine, per compile), and a grammar that counts in fewer positions (blocks, binary
decomposition) compiles fast but leaves most tokens undecided, costing ~100 ms per generated token.
So the grammar is compiled without length bounds (as fast as an unbounded string), and a small JSON
cursor follows each sequence's bytes: inside a bounded string it allows only tokens whose characters
fit in what is left (a backslash escape is refused there, so a character is a character), and at the
bound only the closing quote (or the rest of a character a token split). Characters are counted as
UTF-8 lead bytes, as JSON counts them. A property bounded differently in two places of one schema
gets the smaller bound.

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
from dataclasses import dataclass, field
from typing import Any

import torch
import xgrammar as xgr
from transformers import LogitsProcessor

from agent.llm.structured import without_length_bounds
from reviewers.kernel.errors import LLMSchemaError

COMPACT_SEPARATORS = (",", ":")
_XGRAMMAR_LOG_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")  # "[16:01:03] /project/cpp/x.cc:4944: "
GRAMMAR_CACHE_SIZE = 64  # a review compiles one strategy schema and a few tool-call schemas per reviewer
MAX_COMPILE_THREADS = 8  # xgrammar's default; fewer on a smaller machine


def _canonical(schema: Mapping[str, Any]) -> str:
    # Not key-sorted: xgrammar emits an object's properties in the schema's order, and that order is
    # the plan a model writes in (reasons before decisions); sorting would reorder every answer.
    return json.dumps(schema, separators=COMPACT_SEPARATORS, ensure_ascii=False)


def string_bounds(schema: Any) -> dict[str, int]:
    """The `maxLength` of every string property in `schema`, by property name (the smaller one where
    a name is bounded differently in two places)."""
    bounds: dict[str, int] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, Mapping):
            return
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            for name, sub in properties.items():
                limit = sub.get("maxLength") if isinstance(sub, Mapping) else None
                if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
                    bounds[name] = min(limit, bounds.get(name, limit))
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples", "required"):
                walk(value)

    walk(schema)
    return bounds


_QUOTE, _BACKSLASH = 0x22, 0x5C
_PLAIN, _CLOSES, _ESCAPES = 0, 1, 2  # a token's first special byte inside a string: none, `"`, `\`


@dataclass
class JsonCursor:
    """Where one sequence's compact JSON stands, byte by byte: inside which string, and for a bounded
    string value, how many bytes it holds. It trusts the grammar for everything else."""

    bounds: Mapping[str, int]
    containers: list[int] = field(default_factory=list)  # `{` or `[` bytes, innermost last
    in_string: bool = False
    escaped: bool = False
    is_key: bool = False
    expect_key: bool = False
    key: bytearray = field(default_factory=bytearray)
    last_key: str | None = None
    limit: int | None = None  # the bound of the string value being written, if any
    written: int = 0  # its characters so far

    def feed(self, data: bytes) -> None:
        for byte in data:
            if self.in_string:
                self._in_string(byte)
            elif byte in b"{[":
                self.containers.append(byte)
                self.expect_key = byte == ord("{")
            elif byte in b"}]":
                if self.containers:
                    self.containers.pop()
            elif byte == ord(","):
                self.expect_key = bool(self.containers) and self.containers[-1] == ord("{")
            elif byte == ord(":"):
                self.expect_key = False
            elif byte == _QUOTE:
                self.in_string, self.is_key, self.written = True, self.expect_key, 0
                self.key.clear()
                in_object = bool(self.containers) and self.containers[-1] == ord("{")
                named = self.last_key if in_object and not self.is_key else None
                self.limit = self.bounds.get(named) if named is not None else None

    def _in_string(self, byte: int) -> None:
        if self.escaped:
            self.escaped = False
        elif byte == _BACKSLASH:
            self.escaped = True
        elif byte == _QUOTE:
            self.in_string, self.limit = False, None
            if self.is_key:
                self.last_key = self.key.decode("utf-8", errors="replace")
                self.expect_key = False
            return
        if self.is_key:
            self.key.append(byte)
        self.written += not _continues(byte)

    @property
    def chars_left(self) -> int | None:
        """Characters the bounded string being written may still take; None outside one."""
        return None if self.limit is None or not self.in_string else max(0, self.limit - self.written)


def _continues(byte: int) -> bool:
    """A UTF-8 continuation byte: part of the character before it, not a character of its own."""
    return 0x80 <= byte < 0xC0


@dataclass(frozen=True)
class TokenBytes:
    """Per token: its bytes, the characters before its first `"` or `\\`, and which one that is."""

    vocab: list[bytes]
    free: torch.Tensor  # int64, characters before the first special byte (all of them if none)
    first_special: torch.Tensor  # int8, _PLAIN / _CLOSES / _ESCAPES

    @classmethod
    def of(cls, decoded_vocab: Sequence[bytes], *, vocab_size: int, stop_token_ids: Sequence[int]) -> TokenBytes:
        vocab = [bytes(t) for t in decoded_vocab][:vocab_size]
        vocab += [b""] * (vocab_size - len(vocab))
        for token_id in stop_token_ids:
            if 0 <= token_id < vocab_size:
                vocab[token_id] = b""  # never text; the grammar decides where the sequence may end
        free, special = [], []
        for token in vocab:
            quote, slash = token.find(b'"'), token.find(b"\\")
            firsts = [i for i in (quote, slash) if i >= 0]
            at = min(firsts) if firsts else len(token)
            free.append(sum(not _continues(b) for b in token[:at]))
            special.append(_PLAIN if not firsts else _CLOSES if at == quote else _ESCAPES)
        return cls(vocab, torch.tensor(free, dtype=torch.int64), torch.tensor(special, dtype=torch.int8))

    def fitting(self, chars_left: int) -> torch.Tensor:
        """The tokens a bounded string with `chars_left` characters to go may take next (bool, per token)."""
        result: torch.Tensor = (self.first_special != _ESCAPES) & (self.free <= chars_left)
        return result

    def fits(self, token: int, chars_left: int) -> bool:
        """Whether `token` is one of `fitting(chars_left)`."""
        return int(self.first_special[token]) != _ESCAPES and int(self.free[token]) <= chars_left


@dataclass
class StringBoundsGuard:
    """One sequence's bounded strings held to their `maxLength`, which the compiled grammar leaves out:
    it follows the sequence's bytes and, inside a bounded string, allows only the tokens that fit."""

    tokens: TokenBytes
    cursor: JsonCursor

    def accept(self, token: int) -> None:
        self.cursor.feed(self.tokens.vocab[token])

    def allows(self, token: int) -> bool:
        left = self.cursor.chars_left
        return left is None or self.tokens.fits(token, left)

    def mask(self, scores: torch.Tensor, row: int = 0) -> None:
        """Sets `scores[row]` to -inf on every token the string being written has no room for."""
        left = self.cursor.chars_left
        if left is None:
            return
        fits = self.tokens.fitting(left).to(scores.device)
        width = min(scores.shape[1], fits.shape[0])
        scores[row, :width] = scores[row, :width].masked_fill(~fits[:width], float("-inf"))


class SchemaLogitsProcessor(LogitsProcessor):
    """Masks each sequence's next-token logits to what its schema allows (one `generate` call only).

    transformers calls it once per generated token: first on the prompt (nothing accepted yet), then
    with the token just chosen appended. Sequences whose grammar has ended are left unmasked;
    `generate` pads them anyway.
    """

    def __init__(
        self,
        compiled: xgr.CompiledGrammar,
        *,
        batch_size: int,
        vocab_size: int,
        tokens: TokenBytes | None = None,
        bounds: Mapping[str, int] | None = None,
    ) -> None:
        self._matchers = [xgr.GrammarMatcher(compiled) for _ in range(batch_size)]
        self._bitmask = xgr.allocate_token_bitmask(batch_size, vocab_size)
        self._vocab_size = vocab_size
        self._started = False
        self._guards = (
            [StringBoundsGuard(tokens, JsonCursor(bounds)) for _ in range(batch_size)]
            if tokens is not None and bounds
            else []
        )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[0] != len(self._matchers):
            raise LLMSchemaError(f"{input_ids.shape[0]} sequences for {len(self._matchers)} grammar matchers")
        if self._started:
            for row, matcher in enumerate(self._matchers):
                if matcher.is_terminated():
                    continue
                token = int(input_ids[row, -1])
                if not matcher.accept_token(token):
                    # Only reachable if something outside this processor changed the chosen token.
                    raise LLMSchemaError("the model produced a token the schema does not allow")
                if self._guards:
                    self._guards[row].accept(token)
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
        if self._guards:
            for row in active:
                self._guards[row].mask(scores, row)
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
        self._tokens = TokenBytes.of(self._info.decoded_vocab, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
        threads = max(1, min(MAX_COMPILE_THREADS, os.cpu_count() or 1))
        self._compiler = xgr.GrammarCompiler(self._info, max_threads=threads, cache_enabled=False)
        self._cache: OrderedDict[str, xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def compile(self, schema: Mapping[str, Any]) -> xgr.CompiledGrammar:
        """The compiled grammar of `schema` without its string length bounds (cached; the processor
        holds strings to them), or `LLMSchemaError` saying why there is none."""
        key = _canonical(without_length_bounds(schema))
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
        return SchemaLogitsProcessor(
            self.compile(schema),
            batch_size=batch_size,
            vocab_size=self._vocab_size,
            tokens=self._tokens,
            bounds=string_bounds(schema),
        )

    def bounds_guard(self, schema: Mapping[str, Any]) -> StringBoundsGuard | None:
        """A fresh guard holding one sequence's strings to `schema`'s `maxLength` bounds (which
        `compile` leaves out); None when the schema bounds no string."""
        bounds = string_bounds(schema)
        return StringBoundsGuard(self._tokens, JsonCursor(bounds)) if bounds else None

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
