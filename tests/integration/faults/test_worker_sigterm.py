"""SIGTERM to a real `reviewloop worker` in the middle of a real review.

The review is publishing (its summary note waits out a 429's Retry-After) when the signal arrives.
The worker must finish that review — every finding and the summary posted once, the job succeeded —
start no other job, unregister, and exit 0. (A worker that dies without a chance to finish, by
SIGKILL, has its job recovered by another worker: tests/integration/service/.)
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import FakeGitLab
from fault_harness import (
    BASE,
    HEAD,
    IID,
    NOTES_PATH,
    PID,
    posted_fingerprints,
    start_reviewloop_worker,
    stop_process,
    summary_notes,
    wait_for,
)
from service_harness import SECRET, LiveServer, post_hook, rows, scalar

RETRY_AFTER_S = 3
OTHER_IID = IID + 1


def deliver(service: LiveServer, gitlab: FakeGitLab, iid: int) -> dict[str, int]:
    answer = post_hook(
        service.url,
        merge_request_hook(gitlab, PID, iid, action="open"),
        hook_headers("Merge Request Hook", token=SECRET),
    )
    assert answer.status_code == 202, answer.text
    queued: dict[str, int] = answer.json()
    return queued


@pytest.mark.slow
def test_sigterm_mid_review_finishes_it_starts_nothing_else_and_exits_cleanly(
    service: LiveServer, queue_dsn: str, gitlab: FakeGitLab, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    gitlab.add_merge_request(PID, OTHER_IID, files_base=BASE, files_head=HEAD, title="Another change")
    gitlab.fail_next(NOTES_PATH, 429, count=1, retry_after=RETRY_AFTER_S, method="POST")
    first = deliver(service, gitlab, IID)
    worker = start_reviewloop_worker(queue_dsn, gitlab.url, log)
    try:
        wait_for(
            lambda: any(r.status == 429 for r in gitlab.requests),
            timeout=120,
            what=f"the review to reach its summary note; log:\n{log.read_text()[-3000:]}",
        )
        signalled = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        second = deliver(service, gitlab, OTHER_IID)  # queued while the worker is stopping
        code = worker.wait(timeout=60)
    finally:
        stopped = stop_process(worker)
    assert code == 0 == stopped, log.read_text()[-3000:]
    assert time.monotonic() - signalled >= RETRY_AFTER_S - 1  # it waited for the running review

    assert (
        scalar(queue_dsn, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", first["job_id"]) == "succeeded"
    )
    assert rows(queue_dsn, "SELECT status FROM webhook_events WHERE id = %s", first["event_id"]) == [("processed",)]
    assert rows(queue_dsn, "SELECT status FROM reviews WHERE NOT is_shadow") == [("done",)]
    fingerprints = posted_fingerprints(gitlab)
    assert fingerprints and set(fingerprints.values()) == {1}
    assert summary_notes(gitlab) == 1

    # nothing new was started, and the worker is gone from the registry
    assert scalar(queue_dsn, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", second["job_id"]) == "todo"
    assert gitlab.discussions(PID, OTHER_IID) == []
    assert scalar(queue_dsn, "SELECT count(*) FROM procrastinate_workers") == 0
