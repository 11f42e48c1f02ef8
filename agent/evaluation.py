"""Scoring reported findings against labeled ones (the dev set's matching rule).

A reported finding matches an expected one when the path and category are equal and the reported
line range comes within `LINE_TOLERANCE` lines of the expected line; each expected item is matched
at most once. A finding on a `negatives` line, or one that matches nothing, counts against
precision. The evaluation command, the replay environment's reward and the promotion gate all use
this one function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from reviewers.kernel.contracts import CATEGORIES, Finding

LINE_TOLERANCE = 3


class ExpectedFinding(BaseModel):
    path: str
    line: int
    category: str
    description: str = ""
    severity: str = "medium"


class NegativeLine(BaseModel):
    path: str
    line: int
    note: str = ""


@dataclass
class MatchResult:
    true_positives: list[tuple[Finding, ExpectedFinding]] = field(default_factory=list)
    false_positives: list[Finding] = field(default_factory=list)
    missed: list[ExpectedFinding] = field(default_factory=list)
    on_negatives: list[Finding] = field(default_factory=list)


def _near(f: Finding, line: int) -> bool:
    lo, hi = min(f.line, f.end_line), max(f.line, f.end_line)
    return lo - LINE_TOLERANCE <= line <= hi + LINE_TOLERANCE


def match_findings(
    reported: Sequence[Finding], expected: Sequence[ExpectedFinding], negatives: Sequence[NegativeLine] = ()
) -> MatchResult:
    """Greedy one-to-one matching, nearest expected line first."""
    result = MatchResult()
    free = list(expected)
    for f in sorted(reported, key=lambda x: (x.path, x.line)):
        candidates = [e for e in free if e.path == f.path and e.category == f.category and _near(f, e.line)]
        if candidates:
            best = min(candidates, key=lambda e: abs(e.line - f.line))
            free.remove(best)
            result.true_positives.append((f, best))
            continue
        if any(n.path == f.path and _near(f, n.line) for n in negatives):
            result.on_negatives.append(f)
        result.false_positives.append(f)
    result.missed = free
    return result


@dataclass
class Score:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "f1": round(self.f1, 4),
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
        }


def score_matches(results: Sequence[MatchResult]) -> dict[str, object]:
    """Overall and per-category precision, recall and F1 over many cases."""
    overall = Score()
    per: dict[str, Score] = {c: Score() for c in CATEGORIES}
    for r in results:
        for f, _ in r.true_positives:
            overall.tp += 1
            per[f.category].tp += 1
        for f in r.false_positives:
            overall.fp += 1
            per[f.category].fp += 1
        for e in r.missed:
            overall.fn += 1
            if e.category in per:
                per[e.category].fn += 1
    return {"overall": overall.as_dict(), "per_category": {c: s.as_dict() for c, s in per.items()}}
