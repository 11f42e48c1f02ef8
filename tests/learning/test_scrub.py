"""Secrets are replaced before text enters a dataset; ordinary code and paths are left alone."""

from __future__ import annotations

import json

import pytest

from learning.scrub import REDACTED, looks_like_random_token, scrub_secrets, shannon_entropy


def test_entropy_hand_computed() -> None:
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abab") == pytest.approx(1.0)
    assert shannon_entropy("abcd") == pytest.approx(2.0)


@pytest.mark.parametrize(
    "secret",
    [
        "glpat-Zx8kQ2mW9vB4nT7pR1sY",
        "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        "AKIAIOSFODNN7EXAMPLE",
        "sk-proj-4fGh7Jk9Lm2Np5Qr8St1Uv3Wx6Yz",
        "xoxb-123456789012-abcdefABCDEF",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "Q7vX2pL9mK4rT8wZ3nB6yH1cF5dJ0gS",  # no prefix, just random
    ],
)
def test_tokens_are_redacted(secret: str) -> None:
    text = f"client = Client(key={secret!r})\nprint('ok')"
    out = scrub_secrets(text)
    assert secret not in out
    assert REDACTED in out
    assert "print('ok')" in out


def test_assignment_values_are_redacted() -> None:
    text = 'DB_PASSWORD = "hunter2"\napi_key: \'letmein\'\nretries = "3"'
    out = scrub_secrets(text)
    assert "hunter2" not in out and "letmein" not in out
    assert 'DB_PASSWORD = "[REDACTED]"' in out
    assert 'retries = "3"' in out


def test_assignment_inside_json_string() -> None:
    # a diff line quoted inside a JSON completion: quotes are escaped
    blob = json.dumps({"why": 'adds password = "swordfish" in settings.py'})
    out = scrub_secrets(blob)
    assert "swordfish" not in out
    assert json.loads(out)["why"] == 'adds password = "[REDACTED]" in settings.py'


def test_private_key_block() -> None:
    text = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----\nafter"
    assert scrub_secrets(text) == f"before\n{REDACTED}\nafter"


def test_ordinary_text_is_kept() -> None:
    text = (
        "modified learning/strata/farthest_point_sample.py [python] +12 -3\n"
        "head 3e85aef0979797a1b2c3d4e5f60718293a4b5c6d\n"
        "def find_orders(conn: sqlite3.Connection, customer: str) -> list[tuple]:\n"
        "DEFAULT_TIMEOUT_SECONDS_FOR_REQUESTS = 30"
    )
    assert scrub_secrets(text) == text
    assert not looks_like_random_token("3e85aef0979797a1b2c3d4e5f60718293a4b5c6d")  # hex sha
    assert not looks_like_random_token("DEFAULT_TIMEOUT_SECONDS_FOR_REQUESTS")
