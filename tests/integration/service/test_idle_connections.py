"""Idle connections cannot take `reviewloop serve` down (issue 40, H4; Done-when 2).

At 2a83aab, 256 TCP connections that never sent a byte made every route answer 503 for as long as
they stayed open: uvicorn's `limit_concurrency` counts open connections, and nothing closed one
whose request head never came. Here 500 such sockets are held open against a real `serve`; the
health route and a webhook with the right secret still answer within a second, and the server
closes the idle sockets within its stated head deadline. Real process, raw sockets, real Postgres.
"""

from __future__ import annotations

import json
import resource
import socket
import time

import httpx
import pytest

from bench.webhook_load import merge_request_hook
from bench.webhook_slow_senders import served

IDLE = 500
HEAD_TIMEOUT_S = 2.0  # REVIEWLOOP_REQUEST_HEAD_TIMEOUT_S for the server under test
ANSWER_S = 1.0  # Done-when 2: each answers within a second
SECRET = "a-webhook-secret-of-decent-length"  # noqa: S105 - loopback test credential
FD_HEADROOM = 200  # the test's own files, the pools, pytest


def ensure_open_files(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the open-files hard limit ({hard}) is below the {needed} this test holds")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the peer has closed: a read returns the end (or a reset) rather than blocking."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


@pytest.mark.slow
def test_500_idle_connections_leave_health_and_webhook_answering_and_are_closed(db_dsn: str) -> None:
    ensure_open_files(IDLE + FD_HEADROOM)
    settings = {"REVIEWLOOP_REQUEST_HEAD_TIMEOUT_S": str(HEAD_TIMEOUT_S)}
    with served(db_dsn, secret=SECRET, settings=settings) as (host, port, _pid):
        url = f"http://{host}:{port}"
        idle = [socket.create_connection((host, port), timeout=10) for _ in range(IDLE)]
        # half of them start a request head and never finish it
        for sock in idle[: IDLE // 2]:
            sock.sendall(b"POST /webhooks/gitlab HTTP/1.1\r\nHost: x\r\n")
        opened = time.monotonic()
        try:
            started = time.monotonic()
            health = httpx.get(f"{url}/healthz", timeout=10)
            health_s = time.monotonic() - started
            body = json.dumps(merge_request_hook(iid=1, tag="idle")).encode()
            headers = {
                "Content-Type": "application/json",
                "X-Gitlab-Event": "Merge Request Hook",
                "X-Gitlab-Token": SECRET,
                "Idempotency-Key": "idle-connections-1",
            }
            started = time.monotonic()
            hook = httpx.post(f"{url}/webhooks/gitlab", content=body, headers=headers, timeout=10)
            hook_s = time.monotonic() - started
            assert health.status_code == 200, health.text
            assert hook.status_code == 202, hook.text
            assert health_s <= ANSWER_S and hook_s <= ANSWER_S, (health_s, hook_s)

            # the server closes every idle socket within its deadline (and a little scheduling slack)
            deadline = opened + HEAD_TIMEOUT_S + 3.0
            still_open = idle
            while still_open and time.monotonic() < deadline:
                time.sleep(0.2)
                still_open = [sock for sock in still_open if not closed_by_server(sock)]
            assert not still_open, f"{len(still_open)} of {IDLE} idle connections still open"
            assert time.monotonic() - opened >= HEAD_TIMEOUT_S - 0.5  # not closed before the deadline either
        finally:
            for sock in idle:
                sock.close()
