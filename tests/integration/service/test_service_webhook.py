"""POST /webhooks/gitlab over real HTTP on a real Postgres: authentication before storage, bounded
bodies, validation, triage, the one-transaction enqueue, and deduplication under concurrency."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable

import httpx
from fakes.gitlab_hooks import draft_change, hook_headers, merge_request_hook, note_hook
from fakes.gitlab_server import FakeGitLab
from pydantic import SecretStr
from service_harness import (
    IID,
    PATH,
    PID,
    SECRET,
    LiveServer,
    RecordingReview,
    drain_queue,
    post_hook,
    rows,
    scalar,
)

TABLES = ("webhook_events", "reviews", "findings", "feedback", "procrastinate_jobs")


def counts(dsn: str) -> dict[str, int]:
    return {t: int(scalar(dsn, f"SELECT count(*) FROM {t}")) for t in TABLES}


def review_jobs(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'review_merge_request'"))


def mr_headers(key: str | None = None, token: str | None = SECRET) -> dict[str, str]:
    headers: dict[str, str] = hook_headers("Merge Request Hook", token=token, idempotency_key=key)
    return headers


def test_wrong_or_missing_token_is_401_and_stores_nothing(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    body = merge_request_hook(fake, PID, IID, action="open")
    for token in ("wrong-secret", None, SECRET[:-1], ""):
        answer = post_hook(service.url, body, mr_headers(token=token))
        assert answer.status_code == 401, token
        assert answer.json() == {"error": "missing or wrong X-Gitlab-Token"}
    # a malformed body with a wrong token is still 401, not 400: nothing is said before authentication
    assert post_hook(service.url, b"{not json", mr_headers(token="nope")).status_code == 401
    assert counts(service_dsn) == dict.fromkeys(TABLES, 0)


def test_per_project_secret_overrides_the_global_one(
    serve: Callable[..., LiveServer], service_dsn: str, fake: FakeGitLab
) -> None:
    live = serve(project_secrets={str(PID): SecretStr("project-only-secret")})
    body = merge_request_hook(fake, PID, IID, action="open")
    assert post_hook(live.url, body, mr_headers(token=SECRET)).status_code == 401
    answer = post_hook(live.url, body, mr_headers(token="project-only-secret"))
    assert answer.status_code == 202, answer.text


def test_malformed_and_invalid_bodies_are_400(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    for raw in (b"{not json", b"[1, 2]", b"\xff\xfe", b"{}"):
        answer = post_hook(service.url, raw, mr_headers())
        assert answer.status_code == 400, raw
        assert "error" in answer.json()
    body = merge_request_hook(fake, PID, IID, action="open")
    del body["object_attributes"]["iid"]
    answer = post_hook(service.url, body, mr_headers())
    assert answer.status_code == 400
    assert "object_attributes.iid" in answer.json()["error"]
    body = merge_request_hook(fake, PID, IID, action="open")
    body["project"]["id"] = "not-a-number"
    assert post_hook(service.url, body, mr_headers()).status_code == 400
    assert counts(service_dsn)["webhook_events"] == 0


def test_oversized_body_is_413_without_storing(serve: Callable[..., LiveServer], service_dsn: str) -> None:
    live = serve(max_webhook_bytes=4096)
    padding = "x" * 200_000
    raw = json.dumps({"object_kind": "merge_request", "padding": padding}).encode()
    answer = post_hook(live.url, raw, mr_headers())
    assert answer.status_code == 413
    assert "exceeds 4096 bytes" in answer.json()["error"]

    # without Content-Length (chunked): the limit holds while streaming
    def chunks() -> object:
        for _ in range(100):
            yield b"x" * 1024

    headers = mr_headers()
    chunked = httpx.post(f"{live.url}/webhooks/gitlab", content=chunks(), headers=headers, timeout=30)  # type: ignore[arg-type]
    assert chunked.status_code == 413
    assert counts(service_dsn)["webhook_events"] == 0


def test_ignored_events_answer_200_with_a_reason(
    serve: Callable[..., LiveServer], service_dsn: str, fake: FakeGitLab
) -> None:
    live = serve(gitlab_projects=f"{PATH},999")
    cases: list[tuple[dict[str, object], str]] = []
    cases.append((merge_request_hook(fake, PID, IID, action="update"), "update without new commits"))
    cases.append((merge_request_hook(fake, PID, IID, action="approved"), "'approved' does not start a review"))
    closed = merge_request_hook(fake, PID, IID, action="close")
    closed["object_attributes"]["state"] = "closed"
    cases.append((closed, "merge request is closed"))
    merged = merge_request_hook(fake, PID, IID, action="merge")
    merged["object_attributes"]["state"] = "merged"
    cases.append((merged, "merge request is merged"))
    fake.set_draft(PID, IID, True)
    cases.append((merge_request_hook(fake, PID, IID, action="open"), "draft"))
    fake.set_draft(PID, IID, False)
    fake.add_project(1001, "other/project")
    fake.add_merge_request(1001, 1, files_base={"a": "1\n"}, files_head={"a": "2\n"})
    cases.append((merge_request_hook(fake, 1001, 1, action="open"), "not in REVIEWLOOP_GITLAB_PROJECTS"))
    bot_note = fake.reply(PID, IID, _start_discussion(fake), "a follow-up", user=fake.bot)
    cases.append((note_hook(fake, PID, IID, bot_note.id), "our own note"))
    push: dict[str, object] = {"object_kind": "push", "project": {"id": PID, "path_with_namespace": PATH}}
    cases.append((push, "push events are not handled"))
    for body, reason in cases:
        answer = post_hook(live.url, body, mr_headers(key=str(uuid.uuid4())))
        assert answer.status_code == 200, (reason, answer.text)
        assert answer.json()["status"] == "ignored"
        assert reason in answer.json()["reason"], answer.json()
    stored = rows(service_dsn, "SELECT status, reason FROM webhook_events ORDER BY id")
    assert len(stored) == len(cases) and {s for s, _ in stored} == {"ignored"}
    assert counts(service_dsn)["procrastinate_jobs"] == 0


def _start_discussion(fake: FakeGitLab) -> str:
    import gitlab
    from fakes.gitlab_server import BOT_TOKEN

    client = gitlab.Gitlab(fake.url, private_token=BOT_TOKEN)
    mr = client.projects.get(PID).mergerequests.get(IID)
    return str(mr.discussions.create({"body": "finding"}).id)


def test_open_queues_one_job_in_the_same_transaction(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    head = fake.merge_request(PID, IID).latest.head_sha
    answer = post_hook(service.url, merge_request_hook(fake, PID, IID, action="open"), mr_headers(key="k-open"))
    assert answer.status_code == 202, answer.text
    data = answer.json()
    assert data["status"] == "queued" and data["event_id"] and data["job_id"]
    event = rows(
        service_dsn, "SELECT status, job_id, project_id, mr_iid, head_sha, idempotency_key FROM webhook_events"
    )
    assert event == [("queued", data["job_id"], PID, IID, head, "k-open")]
    # the job row is what procrastinate's own `defer_async` writes (intake inserts it through
    # procrastinate_defer_jobs_v1 from SQL, migration 0002)
    job = rows(
        service_dsn,
        "SELECT queue_name, priority, task_name, status::text, lock, queueing_lock, args FROM procrastinate_jobs",
    )
    lock = f"mr:{PID}:{IID}"
    assert job == [
        (
            "reviews",
            0,
            "review_merge_request",
            "todo",
            lock,
            lock,
            {"project": str(PID), "mr_iid": IID, "head_sha": head, "event_id": data["event_id"]},
        )
    ]


def test_ten_concurrent_deliveries_with_one_key_make_one_job(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    body = merge_request_hook(fake, PID, IID, action="open")
    key = str(uuid.uuid4())
    barrier = threading.Barrier(10)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def deliver() -> None:
        barrier.wait()
        answer = post_hook(service.url, body, mr_headers(key=key))  # new X-Gitlab-Webhook-UUID each time
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=deliver) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 9 + [202], [a.text for a in answers]
    assert {a.json()["status"] for a in answers if a.status_code == 200} == {"duplicate"}
    assert rows(service_dsn, "SELECT status FROM webhook_events") == [("queued",)]
    assert review_jobs(service_dsn) == 1

    # the review runs; GitLab re-delivers the same event afterwards: still one job, one review
    review = RecordingReview(service_dsn)
    drain_queue(service_dsn, review)
    assert len(review.calls) == 1
    assert rows(service_dsn, "SELECT status FROM webhook_events") == [("processed",)]
    again = post_hook(service.url, body, mr_headers(key=key))
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert review_jobs(service_dsn) == 1
    assert scalar(service_dsn, "SELECT count(*) FROM reviews") == 1


def test_same_head_under_another_key_is_a_duplicate(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    first = post_hook(service.url, merge_request_hook(fake, PID, IID, action="open"), mr_headers())
    assert first.status_code == 202
    # e.g. a "reopen" racing the "open", or a second hook configured on the project
    second = post_hook(service.url, merge_request_hook(fake, PID, IID, action="reopen"), mr_headers())
    assert second.status_code == 200
    assert second.json()["status"] == "duplicate"
    assert f"already queued by event {first.json()['event_id']}" in second.json()["reason"]
    assert review_jobs(service_dsn) == 1
    assert rows(service_dsn, "SELECT status FROM webhook_events ORDER BY id") == [("queued",), ("duplicate",)]


def test_concurrent_deliveries_of_one_head_under_different_keys_make_one_job(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    body = merge_request_hook(fake, PID, IID, action="open")
    barrier = threading.Barrier(6)
    codes: list[int] = []

    def deliver() -> None:
        barrier.wait()
        codes.append(post_hook(service.url, body, mr_headers(key=str(uuid.uuid4()))).status_code)

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] * 5 + [202]
    assert review_jobs(service_dsn) == 1


def test_new_commits_supersede_a_pending_review(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    first = post_hook(service.url, merge_request_hook(fake, PID, IID, action="open"), mr_headers())
    old_head = fake.merge_request(PID, IID).latest.head_sha
    new_head = fake.push(PID, IID, {**HEAD_V2})
    second = post_hook(service.url, merge_request_hook(fake, PID, IID, action="update", oldrev=old_head), mr_headers())
    assert first.status_code == 202 and second.status_code == 202, second.text
    jobs = rows(
        service_dsn,
        "SELECT id, status::text, args->>'head_sha' FROM procrastinate_jobs"
        " WHERE task_name = 'review_merge_request' ORDER BY id",
    )
    assert jobs == [
        (first.json()["job_id"], "cancelled", old_head),
        (second.json()["job_id"], "todo", new_head),
    ]
    events = rows(service_dsn, "SELECT status, reason FROM webhook_events ORDER BY id")
    assert events[0][0] == "ignored" and "superseded by event" in events[0][1]
    assert events[1][0] == "queued"
    review = RecordingReview(service_dsn)
    drain_queue(service_dsn, review)
    assert [c["head_sha"] for c in review.calls] == [new_head]


HEAD_V2 = {"app.py": "def f():\n    return 3\n", "util.py": "X = 2\n"}


def test_draft_to_ready_triggers_a_review(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    fake.set_draft(PID, IID, True)
    opened = post_hook(service.url, merge_request_hook(fake, PID, IID, action="open"), mr_headers())
    assert opened.json() == {"status": "ignored", "event_id": 1, "reason": "merge request is a draft"}
    fake.set_draft(PID, IID, False)
    ready = merge_request_hook(fake, PID, IID, action="update", changes=draft_change(True, False))
    answer = post_hook(service.url, ready, mr_headers())
    assert answer.status_code == 202, answer.text
    assert rows(service_dsn, "SELECT action FROM webhook_events WHERE status = 'queued'") == [("ready",)]
    # and ready → draft is not a reason to review
    back = merge_request_hook(fake, PID, IID, action="update", changes=draft_change(False, True))
    back["object_attributes"]["draft"] = True
    assert post_hook(service.url, back, mr_headers()).json()["status"] == "ignored"
