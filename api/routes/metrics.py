"""GET /metrics in Prometheus' text format."""

from __future__ import annotations

import psycopg
from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from psycopg_pool import PoolTimeout

from api.deps import PoolDep
from api.metrics import DatabaseSnapshot, exposition, read_snapshot

router = APIRouter(tags=["operations"])


@router.get("/metrics")
async def metrics(pool: PoolDep) -> Response:
    try:
        async with pool.connection(timeout=2.0) as conn:
            snap = await read_snapshot(conn)
    except (psycopg.Error, PoolTimeout):
        snap = DatabaseSnapshot(database_up=False)
    return Response(exposition(snap), media_type=CONTENT_TYPE_LATEST)
