"""Values the service cannot keep or look up are the client's error (4xx), never a 500 or a 503
(issue 40, low items). A 503 says "retry": GitLab retried deliveries that could never succeed. The
running service, a real Postgres."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import FakeGitLab
from service_harness import API_TOKEN, IID, METRICS, PID, SECRET, LiveServer, post_hook, scalar

READER = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.mark.parametrize(
    "query",
    [
        {"offset": str(10**20)},
        {"offset": str(2**63)},
        {"mr_iid": str(2**40)},
        {"mr_iid": "-" + "9" * 30},
        {"project": "team\x00service"},
    ],
)
def test_the_read_api_answers_422_to_values_out_of_range(service: LiveServer, query: dict[str, str]) -> None:
    answer = httpx.get(f"{service.url}/api/v1/reviews", params=query, headers=READER, timeout=30)
    assert answer.status_code == 422, answer.text  # at 2a83aab: 500
    assert "error" in answer.json()


def test_a_review_id_past_bigint_is_422(service: LiveServer) -> None:
    answer = httpx.get(f"{service.url}/api/v1/reviews/{10**30}", headers=READER, timeout=30)
    assert answer.status_code == 422, answer.text
    assert httpx.get(f"{service.url}/api/v1/reviews/{2**62}", headers=READER, timeout=30).status_code == 404


def test_a_webhook_integer_over_4300_digits_is_400(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    hook = json.dumps(merge_request_hook(fake, PID, IID)).encode()
    huge = hook.replace(b'"object_kind"', b'"huge": ' + b"7" * 5000 + b', "object_kind"', 1)
    answer = post_hook(service.url, huge, hook_headers("Merge Request Hook", token=SECRET))
    assert answer.status_code == 400, answer.text  # at 2a83aab: 500
    assert scalar(service_dsn, "SELECT count(*) FROM webhook_events") == 0


def hook_with(fake: FakeGitLab, **changes: Any) -> dict[str, Any]:
    hook = merge_request_hook(fake, PID, IID)
    hook["object_attributes"]["last_commit"]["id"] = changes.get(
        "head_sha", hook["object_attributes"]["last_commit"]["id"]
    )
    return hook


def test_values_too_large_for_an_index_are_400_not_503(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    long_key = secrets.token_hex(4000)  # random: Postgres cannot compress it under its index's limit
    headers = hook_headers("Merge Request Hook", token=SECRET, idempotency_key=long_key)
    answer = post_hook(service.url, merge_request_hook(fake, PID, IID), headers)
    assert answer.status_code == 400, answer.text  # at 2a83aab: 503 "database unavailable"
    long_sha = hook_with(fake, head_sha=secrets.token_hex(4000))
    answer = post_hook(service.url, long_sha, hook_headers("Merge Request Hook", token=SECRET))
    assert 400 <= answer.status_code < 500, answer.text
    assert scalar(service_dsn, "SELECT count(*) FROM webhook_events") == 0
    ordinary = post_hook(
        service.url, merge_request_hook(fake, PID, IID), hook_headers("Merge Request Hook", token=SECRET)
    )
    assert ordinary.status_code == 202, ordinary.text


def test_metrics_need_their_token_and_are_off_without_one(serve: Callable[..., LiveServer]) -> None:
    guarded = serve()
    assert httpx.get(f"{guarded.url}/metrics", timeout=30).status_code == 401  # at 2a83aab: 200, public
    wrong = {"Authorization": "Bearer not-the-metrics-token"}
    assert httpx.get(f"{guarded.url}/metrics", headers=wrong, timeout=30).status_code == 401
    api_token = {"Authorization": f"Bearer {API_TOKEN}"}  # an API client's token is not the metrics one
    assert httpx.get(f"{guarded.url}/metrics", headers=api_token, timeout=30).status_code == 401
    scraped = httpx.get(f"{guarded.url}/metrics", headers=METRICS, timeout=30)
    assert scraped.status_code == 200 and "reviewloop_webhook_outcomes" in scraped.text
    off = serve(metrics_token=None)
    assert httpx.get(f"{off.url}/metrics", headers=METRICS, timeout=30).status_code == 404


def test_metrics_read_the_database_once_per_cache_period(
    serve: Callable[..., LiveServer], service_dsn: str, fake: FakeGitLab
) -> None:
    live = serve(metrics_cache_s=3600)
    first = httpx.get(f"{live.url}/metrics", headers=METRICS, timeout=30).text
    assert 'reviewloop_queue_jobs{status="todo"} 0.0' in first
    queued = post_hook(live.url, merge_request_hook(fake, PID, IID), hook_headers("Merge Request Hook", token=SECRET))
    assert queued.status_code == 202
    # the same reading: no query ran for this scrape (the queue now holds a job)
    again = httpx.get(f"{live.url}/metrics", headers=METRICS, timeout=30).text
    assert 'reviewloop_queue_jobs{status="todo"} 0.0' in again
    assert scalar(service_dsn, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'") == 1


def test_docs_are_off_for_a_bare_serve(service: LiveServer) -> None:
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(f"{service.url}{path}", timeout=30).status_code == 404, path  # at 2a83aab: 200
