"""Request dependencies as `Annotated` aliases: what a route needs, resolved from the app's state.

They are `async def` even where nothing is awaited: FastAPI runs plain `def` dependencies in a thread
pool, three thread hops per webhook for a dictionary lookup.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import procrastinate
from fastapi import Depends, Header, HTTPException, Request, status

from agent.service_settings import Settings
from api.auth import Principal, match_env_token, match_stored_token
from api.body_limit import BodyReadSlots
from api.db import DbConnection, DbPool
from api.project_check import ProjectCheck
from api.triage import Scope


@dataclass(frozen=True)
class ServiceState:
    """Everything `create_app` resolved once at start: routes read it, never the environment."""

    settings: Settings
    scope: Scope
    env_tokens: list[tuple[str, str]]
    require_worker: bool
    worker_heartbeat_window_s: float
    webhook_body_reads: BodyReadSlots  # shared by the app's requests: the one mutable part
    # votes and replies from a project allowed only by its claimed path: GitLab confirms it first
    projects: ProjectCheck | None = None


async def get_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


async def get_pool(request: Request) -> DbPool:
    pool: DbPool = request.app.state.pool
    return pool


async def get_queue(request: Request) -> procrastinate.App:
    queue: procrastinate.App = request.app.state.queue
    return queue


async def get_connection(pool: Annotated[DbPool, Depends(get_pool)]) -> AsyncIterator[DbConnection]:
    async with pool.connection() as conn:
        yield conn


StateDep = Annotated[ServiceState, Depends(get_state)]
PoolDep = Annotated[DbPool, Depends(get_pool)]
QueueDep = Annotated[procrastinate.App, Depends(get_queue)]
ConnectionDep = Annotated[DbConnection, Depends(get_connection)]


async def require_api_client(
    state: StateDep, pool: PoolDep, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    """The API token presented as `Authorization: Bearer <token>`, with the projects it reaches;
    401 otherwise. Every route that reads or writes a project's data checks that scope."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "a bearer token is required", headers={"WWW-Authenticate": "Bearer"}
        )
    env_name = match_env_token(token, state.env_tokens)
    if env_name is not None:
        return Principal(env_name)  # a token from the environment is an admin token
    async with pool.connection() as conn:
        principal = await match_stored_token(conn, token)
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"}
        )
    return principal


ApiClientDep = Annotated[Principal, Depends(require_api_client)]
