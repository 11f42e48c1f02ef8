"""Reward from feedback, checked against values worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from learning.feedback_labels import (
    FeedbackRewardConfig,
    LabeledFinding,
    Vote,
    finding_label,
    inherit_label,
    latest_votes,
    review_reward,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_no_votes_is_unknown() -> None:
    assert finding_label([]) == "unknown"


def test_single_votes() -> None:
    assert finding_label([Vote("gitlab:1", 1, at(0))]) == "accepted"
    assert finding_label([Vote("gitlab:1", -1, at(0))]) == "rejected"
    assert finding_label([Vote("gitlab:1", 0, at(0))]) == "unknown"  # withdrawn


def test_latest_vote_per_user_wins() -> None:
    # user 1 changed their mind from +1 to -1; user 2 says -1 → tally -2 → rejected
    votes = [Vote("gitlab:1", 1, at(0)), Vote("gitlab:2", -1, at(1)), Vote("gitlab:1", -1, at(2))]
    assert latest_votes(votes)["gitlab:1"].value == -1
    assert finding_label(votes) == "rejected"
    # order of rows does not matter, only time
    assert finding_label(list(reversed(votes))) == "rejected"


def test_majority_and_tie() -> None:
    up = [Vote("gitlab:1", 1, at(0)), Vote("gitlab:2", 1, at(0)), Vote("gitlab:3", -1, at(0))]
    assert finding_label(up) == "accepted"  # 2 vs 1
    tie = [Vote("gitlab:1", 1, at(0)), Vote("gitlab:2", -1, at(0))]
    assert finding_label(tie) == "unknown"


def test_thread_outcome_is_one_more_voter() -> None:
    # one human thumbs-down, the thread was then resolved after the line changed (+1): a tie
    votes = [Vote("gitlab:1", -1, at(0)), Vote("outcome:thread", 1, at(5))]
    assert finding_label(votes) == "unknown"
    assert finding_label([Vote("outcome:thread", 1, at(5))]) == "accepted"


def test_review_reward_hand_computed() -> None:
    config = FeedbackRewardConfig(alpha=0.5, beta=0.1, unknown_weight=0.0)
    labels = ["accepted", "accepted", "accepted", "rejected", "rejected", "unknown"]
    # 3 − 0.5·2 − 0.1·(2500/1000) = 3 − 1 − 0.25 = 1.75
    assert review_reward(labels, cost_tokens=2500, config=config) == pytest.approx(1.75)  # type: ignore[arg-type]


def test_review_reward_unknown_weight_and_empty() -> None:
    config = FeedbackRewardConfig(alpha=2.0, beta=0.0, unknown_weight=0.25)
    # 1 − 2·1 + 0.25·2 = −0.5
    labels = ["accepted", "rejected", "unknown", "unknown"]
    assert review_reward(labels, cost_tokens=9999, config=config) == pytest.approx(-0.5)  # type: ignore[arg-type]
    assert review_reward([], cost_tokens=0, config=config) == 0.0


def finding(fp: str, path: str, line: int, category: str, label: str = "unknown") -> LabeledFinding:
    return LabeledFinding(fp, path, line, category, "medium", label)  # type: ignore[arg-type]


def test_inherit_by_fingerprint_first() -> None:
    posted = [
        finding("aaa", "a.py", 10, "security", "rejected"),
        finding("bbb", "b.py", 50, "security", "accepted"),
    ]
    # same fingerprint as the accepted one even though path/line match the rejected one
    shadow = finding("bbb", "a.py", 10, "security")
    assert inherit_label(shadow, posted, line_window=3) == "accepted"


def test_inherit_by_path_category_window() -> None:
    posted = [
        finding("p1", "a.py", 10, "security", "rejected"),
        finding("p2", "a.py", 14, "security", "accepted"),
        finding("p3", "a.py", 12, "code_quality", "accepted"),
    ]
    # line 13: 3 from p1, 1 from p2 → nearest is p2
    assert inherit_label(finding("s", "a.py", 13, "security"), posted, line_window=3) == "accepted"
    # line 8: 2 from p1, 6 from p2 → p1
    assert inherit_label(finding("s", "a.py", 8, "security"), posted, line_window=3) == "rejected"
    # line 18: 4 from p2, outside the window
    assert inherit_label(finding("s", "a.py", 18, "security"), posted, line_window=3) == "unknown"
    # other category at the same place does not match
    assert inherit_label(finding("s", "a.py", 12, "architecture"), posted, line_window=3) == "unknown"
    # other path does not match
    assert inherit_label(finding("s", "b.py", 10, "security"), posted, line_window=3) == "unknown"
