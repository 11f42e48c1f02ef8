"""Stable finding fingerprints.

A fingerprint names "the same problem" across re-runs, retries and small line shifts, so the
verifier can drop duplicates and the reporter can find what it already posted. It hashes what does
not move when unrelated lines are added above: the path, the category, the rule, and the evidence
text with whitespace collapsed. The line number is deliberately left out.
"""

from __future__ import annotations

import hashlib
import re

_WS = re.compile(r"\s+")
FINGERPRINT_LENGTH = 16  # 64 bits: collisions within one repository are negligible


def normalise_evidence(evidence: str) -> str:
    return _WS.sub(" ", evidence).strip()


def make_fingerprint(*, path: str, category: str, rule: str, evidence: str, title: str = "") -> str:
    """The fingerprint of a finding. `title` is used only when there is no evidence to anchor on."""
    anchor = normalise_evidence(evidence) or _WS.sub(" ", title.lower()).strip()
    raw = "\x1f".join((path, category, rule, anchor))
    return hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()[:FINGERPRINT_LENGTH]
