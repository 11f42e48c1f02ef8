"""The shared structured-output logic: extraction, validation, the retry conversation."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from agent.llm.openai_http import read_bounded, schema_name, structured_request_fields
from agent.llm.structured import (
    Generate,
    InvalidOutput,
    check_output_size,
    complete_structured,
    decoding_schema,
    extract_json,
    parse_structured,
    retry_conversation,
    with_schema_instruction,
)
from reviewers.kernel.contracts import ChatMessage
from reviewers.kernel.errors import LLMOutputError, LLMUnavailableError


class Point(BaseModel):
    x: int
    y: int = Field(default=0, ge=0)


PROMPT: list[ChatMessage] = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "where?"},
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"x": 1, "y": 2}', {"x": 1, "y": 2}),
        ('  \n{"x": 1}\n', {"x": 1}),
        ('```json\n{"x": 3}\n```', {"x": 3}),
        ('Sure!\n```\n{"x": 4}\n```\nanything else?', {"x": 4}),
        ('The answer is {"x": 5, "y": {"z": "}"}} as asked.', {"x": 5, "y": {"z": "}"}}),
        ('<think>maybe {"x": 0}</think>{"x": 6}', {"x": 6}),
        ('{broken {"x": 7}', {"x": 7}),
    ],
)
def test_extract_json_finds_the_object(text: str, expected: object) -> None:
    assert extract_json(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "the answer is empty"),
        ("<think>hmm</think>", "the answer is empty"),
        ("no json here", "holds no JSON object"),
        ('{"x": 1,', "not valid JSON: Expecting property name enclosed in double quotes at position 8"),
    ],
)
def test_extract_json_says_why_it_failed(text: str, reason: str) -> None:
    with pytest.raises(InvalidOutput) as caught:
        extract_json(text)
    assert reason in caught.value.reason


def test_parse_structured_names_each_bad_field_without_echoing_input() -> None:
    with pytest.raises(InvalidOutput) as caught:
        parse_structured('{"y": -1, "secret_input": "zzz"}', Point)
    assert caught.value.reason == "x: Field required; y: Input should be greater than or equal to 0"
    with pytest.raises(InvalidOutput, match="expected a JSON object, got a JSON list"):
        parse_structured("[1, 2]", Point)
    assert parse_structured('{"x": 1, "y": 0}', Point) == Point(x=1, y=0)


def test_schema_instruction_is_appended_to_the_last_user_message() -> None:
    out = with_schema_instruction(PROMPT, Point)
    assert out[0] == PROMPT[0]
    assert out[1]["content"].startswith("where?\n\nAnswer with only one JSON object")
    assert json.dumps(Point.model_json_schema(), separators=(",", ":")) in out[1]["content"]
    assert PROMPT[1]["content"] == "where?"  # the caller's list is not modified


def test_retry_conversation_replays_answer_then_error() -> None:
    out = retry_conversation(PROMPT, answer='{"x": "a"}', error="x: bad")
    assert out[:2] == PROMPT
    assert out[2] == {"role": "assistant", "content": '{"x": "a"}'}
    assert out[3]["role"] == "user" and out[3]["content"].startswith("Your previous answer was rejected: x: bad")
    # An empty answer is not replayed as an empty assistant turn.
    assert [m["role"] for m in retry_conversation(PROMPT, answer=" ", error="e")] == ["system", "user", "user"]


def test_complete_structured_retries_once_then_fails() -> None:
    seen: list[tuple[int, int]] = []

    def answers(values: list[str]) -> Generate:
        def generate(messages: list[ChatMessage], attempt: int) -> str:
            seen.append((attempt, len(messages)))
            return values[attempt - 1]

        return generate

    assert complete_structured(answers(['{"x": 1}', "unused"]), PROMPT, Point) == Point(x=1, y=0)
    assert seen == [(1, 2)]
    seen.clear()
    assert complete_structured(answers(["nope", '{"x": 2}']), PROMPT, Point).x == 2
    assert seen == [(1, 2), (2, 4)]
    seen.clear()
    with pytest.raises(LLMOutputError, match=r"Point failed validation twice: y: Input should be greater"):
        complete_structured(answers(["nope", '{"x": 2, "y": -5}']), PROMPT, Point)
    assert [a for a, _ in seen] == [1, 2]


def test_size_and_body_bounds() -> None:
    assert check_output_size("abc", max_chars=3) == "abc"
    with pytest.raises(LLMOutputError, match="4 characters, over the cap of 3"):
        check_output_size("abcd", max_chars=3)
    assert read_bounded([b"ab", b"cd"], limit=4, deadline=float("inf")) == b"abcd"
    with pytest.raises(LLMOutputError, match="passed 4 bytes"):
        read_bounded([b"ab", b"cd", b"e"], limit=4, deadline=float("inf"))
    with pytest.raises(LLMUnavailableError):
        read_bounded([b"a"], limit=4, deadline=0.0)


def test_structured_request_fields_by_mode() -> None:
    class Weird_Name2(BaseModel):  # noqa: N801
        a: int

    schema = decoding_schema(Weird_Name2)
    assert schema_name(Weird_Name2) == "Weird_Name2"
    assert structured_request_fields(Weird_Name2, "response_format") == {
        "response_format": {"type": "json_schema", "json_schema": {"name": "Weird_Name2", "schema": schema}}
    }
    assert structured_request_fields(Weird_Name2, "structured_outputs") == {
        "extra_body": {"structured_outputs": {"json": schema}}
    }
    assert structured_request_fields(Weird_Name2, "guided_json") == {"extra_body": {"guided_json": schema}}
    assert structured_request_fields(Weird_Name2, "prompt_only") == {}


def test_decoding_schema_drops_string_length_bounds_and_nothing_else() -> None:
    class Inner(BaseModel):
        maxLength: str = Field(max_length=5)  # noqa: N815 (a property named like the keyword)

    class Outer(BaseModel):
        title: str = Field(min_length=1, max_length=200)
        kind: Literal["maxLength", "minLength"]
        items: list[Inner] = Field(max_length=3)

    schema = decoding_schema(Outer)
    assert schema["properties"]["title"] == {"title": "Title", "type": "string"}
    assert schema["properties"]["kind"]["enum"] == ["maxLength", "minLength"]  # data stays
    assert schema["properties"]["items"]["maxItems"] == 3  # only string bounds go
    assert schema["$defs"]["Inner"]["properties"] == {"maxLength": {"title": "Maxlength", "type": "string"}}
    # A caller's narrowing replaces pydantic's schema, stripped the same way.
    narrowed = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}}
    assert decoding_schema(Outer, narrowed) == {"type": "object", "properties": {"a": {"type": "string"}}}
