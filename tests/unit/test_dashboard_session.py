"""The dashboard's cookie session, CSRF token and redirect target: pure functions, checked by hand."""

from __future__ import annotations

import hashlib

import pytest

from api.dashboard.session import (
    HOME,
    Viewer,
    csrf_matches,
    csrf_token,
    new_nonce,
    new_session_id,
    safe_next,
    session_id_hash,
)
from api.review_reads import token_voter

NONCE = "0" * 32
CSRF_OF_SESSION_ONE = "d5f1ec624a362d19ed129fb81bd2d5f9bba0edfd9b7d4dcc7b0a1d5b5f11e2fb"


def test_session_ids_are_random_cookie_safe_and_stored_hashed() -> None:
    first, second = new_session_id(), new_session_id()
    assert first != second and len(first) >= 43  # 256 bits, base64url
    assert all(c.isalnum() or c in "-_" for c in first)
    assert session_id_hash(first) == hashlib.sha256(first.encode()).hexdigest() != first


def test_csrf_token_is_hmac_sha256_of_the_context_keyed_by_the_session_id() -> None:
    # openssl: printf 'reviewloop-dashboard-csrf:' | openssl dgst -sha256 -hmac session-one
    assert csrf_token(session_id="session-one") == CSRF_OF_SESSION_ONE
    assert csrf_token(session_id="session-two") != csrf_token(session_id="session-one")


def test_csrf_comparison_never_matches_missing_values() -> None:
    assert csrf_matches("abc", "abc")
    assert not csrf_matches("abc", "abd")
    assert not csrf_matches(None, "abc") and not csrf_matches("abc", None) and not csrf_matches("", "")


def test_nonces_are_fresh_hex() -> None:
    first, second = new_nonce(), new_nonce()
    assert first != second and len(first) == 32 and int(first, 16) >= 0


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/dashboard", "/dashboard"),
        ("/dashboard/reviews/3", "/dashboard/reviews/3"),
        ("/dashboard/quality?weeks=12", "/dashboard/quality?weeks=12"),
        ("/dashboard?page=2", "/dashboard?page=2"),
        (None, HOME),
        ("", HOME),
        ("//evil.example/dashboard", HOME),
        ("/dashboard//evil.example", HOME),
        ("https://evil.example/dashboard", HOME),
        ("/dashboardevil", HOME),
        ("/dashboard/../api/v1/reviews", HOME),
        ("/api/v1/reviews", HOME),
        ("/dashboard\\evil", HOME),
    ],
)
def test_login_redirects_only_to_dashboard_paths(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected


def test_votes_are_recorded_under_the_token_the_same_voter_as_through_the_api() -> None:
    assert Viewer("alice", csrf=None).user_key == "token:alice" == token_voter("alice")
