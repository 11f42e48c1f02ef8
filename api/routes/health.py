"""Liveness (the process answers) and readiness (database reachable, queue alive, worker beating)."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout

from api.deps import PoolDep, StateDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(state: StateDep, pool: PoolDep) -> JSONResponse:
    checks: dict[str, Any] = {"database": False, "queue": False, "workers": 0}
    try:
        async with pool.connection(timeout=2.0) as conn:
            await conn.execute("SELECT 1")
            checks["database"] = True
            cur = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS present")
            row = await cur.fetchone()
            checks["queue"] = bool(row and row["present"])
            if checks["queue"]:
                cur = await conn.execute(
                    "SELECT count(*) AS n FROM procrastinate_workers"
                    " WHERE last_heartbeat > now() - make_interval(secs => %s)",
                    (state.worker_heartbeat_window_s,),
                )
                row = await cur.fetchone()
                checks["workers"] = int(row["n"]) if row else 0
    except (psycopg.Error, PoolTimeout) as exc:
        checks["error"] = type(exc).__name__
    ready = checks["database"] and checks["queue"] and (checks["workers"] > 0 or not state.require_worker)
    return JSONResponse({"status": "ready" if ready else "not ready", **checks}, status_code=200 if ready else 503)
