"""The dashboard's browser session: a server-side session row, and the CSRF token that goes with it.

A browser cannot send `Authorization: Bearer` on a plain link, so the login form takes the API token
once, checks it, and starts a session: a random id (256 bits) goes into an HttpOnly, SameSite=Strict
cookie, and `dashboard_sessions` keeps its sha256 (a leaked table opens nothing), the token's name,
the token's sha256 and an expiry. Every request looks the session up and checks again that the
token it was opened with is still valid, so revoking the token ends its sessions at once; logout
revokes the session itself on the server (deleting the cookie alone would leave it usable, issue 11).

The CSRF token that forms carry is HMAC-SHA256(key=session id, context): per session, unforgeable
without the cookie, and checked statelessly with `hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from api.db import DbConnection
from api.review_reads import token_voter

SESSION_COOKIE = "rl_dashboard"
LOGIN_COOKIE = "rl_dashboard_login"  # double-submit token of the login form (no session exists yet)
COOKIE_PATH = "/dashboard"
SESSION_MAX_AGE_S = 8 * 3600  # a working day: the server refuses the session after it, whatever the browser keeps
LOGIN_MAX_AGE_S = 600  # long enough to paste a token into the form
NONCE_BYTES = 16
SESSION_ID_BYTES = 32
CSRF_CONTEXT = b"reviewloop-dashboard-csrf:"  # domain separation: this HMAC means nothing elsewhere
HOME = "/dashboard"
# Where a login may send the browser next: a dashboard path, never another host or scheme.
_SAFE_NEXT = re.compile(r"^/dashboard(?:/[A-Za-z0-9_\-/]*)?(?:\?[A-Za-z0-9_=&\-]*)?$")


@dataclass(frozen=True)
class Viewer:
    """Who is looking: the API token's name, and the CSRF token forms must echo (None without a cookie)."""

    name: str
    csrf: str | None
    session_id: str | None = None  # the cookie session this request came with (None for a bearer header)
    projects: frozenset[str] | None = None  # the token's projects (None: an admin token, every project)

    @property
    def project_list(self) -> list[str] | None:
        return None if self.projects is None else sorted(self.projects)

    @property
    def user_key(self) -> str:
        """The feedback row's voter: the token, as through the API (one person per token, the latest vote wins)."""
        return token_voter(self.name)


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def new_session_id() -> str:
    return secrets.token_urlsafe(SESSION_ID_BYTES)


def session_id_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def csrf_token(*, session_id: str) -> str:
    return hmac.new(session_id.encode(), CSRF_CONTEXT, hashlib.sha256).hexdigest()


async def start_session(conn: DbConnection, *, token_name: str, token_hash: str, max_age_s: int) -> str:
    """A new session for the token that just logged in; returns its id (for the cookie only)."""
    session_id = new_session_id()
    await conn.execute(
        "INSERT INTO dashboard_sessions (id_hash, token_name, token_hash, expires_at)"
        " VALUES (%s, %s, %s, now() + make_interval(secs => %s))",
        (session_id_hash(session_id), token_name, token_hash, max_age_s),
    )
    return session_id


async def find_session(conn: DbConnection, session_id: str | None) -> tuple[str, str] | None:
    """(token name, token hash) of a live session: known, not expired, not revoked; else None."""
    if not session_id or len(session_id) > 2 * SESSION_ID_BYTES:
        return None
    cur = await conn.execute(
        "SELECT token_name, token_hash FROM dashboard_sessions"
        " WHERE id_hash = %s AND revoked_at IS NULL AND expires_at > now()",
        (session_id_hash(session_id),),
    )
    row = await cur.fetchone()
    return (str(row["token_name"]), str(row["token_hash"])) if row else None


async def end_session(conn: DbConnection, session_id: str) -> None:
    await conn.execute(
        "UPDATE dashboard_sessions SET revoked_at = now() WHERE id_hash = %s AND revoked_at IS NULL",
        (session_id_hash(session_id),),
    )


def csrf_matches(presented: str | None, expected: str | None) -> bool:
    """Constant-time equality; a missing value on either side never matches."""
    if not presented or not expected:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def safe_next(target: str | None) -> str:
    """`target` when it is a dashboard path, else the dashboard's home: no open redirect."""
    if target and _SAFE_NEXT.match(target) and "//" not in target:
        return target
    return HOME
