"""The worker on a real procrastinate queue: retries only for retryable errors, with backoff; one
running review per MR; stalled-job recovery; SIGKILL and SIGTERM of a real worker process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import FakeGitLab
from service_harness import (
    FAST_QUEUE,
    IID,
    METRICS,
    PID,
    SECRET,
    BackgroundWorker,
    LiveServer,
    RecordingReview,
    drain_queue,
    post_hook,
    rows,
    scalar,
    wait_for,
)

from api.db import make_pool
from api.worker import backoff_seconds, create_queue_app, recover_stalled_jobs, will_retry
from reviewers.kernel.errors import InputError, PlatformUnavailableError, StoreError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def queue_review(service: LiveServer, fake: FakeGitLab, **hook: Any) -> dict[str, Any]:
    answer = post_hook(
        service.url, merge_request_hook(fake, PID, IID, **hook), hook_headers("Merge Request Hook", token=SECRET)
    )
    assert answer.status_code == 202, answer.text
    data: dict[str, Any] = answer.json()
    return data


def job_state(dsn: str, job_id: int) -> tuple[str, int, float]:
    status, attempts, delay = rows(
        dsn,
        "SELECT status::text, attempts, extract(epoch FROM scheduled_at - now())::float8"
        " FROM procrastinate_jobs WHERE id = %s",
        job_id,
    )[0]
    return status, attempts, delay or 0.0


def event_state(dsn: str, event_id: int) -> tuple[str, str]:
    status, reason = rows(dsn, "SELECT status, reason FROM webhook_events WHERE id = %s", event_id)[0]
    return status, reason


def test_retry_policy_reads_the_retryable_flag() -> None:
    assert [backoff_seconds(n, base_s=5) for n in range(4)] == [5, 10, 20, 40]
    assert will_retry(PlatformUnavailableError("429"), attempts=0, max_attempts=3)
    assert will_retry(StoreError("down"), attempts=1, max_attempts=3)
    assert not will_retry(StoreError("down"), attempts=2, max_attempts=3)  # the third run was the last
    assert not will_retry(InputError("bad diff"), attempts=0, max_attempts=3)
    assert not will_retry(InputError("x", retryable=True), attempts=3, max_attempts=3)
    assert will_retry(InputError("x", retryable=True), attempts=0, max_attempts=3)
    assert not will_retry(RuntimeError("bug"), attempts=0, max_attempts=3)


def test_retryable_errors_are_retried_with_backoff_then_succeed(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    queued = queue_review(service, fake, action="open")
    review = RecordingReview(service_dsn, failures=[PlatformUnavailableError("GitLab answered 503")])
    drain_queue(service_dsn, review)
    status, attempts, delay = job_state(service_dsn, queued["job_id"])
    assert (status, attempts) == ("todo", 1)
    assert 0 < delay <= FAST_QUEUE.backoff_base_s  # first retry waits backoff_base_s * 2**0
    assert event_state(service_dsn, queued["event_id"])[0] == "queued"  # not failed: a retry follows
    time.sleep(delay + 0.2)
    drain_queue(service_dsn, review)
    # procrastinate counts runs in `attempts`: the failed one and the successful one
    assert job_state(service_dsn, queued["job_id"])[:2] == ("succeeded", 2)
    assert event_state(service_dsn, queued["event_id"]) == (
        "processed",
        f"review {scalar(service_dsn, 'SELECT id FROM reviews')}",
    )
    assert len(review.calls) == 2


def test_errors_not_marked_retryable_fail_at_once_and_visibly(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    queued = queue_review(service, fake, action="open")
    review = RecordingReview(service_dsn, failures=[InputError("the diff does not parse", project=str(PID))])
    drain_queue(service_dsn, review)
    assert job_state(service_dsn, queued["job_id"])[:2] == ("failed", 1)  # one run, no retry
    status, reason = event_state(service_dsn, queued["event_id"])
    assert status == "failed" and "the diff does not parse" in reason
    text = __import__("httpx").get(f"{service.url}/metrics", headers=METRICS, timeout=10).text
    assert 'reviewloop_queue_jobs{status="failed"} 1.0' in text


def test_retryable_errors_stop_after_max_attempts(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    queued = queue_review(service, fake, action="open")
    review = RecordingReview(service_dsn, failures=[StoreError("Postgres restarting")] * FAST_QUEUE.max_attempts)
    for _ in range(FAST_QUEUE.max_attempts):
        with psycopg.connect(service_dsn) as conn:  # skip the backoff wait
            conn.execute("UPDATE procrastinate_jobs SET scheduled_at = now() WHERE id = %s", (queued["job_id"],))
        drain_queue(service_dsn, review)
    assert len(review.calls) == FAST_QUEUE.max_attempts
    assert job_state(service_dsn, queued["job_id"])[0] == "failed"
    assert event_state(service_dsn, queued["event_id"])[0] == "failed"


def test_one_running_review_per_merge_request(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    review = RecordingReview(service_dsn, delay_s=1.5)
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}

    def timed(*, project: str, mr_iid: int, head_sha: str | None, event_id: int | None) -> int:
        starts[str(head_sha)] = time.monotonic()
        try:
            return review(project=project, mr_iid=mr_iid, head_sha=head_sha, event_id=event_id)
        finally:
            ends[str(head_sha)] = time.monotonic()

    with BackgroundWorker(service_dsn, timed, concurrency=2):
        first = queue_review(service, fake, action="open")
        wait_for(lambda: job_state(service_dsn, first["job_id"])[0] == "doing", what="first review running")
        old_head = fake.merge_request(PID, IID).latest.head_sha
        new_head = fake.push(PID, IID, {"app.py": "def f():\n    return 9\n"})
        second = queue_review(service, fake, action="update", oldrev=old_head)
        # the running review is not superseded; the new one waits for the MR's lock
        assert job_state(service_dsn, second["job_id"])[0] == "todo"
        wait_for(lambda: job_state(service_dsn, second["job_id"])[0] == "succeeded", what="second review")
    assert ends[old_head] <= starts[new_head]
    assert job_state(service_dsn, first["job_id"])[0] == "succeeded"


def test_stalled_job_of_a_dead_worker_is_retried(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    queued = queue_review(service, fake, action="open")
    with psycopg.connect(service_dsn) as conn:  # a worker took the job, then stopped beating
        (worker_id,) = conn.execute("SELECT procrastinate_register_worker_v1()").fetchone() or (None,)
        conn.execute("UPDATE procrastinate_workers SET last_heartbeat = now() - interval '10 minutes'")
        conn.execute(
            "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s WHERE id = %s",
            (worker_id, queued["job_id"]),
        )
    review = RecordingReview(service_dsn)
    drain_queue(service_dsn, review)  # a starting worker prunes the dead one and recovers its job
    assert len(review.calls) == 1
    assert job_state(service_dsn, queued["job_id"])[:2] == ("succeeded", 2)  # the dead run and this one
    assert event_state(service_dsn, queued["event_id"])[0] == "processed"


def test_stalled_job_superseded_by_a_newer_push_is_failed_not_retried(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    first = queue_review(service, fake, action="open")
    with psycopg.connect(service_dsn) as conn:
        conn.execute(
            "UPDATE procrastinate_jobs SET status = 'doing', worker_id = NULL WHERE id = %s", (first["job_id"],)
        )
    old_head = fake.merge_request(PID, IID).latest.head_sha
    fake.push(PID, IID, {"app.py": "def f():\n    return 5\n"})
    second = queue_review(service, fake, action="update", oldrev=old_head)

    async def recover() -> list[int]:
        pool = make_pool(service_dsn, max_size=2)
        await pool.open(wait=True)
        queue = create_queue_app(FAST_QUEUE)
        await queue.open_async(pool)
        try:
            return await recover_stalled_jobs(queue, seconds_since_heartbeat=1, max_attempts=FAST_QUEUE.max_attempts)
        finally:
            await queue.close_async()
            await pool.close()

    assert asyncio.run(recover()) == []
    assert job_state(service_dsn, first["job_id"])[0] == "failed"
    assert job_state(service_dsn, second["job_id"])[0] == "todo"


def start_worker_process(dsn: str, seconds: float, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REVIEW_LOG": str(log), "PYTHONPATH": f"{REPO}{os.pathsep}{HERE}"}
    return subprocess.Popen([sys.executable, str(HERE / "worker_process.py"), dsn, str(seconds)], env=env)


def test_worker_killed_mid_review_is_recovered_by_another(
    service: LiveServer, service_dsn: str, fake: FakeGitLab, tmp_path: Path
) -> None:
    log = tmp_path / "reviews.log"
    queued = queue_review(service, fake, action="open")
    victim = start_worker_process(service_dsn, 60, log)
    try:
        wait_for(lambda: log.exists() and "start" in log.read_text(), timeout=60, what="the review to start")
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            victim.kill()
    assert job_state(service_dsn, queued["job_id"])[0] == "doing"  # orphaned: nobody will finish it
    rescuer = start_worker_process(service_dsn, 0, log)
    try:
        wait_for(
            lambda: job_state(service_dsn, queued["job_id"])[0] == "succeeded", timeout=90, what="the recovered review"
        )
    finally:
        rescuer.send_signal(signal.SIGTERM)
        rescuer.wait(timeout=30)
    lines = log.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["start", "start", "end"]
    assert lines[0].split()[1] == str(victim.pid) and lines[1].split()[1] == str(rescuer.pid)
    assert scalar(service_dsn, "SELECT count(*) FROM reviews") == 1
    assert event_state(service_dsn, queued["event_id"])[0] == "processed"


def test_sigterm_lets_the_running_review_finish(
    service: LiveServer, service_dsn: str, fake: FakeGitLab, tmp_path: Path
) -> None:
    log = tmp_path / "reviews.log"
    queued = queue_review(service, fake, action="open")
    worker = start_worker_process(service_dsn, 2, log)
    try:
        wait_for(lambda: log.exists() and "start" in log.read_text(), timeout=60, what="the review to start")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["start", "end"]
    assert job_state(service_dsn, queued["job_id"])[0] == "succeeded"
    assert scalar(service_dsn, "SELECT count(*) FROM procrastinate_workers") == 0  # unregistered on the way out
