"""Structured output shared by every backend: find the JSON in an answer, validate it, retry once.

A model asked for JSON answers with JSON, with JSON inside a fenced block, with prose around it,
with a reasoning block before it, or with nothing usable. We take the first JSON object we can
find, validate it with the caller's pydantic model, and on failure ask once more, quoting the
validation error back to the model (it fixes a missing field far more often than a blind resample
does). A second failure is an `LLMOutputError` carrying the last error: the caller falls back to its
rule-based path. Model output is data: it is parsed, never evaluated.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from reviewers.kernel.contracts import ChatMessage
from reviewers.kernel.errors import LLMOutputError

M = TypeVar("M", bound=BaseModel)

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 2  # the first answer and one retry that carries the validation error
ERROR_TEXT_LIMIT = 1500  # the validation error quoted back to the model and kept on the error
ANSWER_ECHO_LIMIT = 4000  # the invalid answer replayed as the assistant turn of the retry
MAX_JSON_STARTS = 64  # candidate "{" positions tried; bounds the work on long brace-heavy garbage

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|jsonc)?[ \t]*\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


class InvalidOutput(Exception):
    """An answer that does not hold a valid instance; `reason` is fit to show the model."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


Generate = Callable[[list[ChatMessage], int], str]
"""A backend's single model call: (messages, attempt number starting at 1) → answer text."""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " …[truncated]"


def check_output_size(text: str, *, max_chars: int) -> str:
    """`text` unchanged, or `LLMOutputError` when it is longer than `max_chars`.

    An answer beyond the cap means the server ignored `max_tokens`; we refuse it before parsing
    rather than spend memory and time on it, and do not retry (the next answer would be the same).
    """
    if len(text) > max_chars:
        raise LLMOutputError(f"the model's answer has {len(text)} characters, over the cap of {max_chars}")
    return text


def extract_json(text: str) -> Any:
    """The first JSON object in a model's answer: the whole text, a fenced block, or an embedded span.

    Raises `InvalidOutput` when there is none.
    """
    stripped = _THINK.sub("", text).strip()
    if not stripped:
        raise InvalidOutput("the answer is empty; expected one JSON object")
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    for block in _FENCE.findall(stripped):
        try:
            return json.loads(block.strip())
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    start = stripped.find("{")
    tried = 0
    first_error: json.JSONDecodeError | None = None
    while start >= 0 and tried < MAX_JSON_STARTS:
        try:
            value, _end = decoder.raw_decode(stripped, start)
            return value
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
        tried += 1
        start = stripped.find("{", start + 1)
    if first_error is not None:
        raise InvalidOutput(f"the answer is not valid JSON: {first_error.msg} at position {first_error.pos}")
    raise InvalidOutput("the answer holds no JSON object")


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem, `field.path: message`, without echoing the (possibly long) input."""
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in item["loc"]) or "<root>"
        parts.append(f"{where}: {item['msg']}")
    return _clip("; ".join(parts), ERROR_TEXT_LIMIT)


def parse_structured(text: str, schema: type[M]) -> M:
    """Validate the JSON in `text` against `schema`, or raise `InvalidOutput` saying why."""
    value = extract_json(text)
    if not isinstance(value, dict):
        raise InvalidOutput(f"expected a JSON object, got a JSON {type(value).__name__}")
    try:
        return schema.model_validate(value)
    except ValidationError as exc:
        raise InvalidOutput(describe_validation_error(exc)) from None


def schema_instruction(schema: type[BaseModel]) -> str:
    """The instruction that tells a model which JSON to write (compact, so it costs few tokens)."""
    compact = json.dumps(schema.model_json_schema(), separators=(",", ":"), ensure_ascii=False)
    return f"Answer with only one JSON object, no prose, that matches this JSON schema:\n{compact}"


# String length bounds are dropped from the schema a server constrains decoding to: xgrammar (vLLM's
# default backend) compiles `maxLength: n` into n positions, linear in n — 7.7 s for one string of
# 120 characters on this 2-core machine, minutes for a 2,000-character finding body — and a compile
# runs per schema, so per merge request. The pydantic model still enforces the lengths, and a call's
# `max_tokens` bounds the answer as a whole. The in-process backend keeps them: it holds strings to
# their bounds outside the grammar (`agent.llm.grammar`), at no compile cost.
_DECODING_DROPPED_KEYWORDS = frozenset({"maxLength", "minLength"})
# Keywords whose value is a map from names to subschemas (not a subschema itself).
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"})
# Keywords whose value is data, never a subschema.
_SCHEMA_DATA = frozenset({"enum", "const", "default", "examples", "required", "title", "description"})


def without_length_bounds(node: Any) -> Any:
    """A copy of a JSON schema (or a part of one) without `maxLength`/`minLength`."""
    if isinstance(node, list):
        return [without_length_bounds(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DECODING_DROPPED_KEYWORDS:
            continue
        if key in _SCHEMA_DATA:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: without_length_bounds(sub) for name, sub in value.items()}
        else:
            out[key] = without_length_bounds(value)
    return out


def decoding_schema(
    schema: type[BaseModel], json_schema: Mapping[str, Any] | None = None, *, keep_length_bounds: bool = False
) -> dict[str, Any]:
    """The JSON schema decoding is constrained to: `json_schema` (a per-call narrowing of `schema`)
    or `schema`'s own, without string length bounds unless the backend holds strings to them at no
    compile cost (`keep_length_bounds`: the in-process backend, `agent.llm.grammar`)."""
    base = json_schema if json_schema is not None else schema.model_json_schema()
    result: dict[str, Any] = dict(base) if keep_length_bounds else without_length_bounds(base)
    return result


def with_schema_instruction(messages: Sequence[ChatMessage], schema: type[BaseModel]) -> list[ChatMessage]:
    """`messages` with the schema instruction appended to the last user message.

    Appending (rather than adding a system message in front) keeps the shared prompt prefix intact
    for the server's prefix cache, and avoids a second system turn that some chat templates reject.
    """
    out = list(messages)
    instruction = schema_instruction(schema)
    for i in range(len(out) - 1, -1, -1):
        if out[i]["role"] == "user":
            out[i] = {"role": "user", "content": f"{out[i]['content']}\n\n{instruction}"}
            return out
    out.append({"role": "user", "content": instruction})
    return out


def retry_conversation(messages: Sequence[ChatMessage], *, answer: str, error: str) -> list[ChatMessage]:
    """The conversation for the retry: the first answer as the assistant turn, then the error."""
    out = list(messages)
    if answer.strip():
        out.append({"role": "assistant", "content": _clip(answer, ANSWER_ECHO_LIMIT)})
    out.append(
        {
            "role": "user",
            "content": (
                f"Your previous answer was rejected: {error}\n"
                "Answer again with only one corrected JSON object that matches the schema."
            ),
        }
    )
    return out


def complete_structured(
    generate: Generate, messages: Sequence[ChatMessage], schema: type[M], *, model_name: str = ""
) -> M:
    """Ask, validate, retry once with the validation error, then raise `LLMOutputError`."""
    conversation = list(messages)
    error = ""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        answer = generate(conversation, attempt)
        try:
            return parse_structured(answer, schema)
        except InvalidOutput as exc:
            error = exc.reason
            # The reason names fields and positions only; the answer itself stays out of the log.
            log.warning(
                "model %s gave invalid %s (attempt %d/%d): %s",
                model_name,
                schema.__name__,
                attempt,
                MAX_ATTEMPTS,
                error,
            )
            conversation = retry_conversation(messages, answer=answer, error=error)
    raise LLMOutputError(f"the model's {schema.__name__} failed validation twice: {error}")
