"""How `reviewloop serve` runs uvicorn: what one HTTP connection may cost, and the protocol it speaks.

uvicorn's defaults leave connections unbounded; the limits of a request's body (size, deadline,
concurrent reads) are the webhook route's (api/routes/webhooks.py) and the body-limit middleware's.
"""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI

from agent.service_settings import Settings
from api.lingering import LingeringH11Protocol

KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this (uvicorn's default, stated)
# The request line and headers h11 buffers before it answers 400: a hook's head is a few hundred
# bytes; h11's own default, stated so that it cannot drift.
MAX_INCOMPLETE_EVENT_BYTES = 16 * 1024


def uvicorn_config(api: FastAPI, settings: Settings, *, host: str, port: int, log_level: str) -> uvicorn.Config:
    """How `serve` runs uvicorn, with its limits: connections (past them, 503), keep-alive, header size."""
    return uvicorn.Config(
        api,
        host=host,
        port=port,
        # h11 (with a lingering close: api/lingering.py), named: `auto` would pick httptools where it
        # happens to be installed, which ignores h11_max_incomplete_event_size and so has no bound on
        # a request's head
        http=LingeringH11Protocol,
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=MAX_INCOMPLETE_EVENT_BYTES,
        log_config=None,
        log_level=log_level,
        # X-Forwarded-Proto/-For are believed only from REVIEWLOOP_TRUSTED_PROXIES (the Ingress, a local
        # proxy): the scheme decides the dashboard cookie's `Secure` flag and the client address in logs
        proxy_headers=True,
        forwarded_allow_ips=settings.trusted_proxies,
    )
