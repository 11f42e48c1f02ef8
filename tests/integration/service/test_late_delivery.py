"""The event history when GitLab delivers an older push's event late (issue 40): through the running
service (webhook over HTTP, real Postgres, a real procrastinate worker, the GitLab fake over HTTP).
The late event supersedes the newer push's pending review at intake, and its own job reviews the
newest head: neither event may then claim what did not happen."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from pydantic import SecretStr
from service_harness import IID, PID, SECRET, LiveServer, drain_queue, post_hook, rows

from agent.gitlab.review import build_deps
from agent.service_settings import Settings
from agent.session import open_session
from api.worker import ReviewFunction, pipeline_review_function

BASE = {"app/__init__.py": ""}
HEAD = {**BASE, "app/util.py": "def double(x):\n    return 2 * x\n"}


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        server.add_project(PID, "team/late")
        server.add_merge_request(PID, IID, files_base=BASE, files_head=HEAD, title="Helpers")
        yield server


@pytest.fixture
def review(service_dsn: str, gitlab: FakeGitLab) -> Iterator[ReviewFunction]:
    settings = Settings(database_url=service_dsn, gitlab_url=gitlab.url, gitlab_token=SecretStr(BOT_TOKEN))
    session = open_session(settings, tracing=False)
    try:
        yield pipeline_review_function(build_deps(settings, pool=session.pool, dsn=session.dsn, llm=None))
    finally:
        session.close()


def deliver(service: LiveServer, body: dict[str, Any]) -> dict[str, Any]:
    answer = post_hook(service.url, body, hook_headers("Merge Request Hook", token=SECRET))
    assert answer.status_code == 202, answer.text
    data: dict[str, Any] = answer.json()
    return data


def test_a_late_delivery_of_an_older_push_is_labelled_as_what_happened(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab, review: ReviewFunction
) -> None:
    first = gitlab.merge_request(PID, IID).latest.head_sha
    older = gitlab.push(
        PID, IID, {**HEAD, "app/util.py": HEAD["app/util.py"] + "\n\ndef triple(x):\n    return 3 * x\n"}
    )
    older_hook = merge_request_hook(gitlab, PID, IID, action="update", oldrev=first)  # names head `older`
    newest = gitlab.push(
        PID, IID, {**HEAD, "app/util.py": HEAD["app/util.py"] + "\n\ndef half(x):\n    return x / 2\n"}
    )
    newer = deliver(service, merge_request_hook(gitlab, PID, IID, action="update", oldrev=older))
    late = deliver(service, older_hook)  # GitLab's retry of the older push's event arrives last
    drain_queue(service_dsn, review)

    [(newer_status, newer_reason)] = rows(
        service_dsn, "SELECT status, reason FROM webhook_events WHERE id = %s", newer["event_id"]
    )
    [(late_status, late_reason, late_head)] = rows(
        service_dsn, "SELECT status, reason, head_sha FROM webhook_events WHERE id = %s", late["event_id"]
    )
    [(review_id, reviewed)] = rows(service_dsn, "SELECT id, head_sha FROM reviews WHERE status = 'done'")
    assert late_head == older and reviewed == newest
    assert newer_status == "ignored" and "a newer push" not in newer_reason, newer_reason
    assert f"a late delivery of an older push (head {older[:12]})" in newer_reason
    assert f"reviewed the newest head {newest[:12]}" in newer_reason
    assert late_status == "processed"
    assert (
        late_reason == f"review {review_id} of the newest head {newest[:12]} (this event's head {older[:12]} is older)"
    )
