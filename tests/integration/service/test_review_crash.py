"""A review that kills its process is one failed attempt, counted, and takes no other review down
(issue 40, M1). At 2a83aab a crashing review took its worker with it, every other review that worker
was running too, and the stalled-job recovery retried it without counting (attempts 0 → 7 against a
limit of 5). A real worker on a real queue, reviews in child processes, the service over HTTP."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import psycopg
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import FakeGitLab
from service_harness import BASE, FAST_QUEUE, HEAD, IID, PID, SECRET, BackgroundWorker, LiveServer, post_hook, rows
from service_harness import wait_for as wait_until

from api.db import make_pool
from api.review_child import ReviewInChild
from api.worker import create_queue_app, recover_stalled_jobs

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
OTHER_IID = IID + 1


def queue_review(service: LiveServer, fake: FakeGitLab, iid: int) -> dict[str, int]:
    answer = post_hook(
        service.url, merge_request_hook(fake, PID, iid), hook_headers("Merge Request Hook", token=SECRET)
    )
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


def job(dsn: str, job_id: int) -> tuple[str, int]:
    status, attempts = rows(dsn, "SELECT status::text, attempts FROM procrastinate_jobs WHERE id = %s", job_id)[0]
    return status, attempts


def event(dsn: str, event_id: int) -> tuple[str, str]:
    status, reason = rows(dsn, "SELECT status, reason FROM webhook_events WHERE id = %s", event_id)[0]
    return status, reason


def test_a_review_that_kills_its_process_fails_after_max_attempts_and_the_other_completes(
    service: LiveServer, service_dsn: str, fake: FakeGitLab, tmp_path: Path
) -> None:
    fake.add_merge_request(PID, OTHER_IID, files_base=BASE, files_head=HEAD, title="Another change")
    crashing = queue_review(service, fake, IID)
    other = queue_review(service, fake, OTHER_IID)
    log = tmp_path / "reviews.log"
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{HERE}",
        "REVIEW_LOG": str(log),
        "CRASH_MR_IID": str(IID),
        "REVIEWLOOP_DATABASE_URL": service_dsn,
    }
    review = ReviewInChild(command=[sys.executable, str(HERE / "crashing_review.py")], env=env)
    with BackgroundWorker(service_dsn, review, concurrency=2):
        wait_until(lambda: job(service_dsn, crashing["job_id"])[0] == "failed", what="the crashing review failed")
        wait_until(lambda: job(service_dsn, other["job_id"])[0] == "succeeded", what="the other review")
    assert job(service_dsn, crashing["job_id"]) == ("failed", FAST_QUEUE.max_attempts)
    status, reason = event(service_dsn, crashing["event_id"])
    assert status == "failed" and "the review process exited with code 9" in reason, reason
    starts = log.read_text(encoding="utf-8").split()
    assert starts.count(str(IID)) == FAST_QUEUE.max_attempts
    assert starts.count(str(OTHER_IID)) == 1  # run once: the crashes next to it did not touch it
    assert job(service_dsn, other["job_id"]) == ("succeeded", 1)  # one run
    assert event(service_dsn, other["event_id"])[0] == "processed"
    assert rows(service_dsn, "SELECT mr_iid FROM reviews") == [(OTHER_IID,)]


def test_stalled_recovery_counts_attempts_and_fails_the_job_at_max_attempts(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    """A worker that dies mid-review (SIGKILL, OOM) costs the job one attempt; the last one fails it
    with its reason instead of putting it back in the queue."""
    queued = queue_review(service, fake, IID)

    def stall(attempts: int) -> None:  # a worker took the job after `attempts` runs, then died
        with psycopg.connect(service_dsn) as conn:
            conn.execute(
                "UPDATE procrastinate_jobs SET status = 'doing', worker_id = NULL, attempts = %s WHERE id = %s",
                (attempts, queued["job_id"]),
            )

    async def recover() -> list[int]:
        pool = make_pool(service_dsn, max_size=2)
        await pool.open(wait=True)
        queue = create_queue_app(FAST_QUEUE)
        await queue.open_async(pool)
        try:
            return await recover_stalled_jobs(
                queue, seconds_since_heartbeat=1, max_attempts=FAST_QUEUE.max_attempts, pool=pool
            )
        finally:
            await queue.close_async()
            await pool.close()

    stall(FAST_QUEUE.max_attempts - 2)
    assert asyncio.run(recover()) == [queued["job_id"]]
    assert job(service_dsn, queued["job_id"]) == ("todo", FAST_QUEUE.max_attempts - 1)
    stall(FAST_QUEUE.max_attempts - 1)
    assert asyncio.run(recover()) == []
    assert job(service_dsn, queued["job_id"])[0] == "failed"
    status, reason = event(service_dsn, queued["event_id"])
    assert status == "failed" and f"each of its {FAST_QUEUE.max_attempts} attempts" in reason, reason
