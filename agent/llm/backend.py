"""What every backend does above its one model call: the port's methods, the span, the output cap.

A backend (HTTP, in-process transformers) differs only in how one call reaches the model and how it
reads the answer; that is `_chat`, and for sampling `_sample`. The rest is here once, so the two
cannot drift apart: the schema instruction, the validate-and-retry loop of `complete_structured`,
the clamping of `max_tokens` to the configured cap, fitting the conversation into the model's
context (`agent.llm.context_window`: trimmed before sending when the context length is known, and
trimmed harder and retried once when the server answers that it is too long), and the GenAI span
every call runs in.

Both backends constrain decoding to the same schema (`decoding_schema`): the caller's per-call
narrowing (`json_schema`, e.g. the changed files as an enum) or the pydantic model's own. The
schema instruction in the prompt stays the pydantic model's: it is short, and a narrowing such as
the strategy's 65-way plan would cost the prompt thousands of tokens for nothing decoding does not
already enforce.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry.trace import Tracer
from pydantic import BaseModel

from agent.llm.context_window import TokenEstimate, fit_messages
from agent.llm.port import ProviderName
from agent.llm.spans import ChatCall, chat_span
from agent.llm.structured import (
    InvalidOutput,
    complete_structured,
    decoding_schema,
    parse_structured,
    with_schema_instruction,
    without_length_bounds,
)
from reviewers.kernel.contracts import ChatMessage
from reviewers.kernel.errors import LLMContextLengthError, LLMError, LLMOutputError

M = TypeVar("M", bound=BaseModel)

CHARS_PER_TOKEN_CAP = 16  # no tokenizer has tokens longer than this on average; beyond it, refuse


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """What one model call asks for, beyond the messages (the span records all but `schema`)."""

    purpose: str
    attempt: int
    max_tokens: int  # already clamped to the backend's cap
    temperature: float
    n: int = 1
    # The JSON a structured call asks for (`schema` names it), and the JSON schema decoding is
    # constrained to (`decoding_schema`); the answer is validated by `complete_structured` either way.
    schema: type[BaseModel] | None = None
    json_schema: dict[str, Any] | None = None


class ChatBackend(ABC):
    """`SamplingLLM` on top of a backend's single chat call."""

    # Whether this backend holds strings to their `maxLength` cheaply (see `decoding_schema`).
    keeps_length_bounds = False

    def __init__(
        self,
        *,
        provider: ProviderName,
        model_name: str,
        max_output_tokens: int,
        max_output_chars: int | None,
        temperature: float,
        seed: int | None,
        schema_in_prompt: bool,
        tracer: Tracer | None,
        context_tokens: int | None = None,
    ) -> None:
        if context_tokens is not None and context_tokens <= max_output_tokens:
            raise LLMError(f"a context of {context_tokens} tokens leaves no room for {max_output_tokens} to generate")
        self._context_tokens = context_tokens
        self._context_discovered = context_tokens is not None
        self._estimate = TokenEstimate()
        self._provider = provider
        self._model_name = model_name
        self._max_output_tokens = max_output_tokens
        self._max_output_chars = max_output_chars or max_output_tokens * CHARS_PER_TOKEN_CAP
        self._temperature = temperature
        self._seed = seed
        self._schema_in_prompt = schema_in_prompt
        self._tracer = tracer
        # The finish reasons of this thread's last call (calls run in parallel threads, e.g. judgments).
        self._last_call = threading.local()

    @property
    def model_name(self) -> str:
        return self._model_name

    # --- the port ---------------------------------------------------------------------------------

    def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: type[M],
        *,
        purpose: str,
        json_schema: Mapping[str, Any] | None = None,
    ) -> M:
        prompt = with_schema_instruction(messages, schema) if self._schema_in_prompt else list(messages)
        constraint = decoding_schema(schema, json_schema, keep_length_bounds=self.keeps_length_bounds)

        def generate(conversation: list[ChatMessage], attempt: int) -> str:
            request = ChatRequest(
                purpose=purpose,
                attempt=attempt,
                max_tokens=self._max_output_tokens,
                temperature=self._temperature,
                schema=schema,
                json_schema=constraint,
            )
            answer = self._chat_fitted(conversation, request)[0]
            if tuple(getattr(self._last_call, "finish_reasons", ())) == ("length",):
                cut_off(answer, schema, max_tokens=request.max_tokens)
            return answer

        return complete_structured(generate, prompt, schema, model_name=self._model_name)

    def complete_text(self, messages: Sequence[ChatMessage], *, purpose: str, max_tokens: int = 512) -> str:
        request = ChatRequest(
            purpose=purpose,
            attempt=1,
            max_tokens=min(max_tokens, self._max_output_tokens),
            temperature=self._temperature,
        )
        return self._chat_fitted(list(messages), request)[0]

    def sample_texts(
        self,
        messages: Sequence[ChatMessage],
        *,
        n: int,
        temperature: float,
        max_tokens: int,
        purpose: str = "sample",
        json_schema: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """`n` sampled answers to one prompt, from as few calls as the backend allows.

        With `json_schema`, each answer is decoded under it (the caller parses and validates them);
        without, the answers are free text.
        """
        if n < 1:
            raise LLMError(f"n must be at least 1, got {n}")
        request = ChatRequest(
            purpose=purpose,
            attempt=1,
            max_tokens=min(max_tokens, self._max_output_tokens),
            temperature=temperature,
            n=n,
            json_schema=(
                (dict(json_schema) if self.keeps_length_bounds else without_length_bounds(json_schema))
                if json_schema is not None
                else None
            ),
        )
        return self._sample(self._fit(list(messages), request.max_tokens), request)

    # --- the context window -----------------------------------------------------------------------

    @property
    def context_tokens(self) -> int | None:
        """The model's context length: configured, else asked of the backend once, else learned from
        a "too long" answer; None while unknown (nothing is trimmed before the server objects)."""
        if not self._context_discovered:
            self._context_discovered = True
            self._context_tokens = self._discover_context_tokens()
        return self._context_tokens

    def _fit(self, messages: list[ChatMessage], max_tokens: int) -> list[ChatMessage]:
        limit = self.context_tokens
        if limit is None:
            return messages
        return fit_messages(messages, budget_tokens=limit - max_tokens, estimate=self._estimate)

    def _chat_fitted(self, messages: list[ChatMessage], request: ChatRequest) -> list[str]:
        """`_chat` on the conversation fitted to the context; on a "too long" answer, learn the real
        sizes from it, trim again and retry once."""
        fitted = self._fit(messages, request.max_tokens)
        try:
            return self._chat(fitted, request)
        except LLMContextLengthError as exc:
            if exc.context_tokens is not None:
                self._context_tokens = exc.context_tokens
                self._context_discovered = True
            self._estimate.learn(fitted, actual_tokens=exc.prompt_tokens)
            refitted = self._fit(messages, request.max_tokens)
            if self.context_tokens is None or refitted == fitted:
                raise  # nothing more to trim: the prefix and the newest turn alone are too long
            return self._chat(refitted, request)

    def _discover_context_tokens(self) -> int | None:
        """The context length as the backend can tell it (a server's model list, a model config)."""
        return None

    # --- what a backend supplies ------------------------------------------------------------------

    @abstractmethod
    def _chat(self, messages: list[ChatMessage], request: ChatRequest) -> list[str]:
        """One model call, inside `self._span(request)`: `request.n` answers, each within the cap."""

    @abstractmethod
    def _sample(self, messages: list[ChatMessage], request: ChatRequest) -> list[str]:
        """`request.n` (≥ 1) sampled answers; `request` is the first call's, for all `n` at attempt 1."""

    @contextmanager
    def _span(self, request: ChatRequest) -> Iterator[ChatCall]:
        """The GenAI span of one call, with what every backend records about the request."""
        self._last_call.finish_reasons = ()
        with chat_span(
            provider=self._provider,
            model=self._model_name,
            purpose=request.purpose,
            attempt=request.attempt,
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            seed=self._seed,
            choices=request.n,
            tracer=self._tracer,
        ) as call:
            try:
                yield call
            finally:
                self._last_call.finish_reasons = tuple(call.finish_reasons)


def cut_off(answer: str, schema: type[BaseModel], *, max_tokens: int) -> None:
    """`LLMOutputError` at once for an answer `max_tokens` cut short that does not validate.

    Not retried: the retry would ask the same model the same question under the same budget, and a
    model that did not close its JSON in time (a small one rambling in a string) does it again;
    the caller's fallback is the better use of the time.
    """
    try:
        parse_structured(answer, schema)
    except InvalidOutput as exc:
        raise LLMOutputError(
            f"the model's {schema.__name__} was cut off at max_tokens ({max_tokens}) before it was complete: "
            f"{exc.reason}; not retried"
        ) from None
