"""Request bodies are bounded before they are read, and authentication comes before parsing
(issue 11, items 3 and 7), over real HTTP against the running service on a real Postgres.

Raw sockets where the attack is in the framing: a client can declare a body it never sends, or
stream one without a length, and what matters is what the server does before the body is in.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

import httpx
import pytest
from fakes.gitlab_hooks import hook_headers
from pydantic import SecretStr
from service_harness import API_TOKEN, SECRET, LiveServer, post_hook, rows
from starlette.testclient import TestClient

from agent.service_settings import Settings
from api.app import create_app

REPLY_WITHIN_S = 5.0  # a server waiting for a declared 150 MB body would never answer in time
DECLARED = 150 * 1024 * 1024  # the 150 MB POST of the issue


def raw_request(url: str, head: str, body_parts: Sequence[bytes] = ()) -> tuple[int, str]:
    """Send a request's head (and the given body bytes), then read the answer: (status, body)."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=REPLY_WITHIN_S) as sock:
        sock.sendall(head.encode("latin-1"))
        for part in body_parts:
            try:
                sock.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server answered and closed: the rest was never read
        answer = b""
        try:
            while b"\r\n\r\n" not in answer or not answer.split(b"\r\n\r\n", 1)[1].rstrip().endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except TimeoutError:
            pytest.fail(f"no answer within {REPLY_WITHIN_S} s: the server is waiting for the body")
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode(errors="replace")


def head(path: str, *, length: int | None, headers: dict[str, str]) -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return "\r\n".join(lines) + "\r\n\r\n"


def chunked(data: bytes, size: int = 64 * 1024) -> list[bytes]:
    parts = [
        f"{len(data[i : i + size]):x}\r\n".encode() + data[i : i + size] + b"\r\n" for i in range(0, len(data), size)
    ]
    return [*parts, b"0\r\n\r\n"]


def test_a_declared_huge_body_is_refused_before_it_is_read(service: LiveServer, service_dsn: str) -> None:
    for path, headers in (
        ("/api/v1/findings/1/feedback", {}),  # no token: the attack
        ("/api/v1/findings/1/feedback", {"Authorization": f"Bearer {API_TOKEN}"}),
        ("/webhooks/gitlab", {"X-Gitlab-Token": SECRET}),
        ("/dashboard/login", {}),
    ):
        status, body = raw_request(service.url, head(path, length=DECLARED, headers=headers))
        assert status == 413, (path, status, body)
        assert "exceeds" in json.loads(body)["error"]
    assert rows(service_dsn, "SELECT count(*) FROM feedback") == [(0,)]


def test_a_streamed_body_stops_at_the_limit(serve: Callable[..., LiveServer], service_dsn: str) -> None:
    live = serve(max_request_bytes=64 * 1024)
    vote = json.dumps({"value": 1, "comment": "a" * 2_000_000}).encode()  # 2 MB without a Content-Length
    authorized = {"Authorization": f"Bearer {API_TOKEN}"}
    status, body = raw_request(
        live.url, head("/api/v1/findings/1/feedback", length=None, headers=authorized), chunked(vote)
    )
    assert status == 413 and "exceeds 65536 bytes" in json.loads(body)["error"], body


def test_the_feedback_token_is_checked_before_the_body_is_read(service: LiveServer) -> None:
    # a body declared but never sent: only a server that reads it first would wait
    status, body = raw_request(service.url, head("/api/v1/findings/1/feedback", length=100_000, headers={}))
    assert status == 401 and json.loads(body) == {"error": "a bearer token is required"}, body


def test_deeply_nested_json_is_refused_not_a_server_error(service: LiveServer, service_dsn: str) -> None:
    nested = b"[" * 200_000
    no_token = post_hook(service.url, nested, hook_headers("Merge Request Hook", token=None))
    assert no_token.status_code == 401, no_token.text  # authentication first: nothing was parsed
    with_token = post_hook(service.url, nested, hook_headers("Merge Request Hook", token=SECRET))
    assert with_token.status_code == 400 and "error" in with_token.json(), with_token.text
    vote = httpx.post(
        f"{service.url}/api/v1/findings/1/feedback",
        content=b'{"value": 1, "comment": ' + b"[" * 200_000,
        headers={"Authorization": f"Bearer {API_TOKEN}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert vote.status_code in (400, 422) and "error" in vote.json(), vote.text
    assert rows(service_dsn, "SELECT count(*) FROM webhook_events") == [(0,)]


def test_api_docs_are_off_unless_asked_for() -> None:
    """Off for a bare `serve` too (development is the default environment; issue 40)."""
    base = {"database_url": "postgresql://unused@127.0.0.1:1/unused", "webhook_secret": SecretStr("s" * 32)}
    for environment, asked, served in (
        ("development", None, False),
        ("production", None, False),
        ("development", True, True),
        ("production", True, True),
    ):
        extra = {} if asked is None else {"api_docs": asked}
        app = create_app(Settings(environment=environment, **extra, **base))
        client = TestClient(app)  # no lifespan: these pages need no database
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert (client.get(path).status_code == 200) is served, (environment, asked, path)
