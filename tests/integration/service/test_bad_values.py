"""Values the service cannot keep or look up are the client's error (4xx), never a 500 or a 503
(issue 40, low items). A 503 says "retry": GitLab retried deliveries that could never succeed. The
running service, a real Postgres."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import pytest
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import FakeGitLab
from service_harness import API_TOKEN, IID, PID, SECRET, LiveServer, post_hook, scalar

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
