"""Constrained decoding in process (xgrammar) on the tiny random model: a model that writes noise
unconstrained writes schema-valid JSON under the schema; bad schemas and short budgets fail typed.
A structured answer is decoded by jump-forward (a forward pass per choice) unless the backend is
built with `jump_forward=False` (token by token with `generate`); both are held to the schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import jsonschema
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel, Field

from agent.llm.transformers_local import TransformersLLM
from agent.strategy_schema import strategy_json_schema
from reviewers.kernel.contracts import ChatMessage
from reviewers.kernel.errors import LLMOutputError, LLMSchemaError, LLMUnavailableError
from reviewers.tool_schema import tool_call_json_schema

MESSAGES: list[ChatMessage] = [{"role": "user", "content": "Pick a reviewer and the files it should read."}]


class Pick(BaseModel):
    reviewer: Literal["security", "architecture", "code_quality", "test_impact"]
    paths: list[str] = Field(max_length=20)
    budget: int = Field(ge=1, le=30)


# The per-call narrowing: paths from this change only. No free text, so a random model cannot
# wander inside a string and every answer ends well within the token budget.
PICK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reviewer": {"enum": ["security", "test_impact"]},
        "paths": {"type": "array", "items": {"enum": ["app/a.py", "app/b.py"]}, "minItems": 1, "maxItems": 2},
        "budget": {"type": "integer", "minimum": 1, "maximum": 30},
    },
    "required": ["reviewer", "paths", "budget"],
    "additionalProperties": False,
}


def _llm(model: Path, **options: Any) -> tuple[TransformersLLM, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # room for a whole answer under the schema: the tiny model's tokenizer is learned from the synthetic
    # prompts, so how many tokens an answer takes moves with them (48 stopped sufficing when they changed)
    options.setdefault("max_output_tokens", 128)
    options.setdefault("seed", 0)
    return TransformersLLM(model, tracer=provider.get_tracer("test"), **options), exporter


def _forward_passes(llm: TransformersLLM) -> list[bool]:
    """One entry per model call from now on: whether it read the prompt (a call given no cache)."""
    calls: list[bool] = []
    llm.model.register_forward_hook(
        lambda _m, _a, kwargs, _o: calls.append(kwargs.get("cache") is None), with_kwargs=True
    )
    return calls


def test_a_random_model_writes_valid_json_only_under_the_schema(tiny_model_dir: Path) -> None:
    free, _ = _llm(tiny_model_dir, constrained=False)
    with pytest.raises(LLMOutputError):
        free.complete_json(MESSAGES, Pick, purpose="pick", json_schema=PICK_SCHEMA)
    held, spans = _llm(tiny_model_dir)
    pick = held.complete_json(MESSAGES, Pick, purpose="pick", json_schema=PICK_SCHEMA)
    jsonschema.validate(pick.model_dump(), PICK_SCHEMA)
    assert len(spans.get_finished_spans()) == 1  # valid at the first attempt


def test_a_structured_call_reads_the_prompt_once_and_decodes_only_the_choices(tiny_model_dir: Path) -> None:
    llm, spans = _llm(tiny_model_dir)
    passes = _forward_passes(llm)
    pick = llm.complete_json(MESSAGES, Pick, purpose="pick", json_schema=PICK_SCHEMA)
    jsonschema.validate(pick.model_dump(), PICK_SCHEMA)
    [span] = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert passes.count(True) == 1  # the prompt, read once
    # keys, quotes and the enum values' shared prefixes are forced: 7 passes for 21 tokens when written
    # (token by token, the same call took 50 passes, one per token of a 50-token answer)
    assert 2 * len(passes) < int(attrs["gen_ai.usage.output_tokens"])  # type: ignore[arg-type]


def test_the_token_by_token_path_is_kept_when_jump_forward_is_off(tiny_model_dir: Path) -> None:
    llm, spans = _llm(tiny_model_dir, jump_forward=False)
    passes = _forward_passes(llm)
    pick = llm.complete_json(MESSAGES, Pick, purpose="pick", json_schema=PICK_SCHEMA)
    jsonschema.validate(pick.model_dump(), PICK_SCHEMA)
    [span] = spans.get_finished_spans()
    assert len(passes) == dict(span.attributes or {})["gen_ai.usage.output_tokens"]  # a pass per token


def test_jump_forward_samples_are_seeded_and_share_one_reading_of_the_prompt(tiny_model_dir: Path) -> None:
    llm, _ = _llm(tiny_model_dir)
    passes = _forward_passes(llm)
    texts = llm.sample_texts(MESSAGES, n=3, temperature=1.0, max_tokens=48, json_schema=PICK_SCHEMA)
    assert passes.count(True) == 1
    for text in texts:
        jsonschema.validate(json.loads(text), PICK_SCHEMA)
    assert len(set(texts)) > 1  # three streams, not one answer three times
    assert llm.sample_texts(MESSAGES, n=3, temperature=1.0, max_tokens=48, json_schema=PICK_SCHEMA) == texts
    other, _ = _llm(tiny_model_dir, seed=1)
    assert other.sample_texts(MESSAGES, n=3, temperature=1.0, max_tokens=48, json_schema=PICK_SCHEMA) != texts


def test_every_sample_is_decoded_under_the_schema(tiny_model_dir: Path) -> None:
    llm, _ = _llm(tiny_model_dir)
    texts = llm.sample_texts(MESSAGES, n=3, temperature=1.0, max_tokens=48, json_schema=PICK_SCHEMA)
    assert len(texts) == 3
    for text in texts:
        jsonschema.validate(json.loads(text), PICK_SCHEMA)
    assert len(set(texts)) > 1  # sampled, not three copies of one answer


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "object", "properties": {"a": {"enum": []}}, "required": ["a"]}, "enum array must not be empty"),
        ({"type": "array", "minItems": 3, "maxItems": 1}, "minItems is greater than maxItems"),
        ({"type": "nonsense"}, 'Unsupported type "nonsense"'),
        ({"title": "Nothing", "anyOf": []}, "Nothing admits no answer"),
    ],
)
def test_a_schema_no_answer_can_satisfy_fails_typed_before_generating(
    tiny_model_dir: Path, schema: dict[str, Any], reason: str
) -> None:
    llm, spans = _llm(tiny_model_dir)
    with pytest.raises(LLMSchemaError, match=reason):
        llm.complete_json(MESSAGES, Pick, purpose="pick", json_schema=schema)
    assert spans.get_finished_spans() == ()  # no model call was made


@pytest.mark.parametrize("jump_forward", [True, False])
def test_an_answer_the_budget_cuts_short_is_a_typed_failure_at_once(tiny_model_dir: Path, jump_forward: bool) -> None:
    llm, spans = _llm(tiny_model_dir, max_output_tokens=3, jump_forward=jump_forward)
    with pytest.raises(LLMOutputError, match=r"cut off at max_tokens \(3\).*not retried"):
        llm.complete_json(MESSAGES, Pick, purpose="pick", json_schema=PICK_SCHEMA)
    finished = spans.get_finished_spans()  # no identical retry: it would be cut off again
    assert [dict(s.attributes or {})["gen_ai.response.finish_reasons"] for s in finished] == [("length",)]


class Note(BaseModel):
    title: str = Field(max_length=500)
    body: str = Field(max_length=500)


@pytest.mark.parametrize("jump_forward", [True, False])
def test_bounded_strings_end_at_their_bound_and_the_json_stays_valid(tiny_model_dir: Path, jump_forward: bool) -> None:
    # A random model never closes a string of its own accord: every string runs to its bound.
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"title": {"type": "string", "maxLength": 7}, "body": {"type": "string", "maxLength": 19}},
        "required": ["title", "body"],
        "additionalProperties": False,
    }
    llm, _ = _llm(tiny_model_dir, max_output_tokens=80, jump_forward=jump_forward)
    texts = llm.sample_texts(MESSAGES, n=4, temperature=1.0, max_tokens=80, json_schema=schema)
    lengths = set()
    for text in texts:
        value = json.loads(text)
        jsonschema.validate(value, schema)
        lengths.add((len(value["title"]), len(value["body"])))
    assert max(t for t, _ in lengths) <= 7 and max(b for _, b in lengths) <= 19
    assert any(b >= 10 for _, b in lengths)  # bounded, not closed at once
    note = llm.complete_json(MESSAGES, Note, purpose="note", json_schema=schema)
    assert len(note.title) <= 7 and len(note.body) <= 19


def test_the_review_schemas_compile_once_per_schema(tiny_model_dir: Path) -> None:
    from agent.llm.grammar import JsonSchemaGrammar

    llm, _ = _llm(tiny_model_dir)
    grammar = JsonSchemaGrammar(
        llm.tokenizer, vocab_size=llm.model.config.vocab_size, stop_token_ids=[llm.tokenizer.eos_token_id]
    )
    strategy = strategy_json_schema(["app/a.py", "app/b.py", "tests/test_a.py"])
    tools = tool_call_json_schema(paths=["app/a.py", "app/b.py"])
    compiled = grammar.compile(strategy)
    grammar.compile(tools)
    assert grammar.compile(json.loads(json.dumps(strategy))) is compiled  # cached by content, not identity


def test_answers_follow_the_schemas_property_order(tiny_model_dir: Path) -> None:
    """The order of `properties` is the order the model writes in (a plan's reasons before its
    decisions), so the grammar must not sort keys."""
    import xgrammar as xgr

    from agent.llm.grammar import JsonSchemaGrammar

    llm, _ = _llm(tiny_model_dir)
    grammar = JsonSchemaGrammar(
        llm.tokenizer, vocab_size=llm.model.config.vocab_size, stop_token_ids=[llm.tokenizer.eos_token_id]
    )
    order = grammar.compile(PICK_SCHEMA)
    assert xgr.GrammarMatcher(order).accept_string('{"reviewer":"security","paths":["app/a.py"],"budget":3}')
    assert not xgr.GrammarMatcher(order).accept_string('{"budget":3,"paths":["app/a.py"],"reviewer":"security"}')
    backwards = {**PICK_SCHEMA, "properties": dict(reversed(list(PICK_SCHEMA["properties"].items())))}
    assert grammar.compile(backwards) is not order
    assert xgr.GrammarMatcher(grammar.compile(backwards)).accept_string(
        '{"budget":3,"paths":["app/a.py"],"reviewer":"security"}'
    )


class ClockAtForwardPasses:
    """The model's deadline clock (`agent.llm.deadline`), one second per forward pass of the model: a
    deadline of 5.5 s has passed after the sixth pass, however fast or busy this machine is."""

    def __init__(self, llm: TransformersLLM) -> None:
        self.passes = 0
        llm.model.register_forward_hook(lambda *_: self._tick())

    def _tick(self) -> None:
        self.passes += 1

    def monotonic(self) -> float:
        return float(self.passes)


LONG_NOTE: dict[str, Any] = {  # a random model writes every string to its bound: hundreds of choices
    "type": "object",
    "properties": {"title": {"type": "string", "maxLength": 500}, "body": {"type": "string", "maxLength": 500}},
    "required": ["title", "body"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("jump_forward", [True, False])
def test_a_constrained_answer_stops_at_the_models_deadline_between_steps(
    tiny_model_dir: Path, jump_forward: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.llm import deadline

    llm, spans = _llm(tiny_model_dir, max_output_tokens=400, jump_forward=jump_forward)
    clock = ClockAtForwardPasses(llm)
    monkeypatch.setattr(deadline, "time", clock)
    with deadline.model_deadline(5.5), pytest.raises(LLMUnavailableError, match="deadline passed during"):
        llm.complete_json(MESSAGES, Note, purpose="note", json_schema=LONG_NOTE)
    assert clock.passes == 6  # stopped at the first step past the deadline, not at the answer's end
    assert len(spans.get_finished_spans()) == 1  # not retried: the deadline has passed for the retry too
    # a deadline already past: no model call at all
    with deadline.model_deadline(0.0), pytest.raises(LLMUnavailableError, match="deadline passed before"):
        llm.complete_json(MESSAGES, Note, purpose="note", json_schema=LONG_NOTE)
    assert clock.passes == 6
    # outside a review (no deadline) the same call runs to the answer's end, many more steps
    note = llm.complete_json(MESSAGES, Note, purpose="note", json_schema=LONG_NOTE)
    jsonschema.validate(note.model_dump(), LONG_NOTE)
    assert clock.passes > 2 * 6, clock.passes


def test_a_strategy_cut_at_the_deadline_is_a_step_not_completed(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step that asked ends with the rules' plan and says why, rather than waiting for the model."""
    from agent.diff import parse_unified_diff
    from agent.llm import deadline
    from agent.strategy import generate_strategy
    from reviewers.kernel.contracts import RepoConfig

    llm, _ = _llm(tiny_model_dir, max_output_tokens=400)
    clock = ClockAtForwardPasses(llm)
    monkeypatch.setattr(deadline, "time", clock)
    files = parse_unified_diff(
        "diff --git a/app/a.py b/app/a.py\n--- a/app/a.py\n+++ b/app/a.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
    )
    with deadline.model_deadline(3.5):
        z, source, note = generate_strategy(llm, s1="a change", files=files, config=RepoConfig())
    assert source == "fallback" and z.plan, note
    assert note is not None and "deadline passed during this generation" in note
    assert clock.passes == 4
