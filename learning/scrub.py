"""Secrets out of training data.

A merge request may carry a token in its diff or description; a model trained on it could repeat it
to anyone. Before any text enters a dataset we replace what looks like a secret with `[REDACTED]`:
strings with a known token prefix (GitLab, GitHub, Slack, AWS, OpenAI-style keys, JWTs), private key
blocks, the quoted value of an assignment to a secret-sounding name (`password = "..."`), and long
high-entropy strings that mix upper case, lower case and digits. The last rule errs towards
redacting: an occasional over-redacted identifier costs less than a leaked credential.
"""

from __future__ import annotations

import math
import re
from collections import Counter

REDACTED = "[REDACTED]"

KNOWN_TOKEN = re.compile(
    r"""
    (?:glpat|gldt|glptt|glrt|glsoat|gloas)-[A-Za-z0-9_\-]{16,}   # GitLab tokens
    | (?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}                     # GitHub tokens
    | github_pat_[A-Za-z0-9_]{20,}
    | xox[abposr]-[A-Za-z0-9\-]{10,}                               # Slack
    | (?:AKIA|ASIA)[0-9A-Z]{16}                                    # AWS access key id
    | AIza[0-9A-Za-z_\-]{35}                                       # Google API key
    | sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}                        # OpenAI/Anthropic-style keys
    | eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}   # JWT
    """,
    re.VERBOSE,
)

PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL
)

# `password = "hunter2"`, `api_key: 'abc'`, `"token": "abc"`, also with JSON-escaped quotes.
SECRET_NAME = r"[A-Za-z_]*(?:password|passwd|pwd|secret|token|api_?key|access_?key|private_?key|credential)s?"  # noqa: S105 - a pattern, not a password
SECRET_ASSIGNMENT = re.compile(
    rf"""(?P<head>\b{SECRET_NAME}\\?["']?\s*[:=]\s*(?P<quote>\\?["']))(?P<value>[^"'\\\n]{{1,200}})(?P=quote)""",
    re.IGNORECASE,
)

# Long runs of token characters; '/' and '.' split candidates so that paths are judged per segment.
TOKEN_CANDIDATE = re.compile(r"[A-Za-z0-9+=_\-]{20,}")
MIN_ENTROPY_BITS = 4.0  # bits per character; hex (≤ 4.0) such as commit SHAs stays readable


def shannon_entropy(text: str) -> float:
    """Bits per character of `text` by its own character frequencies."""
    if not text:
        return 0.0
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def looks_like_random_token(candidate: str) -> bool:
    """Long, high-entropy, and mixing upper case, lower case and digits: how generated keys look."""
    has_classes = (
        any(c.isupper() for c in candidate)
        and any(c.islower() for c in candidate)
        and any(c.isdigit() for c in candidate)
    )
    return has_classes and shannon_entropy(candidate) > MIN_ENTROPY_BITS


def scrub_secrets(text: str) -> str:
    """`text` with every secret-looking string replaced by `[REDACTED]`."""
    text = PRIVATE_KEY_BLOCK.sub(REDACTED, text)
    text = KNOWN_TOKEN.sub(REDACTED, text)
    text = SECRET_ASSIGNMENT.sub(
        lambda m: f"{m.group('head')}{REDACTED}{m.group('quote')}" if m.group("value") != REDACTED else m.group(0),
        text,
    )
    return TOKEN_CANDIDATE.sub(lambda m: REDACTED if looks_like_random_token(m.group(0)) else m.group(0), text)
