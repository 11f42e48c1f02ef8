"""The JSON cursor that holds bounded strings to their `maxLength` outside the grammar: which string
a sequence is in, how many characters it has written, and which tokens still fit."""

from __future__ import annotations

from agent.llm.grammar import JsonCursor, TokenBytes, string_bounds
from agent.strategy_schema import strategy_json_schema
from reviewers.tool_schema import tool_call_json_schema


def test_bounds_are_read_by_property_name_the_smaller_one_winning() -> None:
    schema = {
        "anyOf": [
            {"type": "object", "properties": {"title": {"type": "string", "maxLength": 9}, "n": {"type": "integer"}}},
            {"type": "object", "properties": {"title": {"type": "string", "maxLength": 4}, "tags": {"enum": ["a"]}}},
        ]
    }
    assert string_bounds(schema) == {"title": 4}
    assert string_bounds(tool_call_json_schema(paths=["a.py"])) == {
        "pattern": 200,
        "title": 120,
        "body": 400,
        "evidence": 240,
    }
    assert string_bounds(strategy_json_schema(["a.py"])) == {"checks": 100, "why": 80, "stop_condition": 80}


def test_the_cursor_counts_characters_of_bounded_values_only() -> None:
    cursor = JsonCursor({"title": 5, "path": 3})
    cursor.feed(b'{"path":["x.py","y')  # an array's strings are not the property's value
    assert cursor.chars_left is None
    cursor.feed(b'"],"title":"h\xc3\xa9')  # é is one character in two bytes
    assert cursor.chars_left == 3
    cursor.feed(b'llo"')
    assert cursor.chars_left is None and cursor.last_key == "title"
    cursor.feed(b',"body":"')
    assert cursor.chars_left is None  # not bounded


def test_only_tokens_that_fit_are_allowed_and_escapes_never() -> None:
    vocab = [b"<eos>", b'"', b'",', b"ab", b"abc", b'a"}', b"\\n", b"\xa9", b"\xc3\xa9x"]
    tokens = TokenBytes.of(vocab, vocab_size=len(vocab) + 1, stop_token_ids=[0])
    allowed = {vocab[i] for i, ok in enumerate(tokens.fitting(2).tolist()[: len(vocab)]) if ok}
    assert allowed == {b"<eos>", b'"', b'",', b"ab", b'a"}', b"\xa9", b"\xc3\xa9x"}
    at_bound = {vocab[i] for i, ok in enumerate(tokens.fitting(0).tolist()[: len(vocab)]) if ok}
    assert at_bound == {b"<eos>", b'"', b'",', b"\xa9"}  # close, or finish a split character
