"""End to end on real Postgres and real HTTP: GitLab webhook → 202 → a worker runs the real review
flow (agent.gitlab.review) against the GitLab-compatible server → positioned discussions → an emoji
on one of them → a feedback row → visible in the read API. Then the delivery and crash guarantees:
duplicate deliveries, a new push, and a worker SIGKILLed in the middle of publishing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fakes.gitlab_hooks import emoji_hook, hook_headers, merge_request_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from pydantic import SecretStr
from service_harness import (
    API_TOKEN,
    FAST_QUEUE,
    IID,
    METRICS,
    PID,
    SECRET,
    LiveServer,
    drain_queue,
    post_hook,
    rows,
    scalar,
    wait_for,
)

from agent.gitlab.review import build_deps
from agent.service_settings import Settings
from agent.session import Session, open_session
from api.worker import ReviewFunction, pipeline_review_function

REPO = Path(__file__).resolve().parents[3]
BASE = {
    "app/db.py": (
        "import sqlite3\n\n\ndef find(conn, name):\n"
        "    return conn.execute('SELECT * FROM users WHERE name = ?', (name,)).fetchall()\n"
    )
}
HEAD = {  # the name and the command come from the request: real sources, so both findings are posted
    "app/db.py": (
        "import sqlite3\nimport subprocess\n\nfrom flask import request\n\n\ndef find(conn):\n"
        "    name = request.args['name']\n"
        "    return conn.execute(f\"SELECT * FROM users WHERE name = '{name}'\").fetchall()\n\n\n"
        "def run():\n    return subprocess.call(request.args['cmd'], shell=True)\n"
    )
}
SQL_LINE, SHELL_LINE = 9, 13  # new-file lines of the interpolated query and of the shell call


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        server.add_project(PID, "team/service")
        server.add_merge_request(PID, IID, files_base=BASE, files_head=HEAD, title="Find users by name")
        yield server


@pytest.fixture
def review_session(service_dsn: str, gitlab: FakeGitLab) -> Iterator[tuple[Session, ReviewFunction]]:
    """The worker's review function as `reviewloop worker` builds it (no model configured)."""
    settings = Settings(database_url=service_dsn, gitlab_url=gitlab.url, gitlab_token=SecretStr(BOT_TOKEN))
    session = open_session(settings, tracing=False)
    try:
        deps = build_deps(settings, pool=session.pool, dsn=session.dsn, llm=None)
        yield session, pipeline_review_function(deps)
    finally:
        session.close()


def deliver(service: LiveServer, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    return post_hook(service.url, body, hook_headers("Merge Request Hook", token=SECRET, idempotency_key=key))


def our_threads(gitlab: FakeGitLab) -> list[Any]:
    return [d for d in gitlab.discussions(PID, IID) if d.notes[0].author.id == gitlab.bot.id]


def positioned(gitlab: FakeGitLab) -> dict[int, Any]:
    """new_line → discussion, for our positioned threads."""
    return {
        int(d.notes[0].position["new_line"]): d
        for d in our_threads(gitlab)
        if d.notes[0].position and d.notes[0].position.get("new_line")
    }


def test_webhook_to_discussions_to_feedback(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab, review_session: tuple[Session, ReviewFunction]
) -> None:
    _, review = review_session
    queued = deliver(service, merge_request_hook(gitlab, PID, IID, action="open"))
    assert queued.status_code == 202, queued.text
    drain_queue(service_dsn, review)

    ((review_id, status),) = rows(service_dsn, "SELECT id, status FROM reviews WHERE NOT is_shadow")
    assert status == "done"
    assert rows(service_dsn, "SELECT status FROM webhook_events") == [("processed",)]
    threads = positioned(gitlab)
    assert {SQL_LINE, SHELL_LINE} <= set(threads)
    for line, discussion in threads.items():
        position = discussion.notes[0].position
        assert position["new_path"] == "app/db.py" and position["old_path"] == "app/db.py"
        assert position["head_sha"] == gitlab.merge_request(PID, IID).latest.head_sha, line
    sql_note = threads[SQL_LINE].notes[0]
    (finding_id,) = rows(service_dsn, "SELECT id FROM findings WHERE note_id = %s", sql_note.id)[0]

    vote = post_hook(
        service.url,
        emoji_hook(gitlab, PID, IID, sql_note.id, name="thumbsup"),
        hook_headers("Emoji Hook", token=SECRET),
    )
    assert vote.json()["status"] == "processed", vote.text
    detail = httpx.get(
        f"{service.url}/api/v1/reviews/{review_id}", headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30
    ).json()
    (finding,) = [f for f in detail["findings"] if f["id"] == finding_id]
    assert finding["verdict"] == "REAL" and finding["line"] == SQL_LINE
    assert [(v["user_key"], v["value"], v["source"]) for v in finding["feedback"]] == [
        (f"gitlab:{gitlab.human.id}", 1, "emoji")
    ]


def test_duplicate_deliveries_give_one_review_and_one_set_of_discussions(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab, review_session: tuple[Session, ReviewFunction]
) -> None:
    _, review = review_session
    body = merge_request_hook(gitlab, PID, IID, action="open")
    key = str(uuid.uuid4())
    barrier = threading.Barrier(10)
    codes: list[int] = []

    def one() -> None:
        barrier.wait()
        codes.append(deliver(service, body, key).status_code)

    threads = [threading.Thread(target=one) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] * 9 + [202]
    drain_queue(service_dsn, review)
    posted = len(gitlab.discussions(PID, IID))
    assert posted >= 3  # two findings and the summary at least
    # GitLab re-delivers after the review finished, and a second hook sends the same head
    assert deliver(service, body, key).json()["status"] == "duplicate"
    assert deliver(service, merge_request_hook(gitlab, PID, IID, action="reopen")).json()["status"] == "duplicate"
    drain_queue(service_dsn, review)
    assert scalar(service_dsn, "SELECT count(*) FROM reviews WHERE NOT is_shadow") == 1
    assert len(gitlab.discussions(PID, IID)) == posted
    posts = [r for r in gitlab.requests if r.method == "POST" and r.path.endswith(("/discussions", "/notes"))]
    assert len(posts) == posted


def test_new_push_reviews_the_change_without_reposting(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab, review_session: tuple[Session, ReviewFunction]
) -> None:
    _, review = review_session
    deliver(service, merge_request_hook(gitlab, PID, IID, action="open"))
    drain_queue(service_dsn, review)
    before = {d.id for d in our_threads(gitlab)}
    shell_thread = positioned(gitlab)[SHELL_LINE]
    old_head = gitlab.merge_request(PID, IID).latest.head_sha
    fixed = HEAD["app/db.py"].replace(
        "subprocess.call(request.args['cmd'], shell=True)", "subprocess.call(['ls', '-l'])"
    )
    gitlab.push(PID, IID, {"app/db.py": fixed})
    answer = deliver(service, merge_request_hook(gitlab, PID, IID, action="update", oldrev=old_head))
    assert answer.status_code == 202, answer.text
    drain_queue(service_dsn, review)
    assert scalar(service_dsn, "SELECT count(*) FROM reviews WHERE status = 'done' AND NOT is_shadow") == 2
    after = our_threads(gitlab)
    # the SQL finding is still there and not posted again; the shell thread's code is gone
    sql_threads = [d for d in after if d.notes[0].position and d.notes[0].position.get("new_line") == SQL_LINE]
    assert len(sql_threads) == 1 and sql_threads[0].id in before
    (gone,) = [d for d in after if d.id == shell_thread.id]
    assert gone.notes[0].resolved or len(gone.notes) > 1  # resolved, or marked with a reply


def start_worker(dsn: str, gitlab_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "REVIEWLOOP_DATABASE_URL": dsn,
        "REVIEWLOOP_GITLAB_URL": gitlab_url,
        "REVIEWLOOP_GITLAB_TOKEN": BOT_TOKEN,
    }
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        env.pop(name, None)
    args = ["worker", "--concurrency", "1", "--heartbeat-interval", "0.5", "--stalled-after", "3"]
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-c", "from api.cli import main; main()", *args],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.slow
def test_worker_killed_while_publishing_finishes_after_restart_posting_each_finding_once(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab, tmp_path: Path
) -> None:
    log = tmp_path / "workers.log"
    # the summary note is refused with 429 and a long Retry-After: the worker sits in python-gitlab's
    # retry after the finding threads were posted, and is killed there
    gitlab.fail_next(rf"/projects/{PID}/merge_requests/{IID}/notes/?$", 429, count=None, retry_after=60, method="POST")
    queued = deliver(service, merge_request_hook(gitlab, PID, IID, action="open"))
    victim = start_worker(service_dsn, gitlab.url, log)
    try:
        wait_for(
            lambda: any(r.status == 429 for r in gitlab.requests), timeout=120, what="the worker to reach the summary"
        )
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            victim.kill()
    threads_before = len(positioned(gitlab))
    assert threads_before >= 2
    assert (
        scalar(service_dsn, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", queued.json()["job_id"])
        == "doing"
    )

    gitlab.clear_faults()
    rescuer = start_worker(service_dsn, gitlab.url, log)
    try:
        wait_for(
            lambda: (
                scalar(service_dsn, "SELECT status FROM webhook_events WHERE id = %s", queued.json()["event_id"])
                == "processed"
            ),
            timeout=120,
            what=f"the recovered review; worker log:\n{log.read_text()[-3000:]}",
        )
    finally:
        rescuer.send_signal(signal.SIGTERM)
        assert rescuer.wait(timeout=60) == 0
    threads = our_threads(gitlab)
    markers = [d.notes[0].body for d in threads]
    assert len(positioned(gitlab)) == threads_before  # no finding posted twice
    assert len(markers) == len(set(markers))
    assert scalar(service_dsn, "SELECT count(*) FROM reviews WHERE NOT is_shadow") == 1
    assert scalar(service_dsn, "SELECT count(*) FROM findings WHERE verdict = 'REAL' AND note_id IS NULL") == 0
    # both workers' logs are JSON lines naming the merge request; the GitLab token is never written
    text = log.read_text()
    entries = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    started = [e for e in entries if e["message"] == "review started"]
    head = gitlab.merge_request(PID, IID).latest.head_sha
    assert [(e["project"], e["mr_iid"], e["head_sha"]) for e in started] == [(str(PID), IID, head)] * 2
    assert BOT_TOKEN not in text


def test_gitlab_failing_past_the_retry_budget_fails_the_job_visibly(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab, review_session: tuple[Session, ReviewFunction]
) -> None:
    _, review = review_session
    # the finding threads go through; the summary note keeps getting 500
    gitlab.fail_next(rf"/projects/{PID}/merge_requests/{IID}/notes/?$", 500, count=None, method="POST")
    queued = deliver(service, merge_request_hook(gitlab, PID, IID, action="open")).json()
    for _ in range(FAST_QUEUE.max_attempts):
        with psycopg.connect(service_dsn) as conn:  # skip the backoff wait between attempts
            conn.execute("UPDATE procrastinate_jobs SET scheduled_at = now() WHERE id = %s", (queued["job_id"],))
        drain_queue(service_dsn, review)
    assert (
        scalar(service_dsn, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", queued["job_id"]) == "failed"
    )
    status, reason = rows(service_dsn, "SELECT status, reason FROM webhook_events WHERE id = %s", queued["event_id"])[0]
    assert status == "failed" and reason
    metrics = httpx.get(f"{service.url}/metrics", headers=METRICS, timeout=30).text
    assert 'reviewloop_queue_jobs{status="failed"} 1.0' in metrics
    # every thread that reached GitLab has its record, and none was posted twice by the retries
    threads = positioned(gitlab)
    assert len(threads) >= 2
    for discussion in threads.values():
        assert scalar(service_dsn, "SELECT count(*) FROM findings WHERE discussion_id = %s", discussion.id) >= 1
    bodies = [d.notes[0].body for d in our_threads(gitlab)]
    assert len(bodies) == len(set(bodies))
