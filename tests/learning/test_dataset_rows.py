"""The pure parts of the dataset builder: time split by MR, pairs, thresholds, deduplication."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from learning.datasets import deduplicate, dpo_rows, kto_rows, sft_rows, split_merge_requests
from learning.episodes import Episode
from learning.feedback_labels import FeedbackRewardConfig, LabeledFinding
from reviewers.kernel.errors import TrainingError

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def episode(review_id: int, mr: str, hours: int, reward: float, completion: str, *, prompt: str = "s1") -> Episode:
    return Episode(
        review_id=review_id,
        root_review_id=review_id,
        mr_key=("p", mr),
        created_at=T0 + timedelta(hours=hours),
        is_shadow=False,
        prompt_s1=f"{prompt}-{mr}",
        completion=completion,
        reward=reward,
        findings=(LabeledFinding("fp", "a.py", 1, "security", "low", "accepted"),),
        snapshot={},
    )


def test_split_holds_out_the_latest_mrs_whole() -> None:
    # MR 1 at 0h and 10h, MR 2 at 1h, MR 3 at 5h, MR 4 at 6h: first reviews order 1, 2, 3, 4
    eps = [
        episode(1, "1", 0, 1, "a"),
        episode(2, "2", 1, 1, "a"),
        episode(3, "3", 5, 1, "a"),
        episode(4, "4", 6, 1, "a"),
        episode(5, "1", 10, 1, "b"),
    ]
    assignment, cutoff = split_merge_requests(eps, eval_fraction=0.5, split_at=None)
    assert assignment == {("p", "1"): "train", ("p", "2"): "train", ("p", "3"): "eval", ("p", "4"): "eval"}
    assert cutoff == T0 + timedelta(hours=5)
    # MR 1's later review stays with MR 1 in train
    assignment, _ = split_merge_requests(eps, eval_fraction=0.0, split_at=T0 + timedelta(hours=6))
    assert [k[1] for k, v in assignment.items() if v == "eval"] == ["4"]
    # 0.2 of four MRs rounds to one, never all of them
    assignment, _ = split_merge_requests(eps, eval_fraction=0.2, split_at=None)
    assert sum(v == "eval" for v in assignment.values()) == 1
    assignment, _ = split_merge_requests(eps[:1], eval_fraction=0.9, split_at=None)
    assert list(assignment.values()) == ["train"]
    with pytest.raises(TrainingError, match="eval_fraction"):
        split_merge_requests(eps, eval_fraction=1.0, split_at=None)


def test_thresholds_and_pairs() -> None:
    config = FeedbackRewardConfig(sft_min_reward=1.0, dpo_margin=1.5, kto_desirable_min=1.0, kto_undesirable_max=-0.5)
    eps = [
        episode(1, "1", 0, 2.0, "good"),
        episode(2, "1", 0, 0.4, "meh"),
        episode(3, "1", 0, -1.0, "bad"),
        episode(4, "1", 0, 2.0, "good"),  # same z as review 1: never paired with it
        episode(5, "2", 1, -3.0, "other-mr"),  # another MR: never paired with MR 1
    ]
    assert [r["reward"] for r in sft_rows(eps, config)] == [2.0, 2.0]
    assert [(r["completion"][0]["content"], r["label"]) for r in kto_rows(eps, config)] == [
        ("good", True),
        ("bad", False),
        ("good", True),
        ("other-mr", False),
    ]
    pairs = [(r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in dpo_rows(eps, config)]
    # 2.0 vs 0.4 differ by 1.6 ≥ 1.5; 2.0 vs -1.0 by 3.0; 0.4 vs -1.0 by 1.4 < 1.5
    assert pairs == [("good", "meh"), ("good", "bad"), ("good", "meh"), ("good", "bad")]
    train, evaluation, dropped = deduplicate(dpo_rows(eps, config), [], ("prompt", "chosen", "rejected"))
    assert len(train) == 2 and dropped == 2 and evaluation == []


def test_deduplicate_drops_eval_prompts_seen_in_train() -> None:
    row = {"prompt": [{"role": "user", "content": "x"}], "completion": [{"role": "assistant", "content": "z"}]}
    other = {"prompt": [{"role": "user", "content": "y"}], "completion": [{"role": "assistant", "content": "z"}]}
    train, evaluation, dropped = deduplicate([row, row], [row, other], ("prompt", "completion"))
    assert train == [row] and evaluation == [other] and dropped == 2
