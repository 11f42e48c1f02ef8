"""`Retry-After` from GitLab, as python-gitlab meets it through our client (issue 40, low items).

At 2a83aab an HTTP-date `Retry-After` (RFC 9110 allows it; proxies send it) made python-gitlab's
`int()` raise, which failed the review for good; a number was slept however large. Real HTTP to the
GitLab fake with python-gitlab."""

from __future__ import annotations

import time
from collections.abc import Iterator
from email.utils import formatdate

import pytest
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab

from agent.gitlab import client
from agent.gitlab.client import GitLabPlatform, retry_after_seconds

PID, IID = 42, 7


@pytest.fixture
def fake() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        server.add_project(PID, "team/app")
        server.add_merge_request(PID, IID, files_base={"a.py": "x = 1\n"}, files_head={"a.py": "x = 2\n"})
        yield server


def statuses(fake: FakeGitLab) -> list[int]:
    return [r.status for r in fake.requests if r.path.endswith(f"/merge_requests/{IID}")]


def test_an_http_date_retry_after_is_waited_for_then_retried(fake: FakeGitLab) -> None:
    fake.fail_next(rf"/merge_requests/{IID}$", 429, count=1, retry_after=formatdate(time.time() + 1, usegmt=True))
    platform = GitLabPlatform(fake.url, BOT_TOKEN)
    started = time.monotonic()
    assert platform.merge_request(PID, IID).iid == IID
    assert time.monotonic() - started < 5
    assert statuses(fake) == [429, 200]


def test_a_large_retry_after_is_capped(fake: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "MAX_RETRY_AFTER_S", 1)  # the cap, made short enough to wait for here
    fake.fail_next(rf"/merge_requests/{IID}$", 503, count=1, retry_after=86_400)
    platform = GitLabPlatform(fake.url, BOT_TOKEN)
    started = time.monotonic()
    assert platform.merge_request(PID, IID).iid == IID  # at 2a83aab: a day's sleep
    assert 0.9 <= time.monotonic() - started < 5
    assert statuses(fake) == [503, 200]


def test_retry_after_seconds_reads_both_forms_and_caps() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds("7", now=now) == 7
    assert retry_after_seconds(formatdate(now + 30, usegmt=True), now=now) == 30
    assert retry_after_seconds(formatdate(now - 30, usegmt=True), now=now) == 0  # a date past: at once
    assert retry_after_seconds("99999999", now=now) == client.MAX_RETRY_AFTER_S
    assert retry_after_seconds("soon", now=now) is None
    assert retry_after_seconds("-5", now=now) is None
