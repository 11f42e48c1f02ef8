"""GitLab unreachable (connection refused) while reviews are queued, under a real procrastinate
worker running the real review flow.

GitLab sits behind a TCP gate that the test closes and opens on the same port. Down for a while:
each run fails with a retryable error, the queue retries it with exponential backoff, and the run
after GitLab is back posts the review, each finding once. Down for good: after the last attempt the
job fails, and says so where an operator looks (job status, the webhook event and its reason, the
queue metric), with nothing half-posted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from fault_harness import FINDING_LINES, IID, PID, TcpGate, positioned_lines, posted_fingerprints, summary_notes
from pydantic import SecretStr
from service_harness import METRICS, SECRET, BackgroundWorker, LiveServer, post_hook, rows, scalar, wait_for

from agent.gitlab.client import GitLabPlatform
from agent.gitlab.review import build_deps
from agent.service_settings import Settings
from agent.session import open_session
from api.worker import QueueConfig, ReviewFunction, pipeline_review_function

# quick backoff (1 s, 2 s, 4 s) and a short stall timeout, so the test takes seconds
QUEUE = QueueConfig(backoff_base_s=1, max_attempts=3, stalled_worker_timeout_s=5, heartbeat_interval_s=1)
CLIENT_RETRIES = 2  # python-gitlab's own retries of a refused connection before the job sees it (0.1 s, 0.2 s)


@pytest.fixture
def gate(gitlab: FakeGitLab) -> Iterator[TcpGate]:
    """Closed at first: nothing listens on GitLab's port."""
    port = int(gitlab.url.rsplit(":", 1)[1])
    gate = TcpGate(port)
    yield gate
    gate.close()


@pytest.fixture
def review(queue_dsn: str, gate: TcpGate) -> Iterator[ReviewFunction]:
    """The worker's review function as `reviewloop worker` builds it, reaching GitLab through the gate."""
    settings = Settings(database_url=queue_dsn, gitlab_url=gate.url, gitlab_token=SecretStr(BOT_TOKEN))
    session = open_session(settings, tracing=False)
    try:
        deps = build_deps(settings, pool=session.pool, dsn=session.dsn, llm=None)
        platform = GitLabPlatform(gate.url, BOT_TOKEN, max_retries=CLIENT_RETRIES)
        yield pipeline_review_function(dataclasses.replace(deps, platform=platform))
    finally:
        session.close()


def deliver(service: LiveServer, gitlab: FakeGitLab) -> dict[str, Any]:
    answer = post_hook(
        service.url,
        merge_request_hook(gitlab, PID, IID, action="open"),
        hook_headers("Merge Request Hook", token=SECRET),
    )
    assert answer.status_code == 202, answer.text
    queued: dict[str, Any] = answer.json()
    return queued


def job_events(dsn: str, job_id: int) -> list[tuple[str, datetime]]:
    """The job's state transitions in order (procrastinate also logs when a retry is `scheduled`)."""
    found = rows(
        dsn,
        "SELECT type::text, at FROM procrastinate_events WHERE job_id = %s AND type <> 'scheduled' ORDER BY id",
        job_id,
    )
    return [(str(kind), at) for kind, at in found]


def failed_runs(dsn: str, job_id: int) -> int:
    return sum(1 for kind, _ in job_events(dsn, job_id) if kind == "deferred_for_retry")


def event_state(dsn: str, event_id: int) -> tuple[str, str | None]:
    status, reason = rows(dsn, "SELECT status, reason FROM webhook_events WHERE id = %s", event_id)[0]
    return status, reason


def test_gitlab_down_for_a_while_the_job_retries_with_backoff_and_succeeds(
    service: LiveServer, queue_dsn: str, gitlab: FakeGitLab, gate: TcpGate, review: ReviewFunction
) -> None:
    queued = deliver(service, gitlab)
    with BackgroundWorker(queue_dsn, review, config=QUEUE, concurrency=1):
        wait_for(lambda: failed_runs(queue_dsn, queued["job_id"]) == 2, timeout=60, what="two refused runs")
        # still owed a run: the event is not failed, and nothing reached GitLab
        assert event_state(queue_dsn, queued["event_id"])[0] == "queued"
        assert scalar(queue_dsn, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", queued["job_id"]) in (
            "todo",
            "doing",
        )
        assert gitlab.requests == []
        gate.open()
        wait_for(
            lambda: event_state(queue_dsn, queued["event_id"])[0] != "queued",
            timeout=60,
            what="the run after GitLab is back",
        )
    assert event_state(queue_dsn, queued["event_id"])[0] == "processed"
    assert (
        scalar(queue_dsn, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", queued["job_id"]) == "succeeded"
    )
    kinds = [kind for kind, _ in job_events(queue_dsn, queued["job_id"])]
    assert kinds == ["deferred", *["started", "deferred_for_retry"] * 2, "started", "succeeded"]
    # exponential backoff between the runs: 1 s after the first failure, 2 s after the second
    events = job_events(queue_dsn, queued["job_id"])
    retried = [at for kind, at in events if kind == "deferred_for_retry"]
    restarted = [at for kind, at in events if kind == "started"][1:]
    waits = [(start - failed).total_seconds() for failed, start in zip(retried, restarted, strict=True)]
    assert waits[0] >= QUEUE.backoff_base_s - 0.1 and waits[1] >= 2 * QUEUE.backoff_base_s - 0.1, waits

    assert scalar(queue_dsn, "SELECT count(*) FROM reviews WHERE status = 'done' AND NOT is_shadow") == 1
    assert FINDING_LINES <= set(positioned_lines(gitlab))
    assert set(posted_fingerprints(gitlab).values()) == {1} and summary_notes(gitlab) == 1


def test_gitlab_down_for_good_fails_the_job_visibly_after_its_retries(
    service: LiveServer, queue_dsn: str, gitlab: FakeGitLab, gate: TcpGate, review: ReviewFunction
) -> None:
    queued = deliver(service, gitlab)
    with BackgroundWorker(queue_dsn, review, config=QUEUE, concurrency=1):
        wait_for(
            lambda: event_state(queue_dsn, queued["event_id"])[0] != "queued", timeout=60, what="the job to give up"
        )
    kinds = [kind for kind, _ in job_events(queue_dsn, queued["job_id"])]
    assert kinds == ["deferred", *["started", "deferred_for_retry"] * (QUEUE.max_attempts - 1), "started", "failed"]
    assert scalar(queue_dsn, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", queued["job_id"]) == "failed"
    status, reason = event_state(queue_dsn, queued["event_id"])
    assert status == "failed"
    assert reason is not None and "GitLab could not be reached" in reason and BOT_TOKEN not in reason
    metrics = httpx.get(f"{service.url}/metrics", headers=METRICS, timeout=30).text
    assert 'reviewloop_queue_jobs{status="failed"} 1.0' in metrics
    assert gitlab.requests == [] and gitlab.discussions(PID, IID) == []
    assert scalar(queue_dsn, "SELECT count(*) FROM reviews WHERE status = 'done'") == 0
