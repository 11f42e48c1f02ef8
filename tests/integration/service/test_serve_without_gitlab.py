"""The first hour: `serve` starts without GitLab (the dashboard says what to configure, reviews wait
in the queue), and a review that failed shows on the dashboard with its reason and can be retried."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import httpx
import pytest
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import FakeGitLab
from service_harness import (
    API_TOKEN,
    IID,
    PID,
    SECRET,
    LiveServer,
    RecordingReview,
    drain_queue,
    post_hook,
    scalar,
    wait_for,
)
from test_service_cli import free_port, ready_workers, start_cli, worker_children

from reviewers.kernel.errors import PlatformError, PlatformUnavailableError

BEARER = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.mark.slow
def test_serve_starts_without_gitlab_and_reviews_wait(db_dsn: str, fake: FakeGitLab, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "REVIEWLOOP_DATABASE_URL": db_dsn,
        "REVIEWLOOP_WEBHOOK_SECRET": SECRET,
        "REVIEWLOOP_API_TOKENS": f"ci:{API_TOKEN}",
    }
    for name in ("REVIEWLOOP_GITLAB_URL", "REVIEWLOOP_GITLAB_TOKEN", "REVIEWLOOP_LLM_MODEL_PATH"):
        env.pop(name, None)
    log = tmp_path / "serve.log"
    proc = start_cli(["serve", "--port", str(port)], env=env, log=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: ready_workers(port) == 1, timeout=120, what="/readyz with the worker")
        assert len(worker_children(proc.pid)) == 1
        dashboard = httpx.get(f"{url}/dashboard", headers=BEARER, timeout=10)
        assert dashboard.status_code == 200
        text = " ".join(dashboard.text.split())
        assert "GitLab is not configured" in text and "REVIEWLOOP_GITLAB_URL" in text
        # a merge-request event is accepted and its review waits for a worker that can reach GitLab
        queued = post_hook(
            url, merge_request_hook(fake, PID, IID, action="open"), hook_headers("Merge Request Hook", token=SECRET)
        )
        assert queued.status_code == 202, queued.text
        job_id = queued.json()["job_id"]
        assert proc.poll() is None
        assert scalar(db_dsn, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", job_id) == "todo"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    output = log.read_text()
    assert "GitLab is not configured: merge-request reviews wait in the queue" in output
    assert scalar(db_dsn, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", job_id) == "todo"


def failures_table(html: str) -> str:
    match = re.search(r'<section class="failures">(.*?)</section>', html, re.S)
    return match.group(1) if match else ""


def test_a_failed_review_shows_with_its_reason_and_is_retried(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    queued = post_hook(
        service.url,
        merge_request_hook(fake, PID, IID, action="open"),
        hook_headers("Merge Request Hook", token=SECRET),
    )
    assert queued.status_code == 202, queued.text
    event_id = queued.json()["event_id"]
    # one retryable failure, then one that is not: the queue gives up after the second attempt
    review = RecordingReview(
        service_dsn,
        failures=[
            PlatformUnavailableError("GitLab could not be reached"),
            PlatformError("GitLab refused the bot token (401)"),
        ],
    )
    drain_queue(service_dsn, review)  # runs the ready job once; its retry is scheduled a second later
    assert len(review.calls) == 1
    rows_html = failures_table(httpx.get(f"{service.url}/dashboard", headers=BEARER, timeout=10).text)
    assert f'id="failure-{event_id}"' in rows_html and "retrying" in rows_html
    assert "GitLab could not be reached" in rows_html
    assert "Retry</button>" not in rows_html  # a retry is already scheduled

    def second_attempt_ran() -> bool:
        drain_queue(service_dsn, review)
        return len(review.calls) >= 2

    wait_for(second_attempt_ran, timeout=30, what="the second attempt")
    rows_html = failures_table(httpx.get(f"{service.url}/dashboard", headers=BEARER, timeout=10).text)
    assert f'id="failure-{event_id}"' in rows_html
    assert "GitLab refused the bot token (401)" in rows_html
    assert re.search(r'<td class="num">\s*2\s*</td>', rows_html), rows_html  # two attempts
    assert "Retry</button>" in rows_html

    retried = httpx.post(
        f"{service.url}/dashboard/failures/{event_id}/retry",
        headers=BEARER,
        data={"go": "1"},
        timeout=10,
        follow_redirects=False,
    )
    assert retried.status_code == 303, retried.text
    assert scalar(service_dsn, "SELECT status FROM webhook_events WHERE id = %s", event_id) == "queued"
    drain_queue(service_dsn, review)  # the cause is gone now: the retry succeeds
    assert scalar(service_dsn, "SELECT status FROM webhook_events WHERE id = %s", event_id) == "processed"
    assert scalar(service_dsn, "SELECT count(*) FROM reviews WHERE mr_iid = %s", IID) == 1
    page = httpx.get(f"{service.url}/dashboard", headers=BEARER, timeout=10)
    assert f'id="failure-{event_id}"' not in failures_table(page.text)
    again = httpx.post(
        f"{service.url}/dashboard/failures/{event_id}/retry", headers=BEARER, data={"go": "1"}, timeout=10
    )
    assert again.status_code == 409  # nothing failed to retry any more


def test_the_cli_lists_and_retries_failed_reviews(
    service: LiveServer, service_dsn: str, fake: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from api.cli import app

    queued = post_hook(
        service.url, merge_request_hook(fake, PID, IID, action="open"), hook_headers("Merge Request Hook", token=SECRET)
    )
    event_id = queued.json()["event_id"]
    drain_queue(service_dsn, RecordingReview(service_dsn, failures=[PlatformError("GitLab answered 404")]))
    monkeypatch.setenv("REVIEWLOOP_DATABASE_URL", service_dsn)
    runner = CliRunner()
    listed = runner.invoke(app, ["reviews", "failed"])
    assert listed.exit_code == 0, listed.output
    assert f"event {event_id}" in listed.output and "GitLab answered 404" in listed.output
    assert "attempts 1" in listed.output
    retried = runner.invoke(app, ["reviews", "retry", str(event_id)])
    assert retried.exit_code == 0, retried.output
    assert "queued again" in retried.output
    twice = runner.invoke(app, ["reviews", "retry", str(event_id)])  # it is waiting now, not failed
    assert twice.exit_code == 2 and "not a failed review" in twice.output
    unknown = runner.invoke(app, ["reviews", "retry", "999999"])
    assert unknown.exit_code == 2 and "not a failed review" in unknown.output
