"""The FastAPI application: webhooks, feedback and read API, health, metrics, the dashboard (`GET /` leads there).

Thin by design (STYLE.md rule 1): it authenticates, parses, deduplicates, persists, enqueues and
answers. It never imports torch, TRL or transformers — a test imports this module in a fresh
interpreter and checks that they stayed unloaded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import procrastinate
from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent.service_settings import Settings
from api.auth import parse_env_tokens
from api.body_limit import BodyLimitMiddleware, BodyReadSlots, limit_by_path
from api.db import DbPool, make_pool
from api.deps import ServiceState
from api.intake_batch import ReviewIntake
from api.project_check import project_check
from api.routes import dashboard, feedback, front_door, health, metrics, reviews, webhooks
from api.triage import Scope
from api.worker import QueueConfig, create_queue_app
from reviewers.kernel.errors import ConfigError


def service_state(settings: Settings, *, require_worker: bool, heartbeat_window_s: float) -> ServiceState:
    try:
        env_tokens = parse_env_tokens(settings.api_tokens)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    scope = Scope(
        projects=frozenset(settings.gitlab_project_allowlist),
        bot_user_id=settings.gitlab_bot_user_id,
        bot_username=settings.gitlab_bot_username,
    )
    return ServiceState(
        settings=settings,
        scope=scope,
        env_tokens=env_tokens,
        require_worker=require_worker,
        worker_heartbeat_window_s=heartbeat_window_s,
        projects=project_check(settings),
        webhook_body_reads=BodyReadSlots(settings.webhook_body_reads),
    )


def create_app(
    settings: Settings,
    *,
    pool: DbPool | None = None,
    queue: procrastinate.App | None = None,
    require_worker: bool = False,
    queue_config: QueueConfig | None = None,
) -> FastAPI:
    """Build the app. Without `pool`, one is opened on `settings.database_url` for the app's lifetime.

    `queue` is the procrastinate App used to defer jobs (opened on `pool` when not given).
    `require_worker` makes /readyz wait for a worker heartbeat (set by `reviewloop serve`, which runs
    one beside the API; API-only replicas stay ready while workers elsewhere restart).
    """
    if pool is None and not settings.database_url:
        raise ConfigError("REVIEWLOOP_DATABASE_URL is required here (`reviewloop serve` starts an embedded one)")
    qcfg = queue_config or QueueConfig()
    state = service_state(settings, require_worker=require_worker, heartbeat_window_s=qcfg.stalled_worker_timeout_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_pool = pool is None
        db = pool if pool is not None else make_pool(str(settings.database_url), max_size=settings.db_pool_size)
        if own_pool:
            await db.open(wait=True)
        own_queue = queue is None
        jobs = queue if queue is not None else create_queue_app(qcfg)
        if own_queue:
            await jobs.open_async(db)
        app.state.pool = db
        app.state.queue = jobs
        app.state.intake = intake = ReviewIntake(db)
        try:
            yield
        finally:
            await intake.drain()
            if own_queue:
                await jobs.close_async()
            if own_pool:
                await db.close()

    # the API's own description is public only where asked for: in production it would hand a
    # stranger the map of every route (issue 11)
    docs = settings.api_docs  # off unless asked for, a bare `serve` included (issue 40)
    app = FastAPI(
        title="reviewloop",
        version="0.1.0",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.add_middleware(
        BodyLimitMiddleware,
        limit_for=limit_by_path(webhook_bytes=settings.max_webhook_bytes, other_bytes=settings.max_request_bytes),
    )
    app.state.service = state
    if pool is not None:
        app.state.pool = pool
    if queue is not None:
        app.state.queue = queue

    # Starlette's class, not FastAPI's subclass: a body FastAPI cannot decode raises the former, and
    # every refusal must come in the one shape `{"error": ...}`
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return JSONResponse(
            {"error": f"{where}: {first.get('msg')}" if where else str(first.get("msg"))},
            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
        )

    for module in (webhooks, feedback, reviews, health, metrics, dashboard, front_door):
        app.include_router(module.router)
    return app
