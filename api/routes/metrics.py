"""GET /metrics in Prometheus' text format, for the holder of REVIEWLOOP_METRICS_TOKEN only.

Queue depth, verdict counts and review latencies are business data about every project the service
reviews; unauthenticated, they were readable by anyone who reached the API, and each scrape ran
queries over whole tables (issue 40). Without a token configured the route is off (404); the
database's counts are read at most once per `metrics_cache_s` however often the route is asked.
"""

from __future__ import annotations

import time
from typing import Annotated

import psycopg
from fastapi import APIRouter, Header, HTTPException, Request, status
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from psycopg_pool import PoolTimeout

from api.auth import token_matches
from api.deps import PoolDep, StateDep
from api.metrics import DatabaseSnapshot, exposition, read_snapshot

router = APIRouter(tags=["operations"])


@router.get("/metrics")
async def metrics(
    request: Request, state: StateDep, pool: PoolDep, authorization: Annotated[str | None, Header()] = None
) -> Response:
    settings = state.settings
    if settings.metrics_token is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "Not Found")
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token_matches(presented.strip(), settings.metrics_token):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "the metrics token is required", headers={"WWW-Authenticate": "Bearer"}
        )
    cached: tuple[float, DatabaseSnapshot] | None = getattr(request.app.state, "metrics_snapshot", None)
    now = time.monotonic()
    if cached is not None and now - cached[0] < settings.metrics_cache_s:
        snap = cached[1]
    else:
        try:
            async with pool.connection(timeout=2.0) as conn:
                snap = await read_snapshot(conn)
        except (psycopg.Error, PoolTimeout):
            snap = DatabaseSnapshot(database_up=False)
        request.app.state.metrics_snapshot = (now, snap)
    return Response(exposition(snap), media_type=CONTENT_TYPE_LATEST)
