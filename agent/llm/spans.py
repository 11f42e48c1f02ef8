"""One OpenTelemetry span per model call, named and attributed by the GenAI semantic conventions.

Attribute names follow https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/ so any
GenAI-aware backend reads our traces; `reviewloop.*` attributes carry what the conventions lack (why
the call was made, which attempt, latency). Prompts, answers and API keys never go on a span.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_SEED = "gen_ai.request.seed"
REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ERROR_TYPE = "error.type"
PURPOSE = "reviewloop.purpose"
ATTEMPT = "reviewloop.attempt"
LATENCY_MS = "reviewloop.latency_ms"

STATUS_DESCRIPTION_LIMIT = 300

_default_tracer = trace.get_tracer(__name__)


@dataclass
class ChatCall:
    """What the backend learns from the answer, written onto the span when the call ends."""

    response_model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reasons: Sequence[str] = ()


@contextmanager
def chat_span(
    *,
    provider: str,
    model: str,
    purpose: str,
    attempt: int = 1,
    max_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    choices: int = 1,
    tracer: Tracer | None = None,
) -> Iterator[ChatCall]:
    """A CLIENT span "chat {model}" around one model call; an exception marks it failed and propagates."""
    started = time.perf_counter()
    with (tracer or _default_tracer).start_as_current_span(
        f"chat {model}", kind=SpanKind.CLIENT, record_exception=False, set_status_on_exception=False
    ) as span:
        span.set_attribute(OPERATION_NAME, "chat")
        span.set_attribute(PROVIDER_NAME, provider)
        span.set_attribute(REQUEST_MODEL, model)
        span.set_attribute(PURPOSE, purpose)
        span.set_attribute(ATTEMPT, attempt)
        if max_tokens is not None:
            span.set_attribute(REQUEST_MAX_TOKENS, max_tokens)
        if temperature is not None:
            span.set_attribute(REQUEST_TEMPERATURE, temperature)
        if seed is not None:
            span.set_attribute(REQUEST_SEED, seed)
        if choices != 1:
            span.set_attribute(REQUEST_CHOICE_COUNT, choices)
        call = ChatCall()
        try:
            yield call
        except BaseException as exc:
            span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)[:STATUS_DESCRIPTION_LIMIT]))
            raise
        finally:
            span.set_attribute(LATENCY_MS, round((time.perf_counter() - started) * 1000.0, 3))
            if call.response_model is not None:
                span.set_attribute(RESPONSE_MODEL, call.response_model)
            if call.input_tokens is not None:
                span.set_attribute(USAGE_INPUT_TOKENS, call.input_tokens)
            if call.output_tokens is not None:
                span.set_attribute(USAGE_OUTPUT_TOKENS, call.output_tokens)
            if call.finish_reasons:
                span.set_attribute(RESPONSE_FINISH_REASONS, list(call.finish_reasons))
