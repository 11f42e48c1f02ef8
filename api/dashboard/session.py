"""The dashboard's browser session: an API token carried in a cookie, and the CSRF token that goes with it.

A browser cannot send `Authorization: Bearer` on a plain link, so the login form takes the API token
once and keeps it in an HttpOnly, SameSite=Strict cookie. Every request verifies the token again,
exactly as the bearer path does, so revoking a token ends its dashboard sessions at once and there
is no server-side session table to keep in step.

Each login draws a fresh random nonce that travels in the cookie beside the token. The CSRF token
that forms carry is HMAC-SHA256(key=token, nonce): per session, unforgeable without the token, and
checked statelessly with `hmac.compare_digest`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

SESSION_COOKIE = "rl_dashboard"
LOGIN_COOKIE = "rl_dashboard_login"  # double-submit token of the login form (no session exists yet)
COOKIE_PATH = "/dashboard"
SESSION_MAX_AGE_S = 8 * 3600  # a working day; the token itself stays valid, the browser just logs in again
LOGIN_MAX_AGE_S = 600  # long enough to paste a token into the form
NONCE_BYTES = 16
CSRF_CONTEXT = b"reviewloop-dashboard-csrf:"  # domain separation: this HMAC means nothing elsewhere
HOME = "/dashboard"
# Where a login may send the browser next: a dashboard path, never another host or scheme.
_SAFE_NEXT = re.compile(r"^/dashboard(?:/[A-Za-z0-9_\-/]*)?(?:\?[A-Za-z0-9_=&\-]*)?$")


@dataclass(frozen=True)
class Viewer:
    """Who is looking: the API token's name, and the CSRF token forms must echo (None without a cookie)."""

    name: str
    csrf: str | None

    @property
    def user_key(self) -> str:
        """The feedback row's user: one vote per token name, the latest wins."""
        return f"dashboard:{self.name}"


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def encode_session(*, token: str, nonce: str) -> str:
    """`<nonce>.<base64url(token)>`: cookie-safe whatever characters a configured token contains."""
    # unpadded: '=' would make the cookie a quoted string
    return f"{nonce}.{base64.urlsafe_b64encode(token.encode()).decode().rstrip('=')}"


def decode_session(value: str | None) -> tuple[str, str] | None:
    """(nonce, token) from a session cookie; None when absent or malformed."""
    if not value:
        return None
    nonce, sep, encoded = value.partition(".")
    if not sep or len(nonce) != 2 * NONCE_BYTES or not all(c in "0123456789abcdef" for c in nonce):
        return None
    try:
        token = base64.urlsafe_b64decode((encoded + "=" * (-len(encoded) % 4)).encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (nonce, token) if token else None


def csrf_token(*, token: str, nonce: str) -> str:
    return hmac.new(token.encode(), CSRF_CONTEXT + nonce.encode(), hashlib.sha256).hexdigest()


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
