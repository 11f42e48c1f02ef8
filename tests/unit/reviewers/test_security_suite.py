"""The project's own labeled security suite holds a floor per class (issue 22, Done-when 1, Python).

Each class of `tests/fixtures/security/python/` has at least 10 vulnerable cases and 10 safe near
misses, several of them multi-file; the taint analyzer must score TPR − FPR ≥ 0.7 with FPR ≤ 0.1 on
every class.
"""

from __future__ import annotations

import pytest

from bench.security_suite import CLASS_CWES, MAX_FPR, MIN_SCORE, cases, score

CASES = cases()
SCORES = {s.cls: s for s in score(CASES)}


def test_every_class_has_ten_vulnerable_and_ten_safe_cases_some_across_files() -> None:
    assert set(SCORES) == set(CLASS_CWES)
    for s in SCORES.values():
        assert s.vulnerable >= 10 and s.safe >= 10, s.cls
    multi_file = [c for c in CASES if c.root.name == c.name]
    assert len(multi_file) >= 25


@pytest.mark.parametrize("cls", sorted(CLASS_CWES))
def test_each_class_scores_above_the_floor(cls: str) -> None:
    s = SCORES[cls]
    assert s.fpr <= MAX_FPR, f"{cls}: false alarms on {s.false_alarms}"
    assert s.score >= MIN_SCORE, f"{cls}: missed {s.missed}, false alarms on {s.false_alarms}"


def test_the_recorded_headline_names_every_class_short_of_a_perfect_score() -> None:
    from bench.security_suite import ClassScore, headline

    scores = [
        ClassScore("sql", 10, 10, 10, 0, (), ()),
        ClassScore("command", 12, 12, 11, 0, ("vuln_07",), ()),
    ]
    assert headline(scores) == "2 classes, 44 cases: 1 classes TPR − FPR +1.00, command +0.92 (FPR 0.00)"
