"""POST /webhooks/gitlab: authenticate, parse, deduplicate, persist, enqueue, answer — nothing slower.

GitLab waits 10 s and disables a hook after repeated failures, so the handler does no GitLab call
and no review work; the body is read with a hard size limit before anything else happens.

One exception: a vote or reply from a project the allow-list admits only by the path it claims is
confirmed with GitLab first (api/project_check.py: cached per path, a 3 s timeout, no retries).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import psycopg
from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout

from api.auth import matches_any_secret, token_matches, webhook_secret_for
from api.deps import PoolDep, QueueDep, StateDep
from api.gitlab_hooks import HANDLED_KINDS, HookValidationError, ProjectIdError, parse_hook, project_keys
from api.intake import Delivery, IntakeResult, accept, record_event
from api.logs import log_context
from api.metrics import WEBHOOK_OUTCOMES, WEBHOOK_SECONDS
from api.triage import ReviewRequest, triage

logger = logging.getLogger(__name__)
router = APIRouter(tags=["webhooks"])


async def read_bounded_body(request: Request, limit: int) -> bytes:
    """The body, or 413 as soon as it is known to exceed `limit` bytes (the rest is never read)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def decode_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        # RecursionError: thousands of nested brackets exhaust the decoder's stack; a bad body, not a bug
        return None
    return value if isinstance(value, dict) else None


def answer(result: IntakeResult) -> JSONResponse:
    WEBHOOK_OUTCOMES.labels(result.status).inc()
    if result.status == "queued":
        return JSONResponse(
            {"status": "queued", "event_id": result.event_id, "job_id": result.job_id}, status.HTTP_202_ACCEPTED
        )
    body: dict[str, Any] = {"status": result.status, "event_id": result.event_id}
    if result.reason:
        body["reason"] = result.reason
    return JSONResponse(body, status.HTTP_200_OK)


def refuse(code: int, outcome: str, message: str) -> HTTPException:
    WEBHOOK_OUTCOMES.labels(outcome).inc()
    return HTTPException(code, message)


@router.post("/webhooks/gitlab", status_code=status.HTTP_202_ACCEPTED)
async def gitlab_webhook(request: Request, state: StateDep, pool: PoolDep, queue: QueueDep) -> JSONResponse:
    started = time.perf_counter()
    try:
        return await _handle(request, state, pool, queue)
    finally:
        WEBHOOK_SECONDS.observe(time.perf_counter() - started)


async def _handle(request: Request, state: StateDep, pool: PoolDep, queue: QueueDep) -> JSONResponse:
    settings = state.settings
    try:
        body = await read_bounded_body(request, settings.max_webhook_bytes)
    except HTTPException as exc:
        WEBHOOK_OUTCOMES.labels("too_large").inc()
        raise exc
    presented = request.headers.get("x-gitlab-token")
    # authentication before parsing: a sender without any of our secrets makes us parse nothing
    if not matches_any_secret(
        presented, project_secrets=settings.project_secrets, global_secret=settings.webhook_secret
    ):
        raise refuse(status.HTTP_401_UNAUTHORIZED, "unauthorized", "missing or wrong X-Gitlab-Token")
    payload = decode_object(body)
    if payload is None:
        raise refuse(status.HTTP_400_BAD_REQUEST, "invalid", "body is not a JSON object")
    try:
        project_id, project_path = project_keys(payload)
    except ProjectIdError as exc:
        raise refuse(status.HTTP_400_BAD_REQUEST, "invalid", str(exc)) from exc
    # authorisation: the secret must be the one of the project the body names, by its id alone
    secret = webhook_secret_for(
        project_id=project_id, project_secrets=settings.project_secrets, global_secret=settings.webhook_secret
    )
    if not token_matches(presented, secret):
        raise refuse(status.HTTP_401_UNAUTHORIZED, "unauthorized", "missing or wrong X-Gitlab-Token")
    kind = payload.get("object_kind")
    if not isinstance(kind, str) or not kind:
        raise refuse(status.HTTP_400_BAD_REQUEST, "invalid", "body has no object_kind")
    delivery = Delivery(
        event_kind=kind,
        idempotency_key=request.headers.get("idempotency-key") or None,
        webhook_uuid=request.headers.get("x-gitlab-webhook-uuid") or None,
        payload=payload,
        project_id=project_id,
        project_path=project_path,
    )
    with log_context(project=project_path or project_id):
        try:
            if kind not in HANDLED_KINDS:
                result = await record_event(pool, delivery, status="ignored", reason=f"{kind} events are not handled")
                return answer(result)
            try:
                hook = parse_hook(payload)
            except HookValidationError as exc:
                raise refuse(status.HTTP_400_BAD_REQUEST, "invalid", str(exc)) from exc
            decision = triage(hook, state.scope)
            mr_iid = decision.mr_iid if isinstance(decision, ReviewRequest) else None
            head_sha = decision.head_sha if isinstance(decision, ReviewRequest) else None
            with log_context(mr_iid=mr_iid, head_sha=head_sha):
                result = await accept(
                    pool, queue, delivery, decision, bot_user_id=settings.gitlab_bot_user_id, projects=state.projects
                )
                logger.info("webhook accepted", extra={"status": result.status, "event_kind": kind})
                return answer(result)
        except (psycopg.DataError, UnicodeEncodeError) as exc:
            # values Postgres cannot keep (a NUL character or a lone surrogate in a string, NaN, an
            # integer beyond its column): the delivery itself is bad, and retrying it cannot help
            logger.warning("webhook not stored: unstorable values", extra={"error": type(exc).__name__})
            raise refuse(status.HTTP_400_BAD_REQUEST, "invalid", "the body holds values that cannot be stored") from exc
        except (psycopg.Error, PoolTimeout) as exc:
            # nothing was committed; GitLab retries the delivery with the same Idempotency-Key (a
            # unique violation on the queueing lock means a job was deferred outside intake
            # meanwhile: the retry supersedes it)
            logger.error("webhook not stored: database unavailable", extra={"error": type(exc).__name__})
            raise refuse(status.HTTP_503_SERVICE_UNAVAILABLE, "unavailable", "database unavailable") from exc
