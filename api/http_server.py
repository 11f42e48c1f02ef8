"""How `reviewloop serve` runs uvicorn: what one HTTP connection may cost, and the protocol it speaks.

An idle connection costs a file descriptor and a few kilobytes; a request in progress costs a task,
a database connection, perhaps a body. So the two are bounded apart:

- a connection must finish its request head within `REVIEWLOOP_REQUEST_HEAD_TIMEOUT_S` of opening
  (or of the head's first byte, on a kept-alive connection), else it is closed (api/lingering.py);
  an idle kept-alive connection is closed after `KEEP_ALIVE_S`;
- at most `max_requests_in_flight` requests are served at once (`RequestsInFlight`); past it, 503.

uvicorn's `limit_concurrency` is not used: it counts open connections, idle ones included, so 256
sockets that never send a byte made every route answer 503 for as long as they stayed open (issue
40, H4), and uvicorn has no deadline for a request head to close them. The limits of a request's
body (size, deadline, concurrent reads) are the webhook route's (api/routes/webhooks.py) and the
body-limit middleware's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from agent.service_settings import Settings
from api.lingering import LingeringH11Protocol

logger = logging.getLogger(__name__)

KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this (uvicorn's default, stated)
# The request line and headers h11 buffers before it answers 400: a hook's head is a few hundred
# bytes; h11's own default, stated so that it cannot drift.
MAX_INCOMPLETE_EVENT_BYTES = 16 * 1024
RETRY_AFTER_S = 1  # a request refused for load: GitLab and browsers may come back at once


class RequestsInFlight:
    """At most `limit` HTTP requests served at once; past it, 503 with Retry-After at once (a queue
    would hold the connection meanwhile). Used from the event loop only, so a counter needs no lock."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            logger.warning("requests in flight past the limit: 503", extra={"limit": self.limit})
            body = json.dumps({"error": f"more than {self.limit} requests in progress; retry"}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", str(RETRY_AFTER_S).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit, and return it: each idle
    connection holds a descriptor until its deadline, and the common soft default (1024) is a cap
    a few hundred idle sockets approach."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # a container may forbid it; the soft limit then stands
            logger.warning("could not raise the open-files limit", extra={"soft": soft, "error": str(exc)})
    return soft


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (a dependency on Linux and macOS), else asyncio's.

    The same protocol and application code runs on either; uvloop's transports and scheduling are in
    C, where asyncio's selector loop and transports were about a seventh of the API's CPU per webhook
    delivery (py-spy at 400 events/s)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def with_head_timeout(seconds: float) -> type[LingeringH11Protocol]:
    """The protocol class with this head deadline (uvicorn builds one protocol per connection from a class)."""
    return type("HeadDeadlineH11Protocol", (LingeringH11Protocol,), {"head_timeout_s": seconds})


def uvicorn_config(api: FastAPI, settings: Settings, *, host: str, port: int, log_level: str) -> uvicorn.Config:
    """How `serve` runs uvicorn, with its limits: requests in flight (past them, 503), the request
    head's deadline, keep-alive, header size."""
    return uvicorn.Config(
        RequestsInFlight(api, limit=settings.max_requests_in_flight),
        host=host,
        port=port,
        # h11 (with a head deadline and a lingering close: api/lingering.py), named: `auto` would pick
        # httptools where it happens to be installed, which ignores h11_max_incomplete_event_size and
        # so has no bound on a request's head
        http=with_head_timeout(settings.request_head_timeout_s),
        timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=MAX_INCOMPLETE_EVENT_BYTES,
        log_config=None,
        log_level=log_level,
        # X-Forwarded-Proto/-For are believed only from REVIEWLOOP_TRUSTED_PROXIES (the Ingress, a local
        # proxy): the scheme decides the dashboard cookie's `Secure` flag and the client address in logs
        proxy_headers=True,
        forwarded_allow_ips=settings.trusted_proxies,
    )
