"""The model behind an OpenAI-compatible HTTP API: vLLM in production, any compatible server else.

Structured output goes out as the standard `response_format={"type": "json_schema", ...}`, which
OpenAI and vLLM both honour (vLLM turns it into grammar-constrained decoding). vLLM's own request
field, `structured_outputs: {"json": schema}` (≥ 0.12, which removed `guided_json`), and the older
`guided_json` are there for servers that want them. Whatever the server does, the answer is
validated here: constrained decoding is a help, not a guarantee (a truncated answer is still
invalid).

The `openai` client retries 408/409/429/5xx and connection errors itself, honouring `Retry-After`,
`max_retries` times with exponential backoff; what is left after that becomes an
`LLMUnavailableError` (retryable by the job queue); a 400 saying the prompt is over the model's
context becomes an `LLMContextLengthError`, which the backend answers by trimming and retrying once
(the context length itself comes from the server's `/v1/models`, vLLM's `max_model_len`, unless
configured). The body is read in chunks and refused once it
outgrows what `max_tokens` can explain, so a misbehaving server cannot make us hold megabytes.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal, cast

import httpx2  # the transport of openai>=3; its read errors surface while we stream the body
import openai
from opentelemetry.trace import Tracer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.llm.backend import ChatBackend, ChatRequest
from agent.llm.context_window import context_length_error
from agent.llm.deadline import seconds_left
from agent.llm.port import ProviderName
from agent.llm.structured import check_output_size, decoding_schema
from reviewers.kernel.contracts import ChatMessage
from reviewers.kernel.errors import LLMError, LLMOutputError, LLMUnavailableError

log = logging.getLogger(__name__)

StructuredOutputMode = Literal["response_format", "structured_outputs", "guided_json", "prompt_only"]

JSON_ESCAPE_FACTOR = 6  # a character can take six bytes in a JSON string (\uXXXX)
ENVELOPE_BYTES = 64 * 1024  # ids, usage, logprobs-free metadata around the choices
NO_KEY = "EMPTY"  # vLLM's convention when it runs without --api-key; keeps the client off the env


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    content: str | None = None


class _Choice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    index: int = 0
    message: _Message = Field(default_factory=_Message)
    finish_reason: str | None = None


class _Usage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Completion(BaseModel):
    """The part of a chat completion we use; lenient, because "compatible" servers differ in the rest."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    choices: list[_Choice] = Field(default_factory=list)
    usage: _Usage | None = None


def _json_schema_name(text: str) -> str:
    """The `json_schema.name` OpenAI accepts: letters, digits, `_` and `-`, at most 64."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)[:64] or "answer"


def schema_name(schema: type[BaseModel]) -> str:
    return _json_schema_name(schema.__name__)


def structured_request_fields(
    schema: type[BaseModel], mode: StructuredOutputMode, *, json_schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The request fields that ask the server for JSON under `decoding_schema(schema, json_schema)`
    (named after `schema`), by `mode`."""
    return _schema_fields(schema_name(schema), decoding_schema(schema, json_schema), mode)


def _schema_fields(name: str, json_schema: dict[str, Any], mode: StructuredOutputMode) -> dict[str, Any]:
    if mode == "response_format":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": json_schema}}}
    if mode == "structured_outputs":
        return {"extra_body": {"structured_outputs": {"json": json_schema}}}
    if mode == "guided_json":
        return {"extra_body": {"guided_json": json_schema}}
    return {}


def read_bounded(chunks: Iterable[bytes], *, limit: int, deadline: float) -> bytes:
    """The concatenated chunks, or an error once they pass `limit` bytes or `deadline` (monotonic)."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise LLMOutputError(f"the server's answer passed {limit} bytes; refused before parsing")
        if time.monotonic() > deadline:
            raise LLMUnavailableError("the server's answer took longer than the timeout to arrive")
    return bytes(body)


def _unavailable(exc: Exception, base_url: str) -> LLMError:
    """Our error for a failure the openai client could not retry away."""
    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return LLMUnavailableError(f"the model server at {base_url} timed out")
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        return LLMUnavailableError(f"the model server at {base_url} cannot be reached: {type(exc).__name__}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in (408, 409, 429) or status >= 500:
            return LLMUnavailableError(f"the model server at {base_url} answered {status} after retries")
        # 4xx: our request is wrong (unknown model, prompt over the context); retrying as is cannot help,
        # but a prompt over the context can be trimmed (`ChatBackend._chat_fitted`).
        too_long = context_length_error(str(exc.message)) if status == 400 else None
        if too_long is not None:
            return too_long
        return LLMError(f"the model server at {base_url} refused the request with {status}: {exc.message[:300]}")
    return LLMUnavailableError(f"the model server at {base_url} failed: {type(exc).__name__}")


class OpenAICompatibleLLM(ChatBackend):
    """`SamplingLLM` over an OpenAI-compatible chat-completions endpoint (thread-safe)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        max_output_tokens: int = 1024,
        max_output_chars: int | None = None,
        temperature: float = 0.0,
        seed: int | None = None,
        structured_output: StructuredOutputMode = "response_format",
        schema_in_prompt: bool = True,
        provider_name: ProviderName = "openai",
        tracer: Tracer | None = None,
        context_tokens: int | None = None,
    ) -> None:
        if timeout_s <= 0 or max_retries < 0 or max_output_tokens < 1:
            raise LLMError("timeout_s must be > 0, max_retries ≥ 0 and max_output_tokens ≥ 1")
        super().__init__(
            provider=provider_name,
            model_name=model,
            max_output_tokens=max_output_tokens,
            max_output_chars=max_output_chars,
            temperature=temperature,
            seed=seed,
            schema_in_prompt=schema_in_prompt,
            tracer=tracer,
            context_tokens=context_tokens,
        )
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._structured_output = structured_output
        # The key lives only inside the client (an Authorization header); never on us, spans or logs.
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or NO_KEY,
            timeout=timeout_s,
            max_retries=max_retries,
        )

    def close(self) -> None:
        self._client.close()

    def _discover_context_tokens(self) -> int | None:
        """`max_model_len` of our model in the server's model list, as vLLM reports it; None when the
        server does not say (OpenAI does not) or cannot be asked now."""
        try:
            page = self._client.models.list()
        except (openai.APIError, httpx2.HTTPError) as exc:
            log.warning("could not ask %s for its model list: %s", self._base_url, type(exc).__name__)
            return None
        for item in page.data:
            if item.id == self._model_name:
                value = (item.model_extra or {}).get("max_model_len")
                return value if isinstance(value, int) and value > 0 else None
        return None

    # --- one request ------------------------------------------------------------------------------

    def _sample(self, messages: list[ChatMessage], request: ChatRequest) -> list[str]:
        n = request.n
        texts: list[str] = []
        # A server that ignores `n` answers one choice per request; ask again for the rest.
        for attempt in range(1, n + 1):
            texts += self._chat(messages, replace(request, attempt=attempt, n=n - len(texts)))
            if len(texts) >= n:
                break
        return texts[:n]

    def _chat(self, messages: list[ChatMessage], request: ChatRequest) -> list[str]:
        extra: dict[str, Any] = {}
        if request.json_schema is not None:  # already `decoding_schema`'s output (the backend base)
            title = request.json_schema.get("title") or "answer"
            name = schema_name(request.schema) if request.schema is not None else _json_schema_name(str(title))
            extra = _schema_fields(name, request.json_schema, self._structured_output)
        limit = self._max_output_chars * request.n * JSON_ESCAPE_FACTOR + ENVELOPE_BYTES
        with self._span(request) as call:
            body = self._post(messages, request, extra=extra, limit=limit)
            try:
                completion = _Completion.model_validate(json.loads(body))
            except (json.JSONDecodeError, UnicodeDecodeError, ValidationError):
                raise LLMOutputError("the server's answer is not a chat completion") from None
            call.response_model = completion.model
            if completion.usage is not None:
                call.input_tokens = completion.usage.prompt_tokens
                call.output_tokens = completion.usage.completion_tokens
            call.finish_reasons = [c.finish_reason or "unknown" for c in completion.choices]
            if not completion.choices:
                raise LLMOutputError("the server's answer has no choices")
            choices = sorted(completion.choices, key=lambda c: c.index)
            return [check_output_size(c.message.content or "", max_chars=self._max_output_chars) for c in choices]

    def _post(self, messages: list[ChatMessage], request: ChatRequest, *, extra: dict[str, Any], limit: int) -> bytes:
        kwargs: dict[str, Any] = {
            "model": self._model_name,
            "messages": cast(Any, messages),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            **extra,
        }
        if request.n != 1:
            kwargs["n"] = request.n
        if self._seed is not None:
            kwargs["seed"] = self._seed
        client, timeout_s = self._client, self._timeout_s
        left = seconds_left()
        if left is not None:  # the model's deadline in a review (`agent.llm.deadline`) comes first
            if left <= 0:
                raise LLMUnavailableError("the model's deadline passed before this request")
            if left < timeout_s:  # no retry after a wait that ends at the deadline
                client, timeout_s = self._client.with_options(timeout=left, max_retries=0), left
        try:
            with client.chat.completions.with_streaming_response.create(**kwargs) as response:
                deadline = time.monotonic() + timeout_s
                return read_bounded(response.iter_bytes(), limit=limit, deadline=deadline)
        except LLMError:
            raise
        except (openai.APIError, httpx2.HTTPError) as exc:
            raise _unavailable(exc, self._base_url) from exc
