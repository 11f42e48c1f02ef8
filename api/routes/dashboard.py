"""The dashboard: recent reviews with their findings and votes, acceptance over time, models and runs.

Server-rendered HTML behind the read API's tokens: a script sends `Authorization: Bearer`, a browser
logs in once with the token and gets a server-side session (a random id in an HttpOnly,
SameSite=Strict cookie, see `api.dashboard.session`) and its forms carry the session's CSRF token. Votes go through
`agent.store.feedback.record_vote` with source 'dashboard', one per token name, the latest wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from agent.context import NotReviewed
from agent.store import feedback as store_feedback
from agent.store import models as store_models
from agent.store import reviews as store_reviews
from agent.store import suppressions as store_suppressions
from agent.store.db import Pool, open_pool
from agent.store.feedback import VoteValue
from api.auth import hash_token, match_env_token, match_stored_token, principal_for_hash
from api.dashboard import pages, queries
from api.dashboard.charts import week_range
from api.dashboard.session import (
    COOKIE_PATH,
    HOME,
    LOGIN_COOKIE,
    LOGIN_MAX_AGE_S,
    SESSION_COOKIE,
    SESSION_MAX_AGE_S,
    Viewer,
    csrf_matches,
    csrf_token,
    end_session,
    find_session,
    new_nonce,
    safe_next,
    start_session,
)
from api.dashboard.templating import render
from api.deps import PoolDep, QueueDep, ServiceState, StateDep, require_api_client
from api.failures import list_failed_reviews, retry_review
from reviewers.kernel.errors import InputError

STORE_POOL_SIZE = 4  # page loads are few and short; the webhook path keeps the async pool to itself
PAGE_SIZE = 25
MAX_FORM_BYTES = 4096  # a vote or a login: a few short fields
MAX_WEEKS = 104
VOLUME_ROWS = 30
FAILED_ROWS = 20  # the newest failures on the first page; the CLI lists more (`reviewloop reviews failed`)
RETRY_NOTICES = {"retried": "The review was queued again; it appears in the list when it starts."}
SUPPRESSION_NOTICES = {"lifted": "The suppression was lifted: the rule's findings there count again."}
LIFTS_SHOWN = 50
VOTE_VALUES: dict[str, VoteValue] = {"1": 1, "-1": -1, "0": 0}  # 0 withdraws the viewer's vote
SECURITY_HEADERS = {
    # the pages need nothing but their own stylesheet; inline SVG presentation attributes are not styles
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@asynccontextmanager
async def store_pool(app: FastAPI) -> AsyncIterator[None]:
    """A small synchronous pool beside the app's async one: the store's repository functions use it."""
    pool = await asyncio.to_thread(open_pool, app.state.pool.conninfo, max_size=STORE_POOL_SIZE)
    app.state.dashboard_store = pool
    try:
        yield
    finally:
        await asyncio.to_thread(pool.close)


router = APIRouter(prefix="/dashboard", tags=["dashboard"], include_in_schema=False, lifespan=store_pool)


def get_store(request: Request) -> Pool:
    store: Pool = request.app.state.dashboard_store
    return store


StoreDep = Annotated[Pool, Depends(get_store)]


async def token_name(token: str, *, state: StateDep, pool: PoolDep) -> str | None:
    """The API token's name, checked exactly as the bearer path checks it (constant-time, revocation)."""
    name = match_env_token(token, state.env_tokens)
    if name is None:
        async with pool.connection() as conn:
            principal = await match_stored_token(conn, token)
        name = None if principal is None else principal.name
    return name


async def optional_viewer(
    request: Request, state: StateDep, pool: PoolDep, authorization: Annotated[str | None, Header()] = None
) -> Viewer | None:
    """A bearer header (a wrong one is a 401), else the session cookie; None when neither is valid."""
    if authorization is not None:
        client = await require_api_client(state, pool, authorization)
        return Viewer(client.name, csrf=None, projects=client.projects)
    session_id = request.cookies.get(SESSION_COOKIE)
    async with pool.connection() as conn:
        session = await find_session(conn, session_id)
        if session is None or session_id is None:
            return None
        name, token_hash = session
        # the token the session was opened with must still be valid (revoking it ends the session),
        # and its projects, read now, bound what the session sees
        holder = await principal_for_hash(conn, token_hash, state.env_tokens)
        if holder is None:
            return None
    return Viewer(name, csrf=csrf_token(session_id=session_id), session_id=session_id, projects=holder.projects)


def secure_cookies(request: Request, state: StateDep) -> bool:
    """`Secure` when the request came over https — behind a proxy, as the proxy's X-Forwarded-Proto
    says when it is among REVIEWLOOP_TRUSTED_PROXIES (uvicorn's forwarded_allow_ips) — and always
    in production, whatever the scheme looked like."""
    return request.url.scheme == "https" or state.settings.environment == "production"


def login_location(target: str) -> str:
    return f"{COOKIE_PATH}/login?next={quote(safe_next(target), safe='/')}"


async def require_viewer(request: Request, viewer: Annotated[Viewer | None, Depends(optional_viewer)]) -> Viewer:
    """Browsers without a valid session go to the login form; other clients get a 401."""
    if viewer is not None:
        return viewer
    if "text/html" in request.headers.get("accept", ""):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise HTTPException(
            status.HTTP_303_SEE_OTHER,
            "log in to see the dashboard",
            headers={"Location": login_location(target if request.method == "GET" else HOME)},
        )
    raise HTTPException(
        status.HTTP_401_UNAUTHORIZED, "an API token is required", headers={"WWW-Authenticate": "Bearer"}
    )


ViewerDep = Annotated[Viewer, Depends(require_viewer)]


async def read_form(request: Request) -> dict[str, str]:
    """A small urlencoded form body (the first value of each field); anything else is refused."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "expected a urlencoded form")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, "form too large")
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False, max_num_fields=16)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "malformed form") from exc
    form: dict[str, str] = {}
    for key, value in pairs:
        form.setdefault(key, value)
    return form


def require_csrf(viewer: Viewer, form: dict[str, str]) -> None:
    """A cookie session must echo its CSRF token; a bearer header is not sent cross-site, so needs none."""
    if viewer.csrf is not None and not csrf_matches(form.get("csrf"), viewer.csrf):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "missing or wrong CSRF token: reload the page and try again")


def page(template: str, *, viewer: Viewer | None, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = render(template, viewer=viewer, **context)
    return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)


def see_other(location: str) -> RedirectResponse:
    return RedirectResponse(location, status_code=status.HTTP_303_SEE_OTHER, headers=SECURITY_HEADERS)


# --- login ---------------------------------------------------------------------------------------


def login_page(
    request: Request, state: ServiceState, *, target: str, error: str | None, status_code: int = 200
) -> HTMLResponse:
    """The form, with a fresh double-submit token in a short-lived cookie (there is no session yet)."""
    nonce = new_nonce()
    response = page(
        "dashboard/login.html", viewer=None, status_code=status_code, csrf=nonce, next=safe_next(target), error=error
    )
    response.set_cookie(
        LOGIN_COOKIE,
        nonce,
        max_age=LOGIN_MAX_AGE_S,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request, state),
    )
    return response


@router.get("/login")
async def login_form(
    request: Request, state: StateDep, target: Annotated[str, Query(alias="next")] = HOME
) -> HTMLResponse:
    return login_page(request, state, target=target, error=None)


@router.post("/login")
async def login(request: Request, state: StateDep, pool: PoolDep) -> Response:
    form = await read_form(request)
    target = form.get("next", HOME)
    if not csrf_matches(form.get("csrf"), request.cookies.get(LOGIN_COOKIE)):
        return login_page(request, state, target=target, error="The form expired; try again.", status_code=403)
    token = form.get("token", "").strip()
    name = await token_name(token, state=state, pool=pool) if token else None
    if name is None:
        return login_page(request, state, target=target, error="Unknown or revoked API token.", status_code=401)
    async with pool.connection() as conn:
        session_id = await start_session(
            conn, token_name=name, token_hash=hash_token(token), max_age_s=SESSION_MAX_AGE_S
        )
    response = see_other(safe_next(target))
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=SESSION_MAX_AGE_S,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request, state),
    )
    response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
    return response


@router.post("/logout")
async def logout(request: Request, viewer: ViewerDep, pool: PoolDep) -> Response:
    require_csrf(viewer, await read_form(request))
    if viewer.session_id is not None:
        async with pool.connection() as conn:
            await end_session(conn, viewer.session_id)  # the cookie alone would stay usable until it expired
    response = see_other(f"{COOKIE_PATH}/login")
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
    return response


# --- pages ---------------------------------------------------------------------------------------


@router.get("")
async def recent_reviews(
    viewer: ViewerDep,
    store: StoreDep,
    pool: PoolDep,
    state: StateDep,
    page_no: Annotated[int, Query(alias="page", ge=1, le=10_000)] = 1,
    notice: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    reviews = await asyncio.to_thread(
        store_reviews.list_reviews,
        store,
        limit=PAGE_SIZE + 1,
        offset=(page_no - 1) * PAGE_SIZE,
        projects=viewer.project_list,
    )
    has_more = len(reviews) > PAGE_SIZE
    reviews = reviews[:PAGE_SIZE]
    counts = await asyncio.to_thread(queries.verdict_counts, store, [r["id"] for r in reviews])
    failures = await list_failed_reviews(pool, projects=viewer.project_list, limit=FAILED_ROWS) if page_no == 1 else []
    return page(
        "dashboard/reviews.html",
        viewer=viewer,
        gitlab_configured=state.settings.gitlab_configured,
        failures=failures,
        notice=RETRY_NOTICES.get(notice or ""),
        rows=pages.review_rows(reviews, counts),
        verdicts=pages.VERDICT_ORDER,
        verdict_labels=pages.VERDICT_LABELS,
        page_no=page_no,
        has_more=has_more,
        mr_label=pages.mr_label,
        mr_url=pages.merge_request_url,
    )


@router.get("/reviews/{review_id}")
async def review_detail(review_id: int, viewer: ViewerDep, store: StoreDep) -> HTMLResponse:
    review = await asyncio.to_thread(store_reviews.get_review, store, review_id)
    # outside the token's projects reads as absent, as on the read API: ids are no oracle
    if review is None or not (viewer.projects is None or review["project"] in viewer.projects):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"review {review_id} not found")
    # stored rows from before reasons were a closed set read as such entries too
    coverage = [NotReviewed.model_validate(n) for n in review["not_reviewed"] or []]
    return page(
        "dashboard/review.html",
        viewer=viewer,
        review={**review, "not_reviewed": coverage},
        label=pages.mr_label(
            project=review["project"], mr_iid=review["mr_iid"], review_id=review["id"], web_url=review["web_url"]
        ),
        mr_link=pages.merge_request_url(review["web_url"]),
        findings=pages.finding_views(review["findings"], user_key=viewer.user_key),
    )


@router.post("/findings/{finding_id}/vote")
async def vote(finding_id: int, request: Request, viewer: ViewerDep, store: StoreDep) -> Response:
    form = await read_form(request)
    require_csrf(viewer, form)
    value = VOTE_VALUES.get(form.get("value", ""))
    if value is None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "value must be 1, -1 or 0")
    # a finding outside the token's projects is "not found": nothing is stored
    review_id = await asyncio.to_thread(queries.review_of_finding, store, finding_id, projects=viewer.project_list)
    if review_id is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"finding {finding_id} not found")
    try:
        await asyncio.to_thread(
            store_feedback.record_vote, store, finding_id, user_key=viewer.user_key, source="dashboard", value=value
        )
    except InputError as exc:  # the finding went away between the two statements
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    return see_other(f"{COOKIE_PATH}/reviews/{review_id}#finding-{finding_id}")


@router.post("/failures/{event_id}/retry")
async def retry_failed_review(
    event_id: int, request: Request, viewer: ViewerDep, pool: PoolDep, queue: QueueDep
) -> Response:
    """Queue a failed review again (a token sees and retries its own projects' failures only)."""
    require_csrf(viewer, await read_form(request))
    try:
        await retry_review(pool, queue, event_id, by=viewer.user_key, projects=viewer.project_list)
    except InputError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc
    return see_other(f"{COOKIE_PATH}?notice=retried")


@router.get("/quality")
async def quality(
    viewer: ViewerDep, store: StoreDep, weeks: Annotated[int, Query(ge=1, le=MAX_WEEKS)] = 12
) -> HTMLResponse:
    today = datetime.now(UTC).date()
    week_list = week_range(last=today, count=weeks)
    since = pages.window_start(today, weeks=week_list)
    scope = viewer.project_list
    rows = await asyncio.to_thread(queries.weekly_acceptance, store, since=since, projects=scope)
    volumes = await asyncio.to_thread(queries.comment_volume, store, since=since, limit=VOLUME_ROWS, projects=scope)
    return page(
        "dashboard/quality.html",
        viewer=viewer,
        weeks=weeks,
        charts=pages.acceptance_charts(rows, week_list),
        totals=pages.acceptance_totals(rows),
        rules=pages.rule_acceptance(rows),
        volumes=volumes,
        volume_chart=pages.volume_chart(volumes),
        mr_label=pages.mr_label,
        mr_url=pages.merge_request_url,
    )


@router.get("/models")
async def models(viewer: ViewerDep, store: StoreDep) -> HTMLResponse:
    versions = await asyncio.to_thread(store_models.list_versions, store)
    runs = await asyncio.to_thread(store_models.list_runs, store, limit=50)
    return page(
        "dashboard/models.html",
        viewer=viewer,
        versions=versions,
        names=pages.version_names(versions),
        runs=pages.run_views(runs, versions),
    )


@router.get("/suppressions")
async def suppressions(
    viewer: ViewerDep, store: StoreDep, notice: Annotated[str | None, Query(max_length=200)] = None
) -> HTMLResponse:
    """The suppressions in force in the viewer's projects (who, when, why), each with its undo, and
    the latest lifts (issue 40)."""
    active = await asyncio.to_thread(store_suppressions.active_suppressions, store, projects=viewer.project_list)
    lifts = await asyncio.to_thread(
        store_suppressions.recent_lifts, store, projects=viewer.project_list, limit=LIFTS_SHOWN
    )
    labels = await asyncio.to_thread(
        queries.project_labels, store, sorted({s.project for s in active} | {lift.project for lift in lifts})
    )
    return page(
        "dashboard/suppressions.html",
        viewer=viewer,
        active=active,
        lifts=lifts,
        project_label=lambda project: labels.get(project, project),
        notice=SUPPRESSION_NOTICES.get(notice or ""),
    )


@router.post("/suppressions/lift")
async def lift_suppression(request: Request, viewer: ViewerDep, store: StoreDep) -> Response:
    """Undo a suppression: an authenticated person whose token covers the project lifts it, saying why."""
    form = await read_form(request)
    require_csrf(viewer, form)
    project, rule, scope = form.get("project", ""), form.get("rule", ""), form.get("path_scope", "")
    reason = form.get("reason", "").strip()
    if not project or not rule or not scope:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "project, rule and path_scope are required")
    if not reason:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "say why the suppression is lifted")
    # outside the token's projects reads as absent: nothing is lifted, nothing is told
    if viewer.projects is not None and project not in viewer.projects:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such suppression")
    try:
        await asyncio.to_thread(
            store_suppressions.lift,
            store,
            project=project,
            rule=rule,
            path_scope=scope,
            by=viewer.user_key,
            reason=reason,
        )
    except InputError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    return see_other(f"{COOKIE_PATH}/suppressions?notice=lifted")


@router.get("/static/dashboard.css")
async def stylesheet() -> Response:
    css = files("api").joinpath("static", "dashboard.css").read_text()
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=3600"})
