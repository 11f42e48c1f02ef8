"""The HTTP backend against a real loopback server, through the real `openai` client."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from fakes.openai_server import FakeOpenAIServer, FakeReply
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer
from pydantic import BaseModel, Field

from agent.llm.factory import make_llm
from agent.llm.openai_http import OpenAICompatibleLLM
from agent.llm.structured import decoding_schema, without_length_bounds
from agent.strategy import Strategy
from agent.strategy_schema import strategy_json_schema
from reviewers.kernel.contracts import ChatMessage
from reviewers.kernel.errors import ConfigError, LLMError, LLMOutputError, LLMUnavailableError

pytest_plugins = ("fakes.openai_fixtures",)

API_KEY = "sk-test-do-not-leak-4711"
MESSAGES: list[ChatMessage] = [
    {"role": "system", "content": "You verify code review findings."},
    {"role": "user", "content": "Is the finding on line 3 real?"},
]


class Verdict(BaseModel):
    verdict: Literal["REAL", "FALSE_POSITIVE"]
    reason: str = Field(min_length=1)


VALID = {"verdict": "REAL", "reason": "the evidence is on a changed line"}


@pytest.fixture
def spans() -> tuple[Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


@pytest.fixture
def make(openai_server: FakeOpenAIServer, spans: tuple[Tracer, InMemorySpanExporter]) -> Iterator[Any]:
    made: list[OpenAICompatibleLLM] = []

    def build(**overrides: Any) -> OpenAICompatibleLLM:
        options: dict[str, Any] = {
            "base_url": openai_server.base_url,
            "model": "fake-model",
            "api_key": API_KEY,
            "timeout_s": 5.0,
            "max_retries": 2,
            "max_output_tokens": 64,
            "tracer": spans[0],
        }
        llm = OpenAICompatibleLLM(**(options | overrides))
        made.append(llm)
        return llm

    yield build
    for llm in made:
        llm.close()


def test_valid_answer_is_validated_and_the_schema_is_sent(openai_server: FakeOpenAIServer, make: Any) -> None:
    openai_server.enqueue(FakeReply.json(VALID))
    result = make().complete_json(MESSAGES, Verdict, purpose="verify")
    assert result == Verdict.model_validate(VALID)
    [request] = openai_server.chat_requests
    # The schema decoding is held to is pydantic's without string length bounds (see `decoding_schema`).
    assert request.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Verdict", "schema": decoding_schema(Verdict)},
    }
    assert "minLength" not in json.dumps(request.body["response_format"])
    assert request.body["model"] == "fake-model"
    assert request.body["max_tokens"] == 64
    assert request.body["temperature"] == 0.0
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    # The instruction goes after the shared prefix, on the last user message.
    assert request.messages[0] == MESSAGES[0]
    assert request.messages[1]["content"].startswith(MESSAGES[1]["content"])
    assert '"verdict"' in request.messages[1]["content"]


def test_fenced_answer_with_prose_is_accepted(openai_server: FakeOpenAIServer, make: Any) -> None:
    openai_server.enqueue(FakeReply.text(f"Here you go:\n```json\n{json.dumps(VALID)}\n```\nDone."))
    assert make().complete_json(MESSAGES, Verdict, purpose="verify").verdict == "REAL"


def test_invalid_then_valid_retries_once_with_the_validation_error(openai_server: FakeOpenAIServer, make: Any) -> None:
    first = '{"verdict": "MAYBE", "reason": "unsure"}'
    openai_server.enqueue(FakeReply.text(first), FakeReply.json(VALID))
    result = make().complete_json(MESSAGES, Verdict, purpose="verify")
    assert result.verdict == "REAL"
    first_request, retry = openai_server.chat_requests
    # The retry replays the original prompt, then the rejected answer, then the error about it.
    assert retry.messages[: len(first_request.messages)] == first_request.messages
    assert retry.messages[-2] == {"role": "assistant", "content": first}
    correction = retry.messages[-1]
    assert correction["role"] == "user"
    assert "verdict: Input should be 'REAL' or 'FALSE_POSITIVE'" in correction["content"]
    assert retry.body["response_format"] == first_request.body["response_format"]


def test_invalid_twice_raises_output_error_after_two_requests(openai_server: FakeOpenAIServer, make: Any) -> None:
    openai_server.enqueue(FakeReply.text("not json at all"), FakeReply.text('{"verdict": "REAL"}'))
    with pytest.raises(LLMOutputError) as caught:
        make().complete_json(MESSAGES, Verdict, purpose="verify")
    assert len(openai_server.chat_requests) == 2
    assert "reason: Field required" in str(caught.value)
    assert caught.value.retryable is False
    assert "no JSON object" in openai_server.chat_requests[1].messages[-1]["content"]


def test_rate_limit_is_retried_after_retry_after(openai_server: FakeOpenAIServer, make: Any) -> None:
    openai_server.enqueue(FakeReply.error(429, retry_after=0.3), FakeReply.json(VALID))
    started = time.monotonic()
    result = make(max_retries=1).complete_json(MESSAGES, Verdict, purpose="verify")
    assert result.verdict == "REAL"
    assert len(openai_server.chat_requests) == 2
    assert time.monotonic() - started >= 0.3  # the client waited as the server asked


def test_server_errors_past_the_retry_budget_are_unavailable(openai_server: FakeOpenAIServer, make: Any) -> None:
    openai_server.enqueue(FakeReply.error(500), FakeReply.error(503), FakeReply.json(VALID))
    with pytest.raises(LLMUnavailableError) as caught:
        make(max_retries=1).complete_json(MESSAGES, Verdict, purpose="verify")
    assert caught.value.retryable is True
    assert "503" in str(caught.value)
    assert len(openai_server.chat_requests) == 2  # one try plus one retry; the valid reply is never fetched
    assert openai_server.pending == 1


def test_client_errors_are_not_retried(openai_server: FakeOpenAIServer, make: Any) -> None:
    openai_server.enqueue(FakeReply.error(400), FakeReply.json(VALID))
    with pytest.raises(LLMError) as caught:
        make().complete_text(MESSAGES, purpose="summary")
    assert type(caught.value) is LLMError
    assert caught.value.retryable is False
    assert len(openai_server.chat_requests) == 1


def test_slow_answer_times_out(openai_server: FakeOpenAIServer, make: Any) -> None:
    # The answer would take a minute; the client gives up after 0.3 s. The bound is far from both, so
    # a loaded machine cannot fail the test (issue 21): it only tells a timeout from a wait.
    openai_server.enqueue(FakeReply.json(VALID, delay_s=60.0))
    started = time.monotonic()
    with pytest.raises(LLMUnavailableError, match="timed out"):
        make(timeout_s=0.3, max_retries=0).complete_json(MESSAGES, Verdict, purpose="verify")
    assert time.monotonic() - started < 30.0


def test_enormous_answer_is_refused_before_parsing(openai_server: FakeOpenAIServer, make: Any) -> None:
    # 64 tokens allow 64 * 16 = 1024 characters; the body may hold 6 bytes per character + 64 KiB.
    openai_server.enqueue(FakeReply.enormous(2_000_000))
    with pytest.raises(LLMOutputError, match="bytes; refused before parsing"):
        make().complete_json(MESSAGES, Verdict, purpose="verify")
    assert len(openai_server.chat_requests) == 1  # not retried: the next answer would be the same


def test_long_answer_over_the_character_cap_is_refused(openai_server: FakeOpenAIServer, make: Any) -> None:
    openai_server.enqueue(FakeReply.text("y" * 1025))
    with pytest.raises(LLMOutputError, match="1025 characters, over the cap of 1024"):
        make().complete_text(MESSAGES, purpose="summary")


def test_sample_texts_asks_for_n_choices(openai_server: FakeOpenAIServer, make: Any) -> None:
    openai_server.enqueue(FakeReply.text("plan a", "plan b", "plan c"))
    texts = make(seed=7).sample_texts(MESSAGES, n=3, temperature=1.0, max_tokens=32, purpose="strategy")
    assert texts == ["plan a", "plan b", "plan c"]
    [request] = openai_server.chat_requests
    assert (request.body["n"], request.body["temperature"], request.body["max_tokens"]) == (3, 1.0, 32)
    assert request.body["seed"] == 7
    assert "response_format" not in request.body


def test_sample_texts_asks_again_when_the_server_ignores_n(openai_server: FakeOpenAIServer, make: Any) -> None:
    def one_choice(text: str) -> FakeReply:
        body = {"model": "fake-model", "choices": [{"index": 0, "message": {"content": text}}]}
        return FakeReply(raw_body=json.dumps(body).encode())

    openai_server.enqueue(one_choice("first"), one_choice("second"))
    texts = make().sample_texts(MESSAGES, n=2, temperature=0.8, max_tokens=16)
    assert texts == ["first", "second"]
    assert [r.body.get("n", 1) for r in openai_server.chat_requests] == [2, 1]


def test_vllm_structured_outputs_field(openai_server: FakeOpenAIServer, make: Any) -> None:
    openai_server.enqueue(FakeReply.json(VALID))
    make(structured_output="structured_outputs").complete_json(MESSAGES, Verdict, purpose="verify")
    [request] = openai_server.chat_requests
    assert request.body["structured_outputs"] == {"json": decoding_schema(Verdict)}
    assert "response_format" not in request.body


def test_a_per_merge_request_strategy_schema_arrives_as_response_format(
    openai_server: FakeOpenAIServer, make: Any
) -> None:
    schema = strategy_json_schema(["shop/db.py", "tests/test_db.py"], reviewers=["security", "test_impact"])
    answer = {
        "change_type": "feature",
        "risk_areas": [{"path": "shop/db.py", "why": "builds SQL"}],
        "plan": [{"reviewer": "security", "focus_paths": ["shop/db.py"], "checks": "injection", "step_budget": 4}],
        "stop_condition": "done",
    }
    openai_server.enqueue(FakeReply.json(answer))
    z = make().complete_json(MESSAGES, Strategy, purpose="strategy", json_schema=schema)
    assert z.plan[0].focus_paths == ["shop/db.py"]
    [request] = openai_server.chat_requests
    sent = request.body["response_format"]
    # A server is sent the narrowing without its string bounds (see `decoding_schema`).
    assert sent == {
        "type": "json_schema",
        "json_schema": {"name": "Strategy", "schema": decoding_schema(Strategy, schema)},
    }
    assert "maxLength" in json.dumps(schema) and "maxLength" not in json.dumps(sent)
    assert sent["json_schema"]["schema"]["$defs"]["path"] == {"enum": ["shop/db.py", "tests/test_db.py"]}
    # The prompt keeps pydantic's short schema; the per-MR narrowing travels only as the constraint.
    assert '"plan"' in request.messages[-1]["content"] and "prefixItems" not in request.messages[-1]["content"]


def test_sampled_answers_carry_their_schema(openai_server: FakeOpenAIServer, make: Any) -> None:
    schema = strategy_json_schema(["a.py"])
    openai_server.enqueue(FakeReply.text("{}", "{}"))
    make().sample_texts(MESSAGES, n=2, temperature=1.0, max_tokens=16, json_schema=schema)
    [request] = openai_server.chat_requests
    assert request.body["response_format"]["json_schema"] == {
        "name": "Strategy",
        "schema": without_length_bounds(schema),
    }


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_spans_carry_genai_attributes_and_never_the_key(
    openai_server: FakeOpenAIServer, make: Any, spans: tuple[Tracer, InMemorySpanExporter]
) -> None:
    answer = '{"verdict": "REAL"}'  # missing "reason": invalid, then a valid one
    openai_server.enqueue(FakeReply.text(answer), FakeReply.json(VALID), FakeReply.error(500), FakeReply.error(500))
    llm = make(max_retries=1)
    llm.complete_json(MESSAGES, Verdict, purpose="verify")
    with pytest.raises(LLMUnavailableError):
        llm.complete_text(MESSAGES, purpose="summary")
    first, second, failed = spans[1].get_finished_spans()
    for span, attempt in ((first, 1), (second, 2)):
        attrs = _attrs(span)
        assert span.name == "chat fake-model"
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "openai"
        assert attrs["gen_ai.request.model"] == "fake-model"
        assert attrs["gen_ai.response.model"] == "fake-model"
        assert attrs["reviewloop.purpose"] == "verify"
        assert attrs["reviewloop.attempt"] == attempt
        assert attrs["reviewloop.latency_ms"] > 0
        assert span.status.status_code != StatusCode.ERROR
    # The fake counts whitespace words; recompute them from what was actually sent.
    sent = openai_server.chat_requests
    words = [sum(len(m["content"].split()) for m in r.messages) for r in sent[:2]]
    assert _attrs(first)["gen_ai.usage.input_tokens"] == words[0]
    assert _attrs(second)["gen_ai.usage.input_tokens"] == words[1]
    assert _attrs(first)["gen_ai.usage.output_tokens"] == 2  # '{"verdict":' and '"REAL"}'
    assert _attrs(second)["gen_ai.usage.output_tokens"] == len(json.dumps(VALID).split())
    assert failed.status.status_code == StatusCode.ERROR
    assert _attrs(failed)["error.type"] == "LLMUnavailableError"
    assert _attrs(failed)["reviewloop.purpose"] == "summary"
    everything = " ".join(str(v) for s in (first, second, failed) for v in _attrs(s).values())
    everything += " ".join(str(e.attributes) for s in (first, second, failed) for e in s.events)
    assert API_KEY not in everything


def test_factory_picks_the_backend() -> None:
    assert (
        make_llm(
            base_url=None, model=None, api_key=None, model_path=None, timeout_s=1, max_retries=0, max_output_tokens=8
        )
        is None
    )
    llm = make_llm(
        base_url="http://127.0.0.1:9/v1",
        model="m",
        api_key=None,
        model_path=None,
        timeout_s=1,
        max_retries=0,
        max_output_tokens=8,
    )
    assert isinstance(llm, OpenAICompatibleLLM) and llm.model_name == "m"
    llm.close()
    with pytest.raises(ConfigError):
        make_llm(
            base_url="http://127.0.0.1:9/v1",
            model=None,
            api_key=None,
            model_path=None,
            timeout_s=1,
            max_retries=0,
            max_output_tokens=8,
        )


def test_unreachable_server_is_unavailable() -> None:
    # Port 9 (discard) on loopback: nothing listens there, so the connection is refused at once.
    llm = OpenAICompatibleLLM(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=1, max_retries=0)
    try:
        with pytest.raises(LLMUnavailableError, match="cannot be reached"):
            llm.complete_text(MESSAGES, purpose="summary")
    finally:
        llm.close()


def test_no_call_waits_past_the_models_deadline(openai_server: FakeOpenAIServer, make: Any) -> None:
    """In a review, the model's deadline (`agent.llm.deadline`) bounds one call, retries included:
    a server that would answer after 8 s is given what is left of a 1 s deadline, not its 5 s
    timeout three times; past the deadline no request is sent at all (issue 40)."""
    from agent.llm.deadline import model_deadline

    openai_server.enqueue(FakeReply.json(VALID, delay_s=8.0))
    llm = make(timeout_s=5.0, max_retries=2)
    started = time.monotonic()
    with model_deadline(1.0), pytest.raises(LLMUnavailableError):
        llm.complete_json(MESSAGES, Verdict, purpose="verify")
    assert time.monotonic() - started < 4.0
    assert len(openai_server.chat_requests) == 1  # no retry after a wait that ended at the deadline

    with model_deadline(0.0), pytest.raises(LLMUnavailableError, match="deadline passed"):
        llm.complete_json(MESSAGES, Verdict, purpose="verify")
    assert len(openai_server.chat_requests) == 1
    # outside a review's deadline the backend's own timeout is all there is
    openai_server.enqueue(FakeReply.json(VALID))
    assert llm.complete_json(MESSAGES, Verdict, purpose="verify").verdict == "REAL"
