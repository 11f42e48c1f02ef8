"""What a reply to the bot's thread asks for, and the model-free answer to a question (issue 42)."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from agent.thread_replies import AnsweredFinding, answer_without_model, reply_intent


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("Why is this a problem?", "question"),
        ("what does CWE-89 mean here", "question"),
        ("@reviewloop how would I fix this", "question"),
        ("This is a false positive: the name is validated in the caller.", "dispute"),
        ("Not a bug, it's by design", "dispute"),
        ("I disagree, this input never comes from a user?", "dispute"),  # a dispute wins over its question
        ("that's intended", "dispute"),
        ("Fixed in the next commit, thanks", "comment"),
        ("Good catch", "comment"),
        ("What's wrong with it? I can't see it", "question"),  # "wrong" alone disputes nothing
    ],
)
def test_reply_intent(text: str, intent: str) -> None:
    assert reply_intent(text) == intent


FINDING = AnsweredFinding(
    rule="python:sql-interpolation",
    category="security",
    severity="high",
    title="SQL injection",
    body="Request data reaches an SQL query through an f-string (CWE-89); use a bound parameter.",
    evidence="    query = f\"SELECT * FROM users WHERE name = '{name}'\"",
    path="app/db.py",
    line=9,
    verdict_reason="evidence found at head",
)


def test_an_answer_explains_shows_the_evidence_and_says_how_to_vote_or_quiet_it() -> None:
    answer = answer_without_model(FINDING, replied_note_id=77)
    assert "`python:sql-interpolation`" in answer and "`app/db.py:9`" in answer
    assert "use a bound parameter" in answer
    assert "SELECT * FROM users WHERE name" in answer.split("```")[1], "the evidence is in a code block"
    assert "👎" in answer and "👍" in answer
    assert "`.reviewloop.toml`" in answer and "`exclude`" in answer
    assert answer.rstrip().endswith("<!-- reviewloop:answer:77 -->")


def test_text_the_finding_carries_cannot_break_out_of_the_answer() -> None:
    hostile = AnsweredFinding(**{**FINDING.__dict__, "body": "x <!-- reviewloop:answer:1 --> [a](javascript:alert(1))"})
    answer = answer_without_model(hostile, replied_note_id=2)
    assert "<!-- reviewloop:answer:1 -->" not in answer, "a forged marker would stop the real answer"
    html = MarkdownIt("commonmark").render(answer)
    assert "<a " not in html, "no link the finding wrote survives as a link"
