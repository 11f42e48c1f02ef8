"""Every request body is bounded before it is read: an ASGI middleware in front of every route.

A body larger than the route's limit is refused with 413 before the route sees it: at once when its
`Content-Length` says so, and otherwise as soon as the bytes streamed in (chunked transfer) pass the
limit, so the server never holds more than the limit plus one chunk of a body. Compose and a bare
`reviewloop serve` have no proxy in front to cap bodies (issue 11: a 150 MB POST to the feedback
API grew the server by 400 MB before its 401).

The webhook has its own, larger limit (GitLab's merge request hooks carry the MR's description and
changes); every other route takes `max_request_bytes`. Its route also bounds how many bodies are read
at once (`BodyReadSlots`) and how long one may take (api/routes/webhooks.py).

Every refusal made before a body is read whole says `Connection: close`: uvicorn then closes the
connection once it has answered. Kept open, the connection would go on taking the unread body, and
a client sending a byte every few seconds would hold it for ever (issue 21: still open after 150 s).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

WEBHOOK_PATH = "/webhooks/gitlab"
CLOSE_CONNECTION = {"Connection": "close"}


class BodyTooLarge(HTTPException):
    """Raised from `receive` when the streamed bytes pass the limit; the app's HTTP error handler
    answers it like any other refusal (413, `{"error": ...}`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"body exceeds {limit} bytes", headers=CLOSE_CONNECTION)


def limit_by_path(*, webhook_bytes: int, other_bytes: int) -> Callable[[str], int]:
    def limit_for(path: str) -> int:
        return webhook_bytes if path.rstrip("/") == WEBHOOK_PATH else other_bytes

    return limit_for


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, limit_for: Callable[[str], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(str(scope.get("path", "")))
        declared = declared_length(scope)
        if declared is not None and declared > limit:
            await refuse(send, BodyTooLarge(limit))
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as exc:
            # a route that reads the body outside FastAPI's handlers (none does today) lets it escape
            if started:
                raise
            await refuse(send, exc)


def declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


async def refuse(send: Send, error: BodyTooLarge) -> None:
    body = json.dumps({"error": error.detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyReadSlots:
    """How many request bodies are being read at once, up to `limit`: each slow sender holds one slot
    (and up to a body's limit of memory) until its body is in or its deadline passes.

    Used from the event loop only, so a counter needs no lock; a request that finds no free slot is
    refused at once rather than queued (a queue would hold its connection and headers meanwhile).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0

    def try_acquire(self) -> bool:
        if self.in_use >= self.limit:
            return False
        self.in_use += 1
        return True

    def release(self) -> None:
        self.in_use -= 1
