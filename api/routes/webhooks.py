"""POST /webhooks/gitlab: authenticate, parse, deduplicate, persist, enqueue, answer — nothing slower.

GitLab waits 10 s and disables a hook after repeated failures, so the handler does no GitLab call
and no review work.

The secret is checked from the headers before a byte of the body is read: a sender without one of
our secrets gets its 401 at once, whatever its body does, and costs no memory (issue 21: 100 such
senders trickling 5 MiB bodies took the API from 128 to 634 MB). An authenticated body is then read
with a size limit, a deadline for the whole of it, and a cap on how many are read at once.

One exception: a vote or reply from a project the allow-list admits only by the path it claims is
confirmed with GitLab first (api/project_check.py: cached per path, a 3 s timeout, no retries).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import procrastinate
import psycopg
from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from starlette.requests import ClientDisconnect

from api.auth import matches_any_secret, token_matches, webhook_secret_for
from api.body_limit import CLOSE_CONNECTION, BodyReadSlots, BodyTooLarge
from api.db import DbPool
from api.deps import ServiceState
from api.gitlab_hooks import HANDLED_KINDS, HookValidationError, ProjectIdError, parse_hook, project_keys
from api.intake import Delivery, IntakeResult, accept, record_event
from api.intake_batch import ReviewIntake
from api.logs import log_context
from api.metrics import WEBHOOK_BODY_READS, WEBHOOK_OUTCOMES, WEBHOOK_SECONDS
from api.triage import ReviewRequest, triage
from reviewers.kernel.errors import PlatformUnavailableError

logger = logging.getLogger(__name__)
router = APIRouter(tags=["webhooks"])


BUSY_RETRY_AFTER_S = 1  # a body read takes milliseconds when its sender is not stalling
# GitLab's Idempotency-Key and X-Gitlab-Webhook-UUID are UUIDs (36 characters) and object kinds are
# words; the key is indexed, and a B-tree entry over ~2,700 bytes is refused by Postgres, which used
# to read as "database unavailable" (503) and so was retried by GitLab for ever (issue 40)
MAX_DELIVERY_KEY_CHARS = 256


async def read_bounded_body(request: Request, *, limit: int, deadline_s: float, slots: BodyReadSlots) -> bytes:
    """The whole body within `deadline_s`; 413 as soon as it is known to exceed `limit` bytes (the rest
    is never read), 408 when the deadline passes first. The deadline is for the whole body, not per
    chunk: a byte every few seconds never resets it.

    A body still coming after its first chunk takes one of `slots` while the rest streams in (past
    the cap, 503 with Retry-After): that bounds what slow senders make the API hold. A body that came
    whole with its first chunk (a hook's few kilobytes, sent with its headers) needs no slot: under
    load many requests are between their headers and their body at once although nothing is slow,
    and holding a slot for each made 600 events/s answer 503 to half of them (issue 40)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(f"body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    slotted = False
    try:
        async with asyncio.timeout(deadline_s):
            more = True
            while more:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                chunk = message.get("body", b"")
                more = bool(message.get("more_body", False))
                size += len(chunk)
                if size > limit:
                    raise too_large(f"body exceeds {limit} bytes")
                chunks.append(chunk)
                if more and not slotted:
                    if not slots.try_acquire():
                        raise refuse(
                            status.HTTP_503_SERVICE_UNAVAILABLE,
                            "busy",
                            f"{slots.limit} webhook bodies are being read; retry shortly",
                            headers={**CLOSE_CONNECTION, "Retry-After": str(BUSY_RETRY_AFTER_S)},
                        )
                    slotted = True
                    WEBHOOK_BODY_READS.inc()
    except BodyTooLarge as exc:  # the app's middleware counted the streamed bytes first
        raise too_large(str(exc.detail)) from None
    except TimeoutError:
        raise refuse(
            status.HTTP_408_REQUEST_TIMEOUT,
            "timeout",
            f"the body did not arrive within {deadline_s:g} s ({size} bytes came)",
            headers=CLOSE_CONNECTION,
        ) from None
    except ClientDisconnect:
        # nobody reads this answer; the outcome is counted and nothing is stored
        raise refuse(status.HTTP_400_BAD_REQUEST, "disconnected", "the client left before its body was in") from None
    finally:
        if slotted:
            slots.release()
            WEBHOOK_BODY_READS.dec()
    return b"".join(chunks)


def too_large(message: str) -> HTTPException:
    return refuse(status.HTTP_413_CONTENT_TOO_LARGE, "too_large", message, headers=CLOSE_CONNECTION)


def decode_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        # RecursionError: thousands of nested brackets exhaust the decoder's stack; ValueError (besides
        # JSONDecodeError): an integer longer than Python's 4,300-digit conversion limit. A bad body, not a bug
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


def refuse(code: int, outcome: str, message: str, *, headers: dict[str, str] | None = None) -> HTTPException:
    WEBHOOK_OUTCOMES.labels(outcome).inc()
    return HTTPException(code, message, headers=headers)


@router.post("/webhooks/gitlab", status_code=status.HTTP_202_ACCEPTED)
async def gitlab_webhook(request: Request) -> JSONResponse:
    # the app's state is read here rather than through FastAPI dependencies: solving four of them
    # took a fifth of the API's CPU per delivery at 400 events/s (py-spy, issue 40 Done-when 4)
    started = time.perf_counter()
    app_state = request.app.state
    try:
        return await _handle(
            request, app_state.service, app_state.pool, app_state.queue, getattr(app_state, "intake", None)
        )
    finally:
        WEBHOOK_SECONDS.observe(time.perf_counter() - started)


async def _handle(
    request: Request, state: ServiceState, pool: DbPool, queue: procrastinate.App, intake: ReviewIntake | None
) -> JSONResponse:
    settings = state.settings
    presented = request.headers.get("x-gitlab-token")
    # authentication from the headers, before a byte of the body is read: a sender without any of
    # our secrets gets its answer now, and its connection is closed rather than left to trickle
    if not matches_any_secret(
        presented, project_secrets=settings.project_secrets, global_secret=settings.webhook_secret
    ):
        raise refuse(
            status.HTTP_401_UNAUTHORIZED, "unauthorized", "missing or wrong X-Gitlab-Token", headers=CLOSE_CONNECTION
        )
    body = await read_bounded_body(
        request,
        limit=settings.max_webhook_bytes,
        deadline_s=settings.webhook_body_timeout_s,
        slots=state.webhook_body_reads,
    )
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
    idempotency_key = request.headers.get("idempotency-key") or None
    webhook_uuid = request.headers.get("x-gitlab-webhook-uuid") or None
    if any(len(value) > MAX_DELIVERY_KEY_CHARS for value in (idempotency_key or "", webhook_uuid or "", kind)):
        raise refuse(
            status.HTTP_400_BAD_REQUEST, "invalid", f"a delivery key is longer than {MAX_DELIVERY_KEY_CHARS} characters"
        )
    delivery = Delivery(
        event_kind=kind,
        idempotency_key=idempotency_key,
        webhook_uuid=webhook_uuid,
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
                    pool,
                    queue,
                    delivery,
                    decision,
                    bot_user_id=settings.gitlab_bot_user_id,
                    projects=state.projects,
                    intake=intake,
                )
                logger.info("webhook accepted", extra={"status": result.status, "event_kind": kind})
                return answer(result)
        except (psycopg.DataError, psycopg.errors.ProgramLimitExceeded, UnicodeEncodeError) as exc:
            # values Postgres cannot keep (a NUL character or a lone surrogate in a string, NaN, an
            # integer beyond its column, a key too long for its index): the delivery itself is bad,
            # and retrying it cannot help, so not 503
            logger.warning("webhook not stored: unstorable values", extra={"error": type(exc).__name__})
            raise refuse(status.HTTP_400_BAD_REQUEST, "invalid", "the body holds values that cannot be stored") from exc
        except PlatformUnavailableError as exc:
            # a vote from a project allowed by its claimed path, and GitLab cannot confirm the path
            # now: nothing was stored, and GitLab's retry of this delivery is counted once it can
            logger.warning("webhook not stored: GitLab unavailable", extra={"error": type(exc).__name__})
            raise refuse(status.HTTP_503_SERVICE_UNAVAILABLE, "unavailable", "GitLab unavailable") from exc
        except (psycopg.Error, PoolTimeout) as exc:
            # nothing was committed; GitLab retries the delivery with the same Idempotency-Key (a
            # unique violation on the queueing lock means a job was deferred outside intake
            # meanwhile: the retry supersedes it)
            logger.error("webhook not stored: database unavailable", extra={"error": type(exc).__name__})
            raise refuse(status.HTTP_503_SERVICE_UNAVAILABLE, "unavailable", "database unavailable") from exc
