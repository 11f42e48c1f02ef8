"""Replies to the bot's threads get an answer or count as feedback (issue 42): a question in a finding's
thread is answered in that thread by a worker, once; a reply that disputes the finding is a 👎.
Real HTTP to the running service, real Postgres, a real worker, the real python-gitlab client on the
fake GitLab."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import gitlab
import psycopg
import pytest
from fakes.gitlab_hooks import hook_headers, note_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from pydantic import SecretStr
from service_harness import IID, PID, SECRET, LiveServer, drain_queue, post_hook, rows

from agent.gitlab.review import build_deps
from agent.service_settings import Settings
from agent.session import open_session
from api.worker import AnswerFunction, ReviewFunction, pipeline_answer_function

EVIDENCE = "    query = f\"SELECT * FROM users WHERE name = '{name}'\""


def open_thread(fake: FakeGitLab, dsn: str) -> tuple[str, int]:
    """The bot's thread on a stored finding, as the reporter leaves it: (discussion id, finding id)."""
    client = gitlab.Gitlab(fake.url, private_token=BOT_TOKEN)
    discussion = client.projects.get(PID).mergerequests.get(IID).discussions.create({"body": "**SQL injection**"})
    discussion_id, note_id = str(discussion.id), int(discussion.attributes["notes"][0]["id"])
    with psycopg.connect(dsn) as conn:
        review = conn.execute(
            "INSERT INTO reviews (source, project, mr_iid, head_sha, status, title)"
            " VALUES ('gitlab', %s, %s, %s, 'done', 'Change f') RETURNING id",
            (str(PID), IID, uuid.uuid4().hex),
        ).fetchone()
        assert review is not None
        finding = conn.execute(
            """
            INSERT INTO findings (review_id, fingerprint, path, line, end_line, category, severity, title, body,
                                  evidence, reviewer, rule, verdict, verdict_reason, discussion_id, note_id,
                                  posted_at)
            VALUES (%s, %s, 'app/db.py', 9, 9, 'security', 'high', 'SQL injection',
                    'Request data reaches an SQL query through an f-string (CWE-89); use a bound parameter.',
                    %s, 'security', 'python:sql-interpolation', 'REAL', 'evidence found at head', %s, %s, now())
            RETURNING id
            """,
            (review[0], uuid.uuid4().hex, EVIDENCE, discussion_id, note_id),
        ).fetchone()
        assert finding is not None
    return discussion_id, int(finding[0])


@pytest.fixture
def answer(service_dsn: str, fake: FakeGitLab) -> Iterator[AnswerFunction]:
    """The worker's answering function as `reviewloop worker` builds it (no model configured)."""
    settings = Settings(database_url=service_dsn, gitlab_url=fake.url, gitlab_token=SecretStr(BOT_TOKEN))
    session = open_session(settings, tracing=False)
    try:
        yield pipeline_answer_function(build_deps(settings, pool=session.pool, dsn=session.dsn, llm=None))
    finally:
        session.close()


def no_review(**kwargs: Any) -> int:
    raise AssertionError(f"no review was asked for: {kwargs}")


def reply(service: LiveServer, fake: FakeGitLab, discussion_id: str, text: str) -> dict[str, Any]:
    note = fake.reply(PID, IID, discussion_id, text)
    answer = post_hook(service.url, note_hook(fake, PID, IID, note.id), hook_headers("Note Hook", token=SECRET))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def bot_notes(fake: FakeGitLab, discussion_id: str) -> list[str]:
    [thread] = [d for d in fake.discussions(PID, IID) if d.id == discussion_id]
    return [n.body for n in thread.notes if n.author.id == fake.bot.id]


def test_a_question_in_our_thread_is_answered_there_once(
    service: LiveServer, service_dsn: str, fake: FakeGitLab, answer: AnswerFunction
) -> None:
    discussion_id, _finding_id = open_thread(fake, service_dsn)
    accepted = reply(service, fake, discussion_id, "Why is this a problem? The name comes from our own form.")
    assert accepted["status"] == "processed" and "answer queued" in accepted["reason"], accepted
    review: ReviewFunction = no_review
    drain_queue(service_dsn, review, answer=answer)
    notes = bot_notes(fake, discussion_id)
    assert len(notes) == 2, notes  # the finding, then the answer
    answer_text = notes[1]
    assert "`python:sql-interpolation`" in answer_text and "use a bound parameter" in answer_text
    assert "SELECT * FROM users WHERE name" in answer_text  # the evidence
    assert "👎" in answer_text and "`.reviewloop.toml`" in answer_text  # how to vote or make it quiet
    # the same reply delivered again (GitLab retries) and the worker run again: still one answer
    note_id = max(
        n.id for d in fake.discussions(PID, IID) if d.id == discussion_id for n in d.notes if n.author.id != fake.bot.id
    )
    again = post_hook(service.url, note_hook(fake, PID, IID, note_id), hook_headers("Note Hook", token=SECRET))
    assert again.status_code == 200
    drain_queue(service_dsn, review, answer=answer)
    assert len(bot_notes(fake, discussion_id)) == 2
    # a comment is not answered
    reply(service, fake, discussion_id, "Thanks, fixed in the next commit")
    drain_queue(service_dsn, review, answer=answer)
    assert len(bot_notes(fake, discussion_id)) == 2


def test_a_reply_that_disputes_the_finding_is_a_thumbs_down(
    service: LiveServer, service_dsn: str, fake: FakeGitLab, answer: AnswerFunction
) -> None:
    discussion_id, finding_id = open_thread(fake, service_dsn)
    result = reply(service, fake, discussion_id, "This is a false positive: the name is validated in the caller.")
    assert result["status"] == "processed" and "answer queued" not in result["reason"]
    [(finding, source, value, comment)] = rows(
        service_dsn, "SELECT finding_id, source, value, comment FROM feedback ORDER BY id"
    )
    assert (finding, source, value) == (finding_id, "reply", -1)
    assert comment.startswith("This is a false positive")
    drain_queue(service_dsn, no_review, answer=answer)
    assert len(bot_notes(fake, discussion_id)) == 1, "a dispute is recorded, not argued with"
