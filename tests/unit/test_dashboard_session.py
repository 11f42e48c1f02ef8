"""The dashboard's cookie session, CSRF token and redirect target: pure functions, checked by hand."""

from __future__ import annotations

import pytest

from api.dashboard.session import (
    HOME,
    Viewer,
    csrf_matches,
    csrf_token,
    decode_session,
    encode_session,
    new_nonce,
    safe_next,
)

NONCE = "0" * 32


@pytest.mark.parametrize("token", ["rl_abc-DEF_123", "a:b;c=d é", "x", "==padding=="])
def test_session_cookie_round_trips_any_token_in_cookie_safe_characters(token: str) -> None:
    value = encode_session(token=token, nonce=NONCE)
    assert decode_session(value) == (NONCE, token)
    assert all(c.isalnum() or c in "-_." for c in value)


@pytest.mark.parametrize(
    "value",
    [None, "", "no-dot", f"{NONCE}.", "short.dG9rZW4", f"{'g' * 32}.dG9rZW4", f"{NONCE}.%%%", f"{NONCE}.gA"],
)
def test_malformed_cookies_are_no_session(value: str | None) -> None:
    assert decode_session(value) is None


def test_csrf_token_is_hmac_sha256_of_the_nonce_keyed_by_the_token() -> None:
    # openssl: printf 'reviewloop-dashboard-csrf:000…0' | openssl dgst -sha256 -hmac rl_secret
    assert (
        csrf_token(token="rl_secret", nonce=NONCE) == "a05cb025500ad374f26a667d03b10a1c133d0e8d9119be918c7fff02fb840315"
    )
    assert csrf_token(token="rl_secret", nonce="1" * 32) != csrf_token(token="rl_secret", nonce=NONCE)
    assert csrf_token(token="other", nonce=NONCE) != csrf_token(token="rl_secret", nonce=NONCE)


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


def test_votes_are_recorded_under_the_token_name() -> None:
    assert Viewer("alice", csrf=None).user_key == "dashboard:alice"
