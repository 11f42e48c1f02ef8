"""The environment fingerprint: a hash of the merge requests' content, so results are paired only
with results over the same merge requests.

Case ids are positional (`envgen-0007` is the seventh MR of whatever packages were installed), so two
runs on machines with other site-packages share every id and differ in most MRs (issue 41: the H100
section of bench/RESULTS.md was paired against other MRs that way). The fingerprint covers what a
review and its reward depend on — the diff, the files at head, the labels, the team's votes and
history, the budget, the split — in case order; comparisons refuse a mismatch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from learning.replay import ReplayCase
from reviewers.kernel.errors import InputError

FINGERPRINT_CHARS = 16  # 64 bits: collisions between two environments are not a practical concern


def environment_fingerprint(cases: Sequence[ReplayCase]) -> str:
    """A short hex digest of the cases' content, in order."""
    digest = hashlib.sha256()
    for case in cases:
        content = {
            "id": case.case_id,
            "split": case.split,
            "diff": case.diff,
            "files": case.files,
            "config": case.config_text,
            "findings": [f.model_dump(mode="json") for f in case.findings],
            "budget": case.review_budget,
            "history": case.history,
            "votes": {k: list(v) for k, v in case.rule_votes.items()},
            "team": case.team,
        }
        digest.update(json.dumps(content, sort_keys=True, separators=(",", ":")).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:FINGERPRINT_CHARS]


def require_same_environment(left: str | None, right: str | None, *, what: str) -> None:
    """Refuse to compare results over different merge requests; a side without a fingerprint (recorded
    before fingerprints existed) is let through only by the caller, who must say it is unverified."""
    if left is not None and right is not None and left != right:
        raise InputError(
            f"{what}: the environments differ (fingerprint {left} vs {right}): they are over other merge "
            "requests, so they cannot be paired; rerun one of them on the same environment"
        )
