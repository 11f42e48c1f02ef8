"""Datasets built from reviews, findings and votes in a real Postgres, checked row by row.

The scenario (rewards with α=1, β=0.01 per 1k tokens):

MR acme/shop!1 (Jan 1), posted PA and shadows SA1, SA2, SA3 (SA3 writes the same z as SA2):
  PA  a1 accepted (2 ups), a2 accepted (up, down, thread outcome up), a3 rejected (user 1 changed +1 → −1)
      R = 2 − 1 = 1.0
  SA1 near a3 (same path/category, 2 lines off) → rejected; elsewhere → unknown    R = −1.0
  SA2 same fingerprint as a1 → accepted                                            R = 1.0
  SA3 same as SA2                                                                  R = 1.0
MR acme/shop!2 (Jan 2), PB (a secret in its description and diff): b1 accepted   R = 1.0
  and PB2 at a new head (Jan 2, later): b2 rejected                                 R = −1.0
MR acme/shop!3 (Jan 10, the eval MR): PC c1, c2 accepted, 3000 tokens             R = 1.97
  shadow SC1: no findings, 500 tokens                                               R = −0.005
Left out: a failed review (Jan 11) and a replay review (Jan 12).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from datasets import load_from_disk
from learning_store import FindingSpec, ReviewSpec, diff_for, insert_review

from agent.store.db import open_pool
from agent.strategy import RiskArea, Strategy
from learning.datasets import DatasetConfig, build_datasets, load_dataset, read_card
from learning.episodes import s1_for_snapshot
from learning.feedback_labels import FeedbackRewardConfig
from learning.replay import case_from_dataset_row
from reviewers.kernel.contracts import PlanItem
from reviewers.kernel.errors import TrainingError

JAN = datetime(2025, 1, 1, 9, 0, tzinfo=UTC)
SECRET_TOKEN = "glpat-Zx8kQ2mW9vB4nT7pR1sY"
SECRET_PASSWORD = "hunter2-very-secret"


def z(change: str, *reviewers: str, focus: str = "shop/db.py") -> Strategy:
    return Strategy.model_validate(
        {
            "change_type": change,
            "risk_areas": [RiskArea(path=focus, why="query building").model_dump()] if reviewers else [],
            "plan": [PlanItem(reviewer=r, focus_paths=[focus], checks="look").model_dump() for r in reviewers],  # type: ignore[arg-type]
        }
    )


def snapshot(title: str, description: str, files: dict[str, list[str]], head: str) -> dict[str, object]:
    return {"title": title, "description": description, "diff": diff_for(files), "head_sha": head, "files": {}}


def populate(dsn: str) -> dict[str, int]:
    ids: dict[str, int] = {}
    with open_pool(dsn, max_size=2) as pool:
        snap_a = snapshot("Order lookup", "adds a query", {"shop/db.py": ["def q(c):", "    return c"]}, "a" * 40)
        ids["PA"] = insert_review(
            pool,
            ReviewSpec(
                z("feature", "security", "code_quality"),
                findings=[
                    FindingSpec("shop/db.py", 2, votes=[("gitlab:1", 1), ("gitlab:2", 1)]),
                    FindingSpec(
                        "shop/db.py",
                        3,
                        "code_quality",
                        votes=[("gitlab:1", 1), ("gitlab:2", -1), ("outcome:thread", 1)],
                    ),
                    FindingSpec("shop/db.py", 10, "architecture", votes=[("gitlab:1", 1), ("gitlab:1", -1)]),
                ],
            ),
            project="acme/shop",
            mr_iid=1,
            head_sha="a" * 40,
            snapshot=snap_a,
            created_at=JAN,
        )
        shadow = {"project": "acme/shop", "mr_iid": 1, "head_sha": "a" * 40, "snapshot": None}
        ids["SA1"] = insert_review(
            pool,
            ReviewSpec(
                z("refactor", "architecture"),
                findings=[FindingSpec("shop/db.py", 12, "architecture"), FindingSpec("shop/other.py", 1)],
            ),
            created_at=JAN + timedelta(minutes=1),
            parent_review_id=ids["PA"],
            **shadow,  # type: ignore[arg-type]
        )
        a1_fp = FindingSpec("shop/db.py", 2).finding().fingerprint
        for name in ("SA2", "SA3"):
            ids[name] = insert_review(
                pool,
                ReviewSpec(z("feature", "security"), findings=[FindingSpec("shop/db.py", 40, fingerprint=a1_fp)]),
                created_at=JAN + timedelta(minutes=2),
                parent_review_id=ids["PA"],
                **shadow,  # type: ignore[arg-type]
            )
        snap_b = snapshot(
            "Deploy settings",
            f"deploy with {SECRET_TOKEN} please",
            {"shop/settings.py": [f'DB_PASSWORD = "{SECRET_PASSWORD}"']},
            "b" * 40,
        )
        ids["PB"] = insert_review(
            pool,
            ReviewSpec(
                z("config", "security", focus="shop/settings.py"),
                findings=[FindingSpec("shop/settings.py", 2, votes=[("gitlab:5", 1)])],
            ),
            project="acme/shop",
            mr_iid=2,
            head_sha="b" * 40,
            snapshot=snap_b,
            created_at=JAN + timedelta(days=1),
        )
        snap_b2 = snapshot("Deploy settings", "second push", {"shop/settings.py": ["DEBUG = False"]}, "c" * 40)
        ids["PB2"] = insert_review(
            pool,
            ReviewSpec(
                z("config", "code_quality", focus="shop/settings.py"),
                findings=[FindingSpec("shop/settings.py", 2, "code_quality", votes=[("gitlab:5", -1)])],
            ),
            project="acme/shop",
            mr_iid=2,
            head_sha="c" * 40,
            snapshot=snap_b2,
            created_at=JAN + timedelta(days=1, hours=1),
        )
        snap_c = snapshot("Payments", "charge cards", {"pay/charge.py": ["def charge():", "    pass"]}, "d" * 40)
        ids["PC"] = insert_review(
            pool,
            ReviewSpec(
                z("feature", "security", "test_impact", focus="pay/charge.py"),
                findings=[
                    FindingSpec("pay/charge.py", 2, votes=[("gitlab:7", 1)]),
                    FindingSpec("pay/charge.py", 3, "test_impact", votes=[("gitlab:7", 1)]),
                ],
                cost_tokens=3000,
            ),
            project="acme/shop",
            mr_iid=3,
            head_sha="d" * 40,
            snapshot=snap_c,
            created_at=JAN + timedelta(days=9),
        )
        ids["SC1"] = insert_review(
            pool,
            ReviewSpec(z("docs"), cost_tokens=500),
            project="acme/shop",
            mr_iid=3,
            head_sha="d" * 40,
            snapshot=None,
            created_at=JAN + timedelta(days=9, minutes=1),
            parent_review_id=ids["PC"],
        )
        insert_review(
            pool,
            ReviewSpec(z("feature", "security"), status="failed"),
            project="acme/shop",
            mr_iid=4,
            head_sha="e" * 40,
            snapshot=snapshot("Broken", "", {"x.py": ["x = 1"]}, "e" * 40),
            created_at=JAN + timedelta(days=10),
        )
        insert_review(
            pool,
            ReviewSpec(
                z("feature", "security"),
                source="replay",
                findings=[FindingSpec("y.py", 1, votes=[("gitlab:1", 1)])],
            ),
            project="acme/shop",
            mr_iid=5,
            head_sha="f" * 40,
            snapshot=snapshot("Replayed", "", {"y.py": ["y = 1"]}, "f" * 40),
            created_at=JAN + timedelta(days=11),
        )
    return ids


def _completion(row: dict[str, object], column: str = "completion") -> Strategy:
    messages = row[column]
    assert isinstance(messages, list) and messages[0]["role"] == "assistant"
    return Strategy.model_validate_json(messages[0]["content"])


def test_build_datasets_rows_labels_pairs_split_and_scrubbing(db_dsn: str, tmp_path: Path) -> None:
    populate(db_dsn)
    config = DatasetConfig(reward=FeedbackRewardConfig(alpha=1.0, beta=0.01), eval_fraction=0.2)
    card = build_datasets(db_dsn, tmp_path / "ds", config=config)

    assert card.reviews == 8  # PA, SA1, SA2, SA3, PB, PB2, PC, SC1; failed and replay left out
    assert card.merge_requests == {"train": 2, "eval": 1}
    assert card.counts == {
        "strategy_sft": {"train": 3, "eval": 1},  # PA, SA2 (SA3 a duplicate), PB | PC
        "strategy_dpo": {"train": 2, "eval": 1},  # PA>SA1, SA2>SA1 (SA3>SA1 a duplicate) | PC>SC1
        "strategy_kto": {"train": 5, "eval": 1},  # PA+, SA1−, SA2+, PB+, PB2− | PC+
        "replay": {"train": 3, "eval": 1},  # PA, PB, PB2 | PC
    }
    assert card.dropped["strategy_sft: duplicates"] == 1
    assert card.dropped["strategy_dpo: duplicates"] == 1
    assert card.dropped["strategy_kto: duplicates"] == 1
    # labels over all episodes: PA a,a,r; SA1 r,u; SA2 a; SA3 a; PB a; PB2 r; PC a,a
    assert card.labels == {"accepted": 7, "rejected": 3, "unknown": 1}
    assert card.first_review_at == JAN and card.last_review_at == JAN + timedelta(days=9)

    out = tmp_path / "ds"
    sft = load_dataset(out, "strategy_sft")
    assert sorted(sft["train"]["reward"]) == pytest.approx([1.0, 1.0, 1.0])
    assert sft["eval"]["reward"] == pytest.approx([1.97])
    assert sft["eval"][0]["mr"] == "acme/shop!3"

    dpo = load_dataset(out, "strategy_dpo")
    for row in dpo["train"]:
        assert row["chosen_reward"] - row["rejected_reward"] >= 1.0
        assert _completion(row, "rejected").change_type == "refactor"  # SA1 lost both pairs
        assert row["chosen_reward"] == pytest.approx(1.0) and row["rejected_reward"] == pytest.approx(-1.0)
    chosen_eval = dpo["eval"][0]
    assert _completion(chosen_eval, "chosen").change_type == "feature"
    assert _completion(chosen_eval, "rejected").change_type == "docs"
    assert chosen_eval["rejected_reward"] == pytest.approx(-0.005)

    kto = load_dataset(out, "strategy_kto")
    labels = sorted((_completion(r).change_type, r["label"]) for r in kto["train"])
    assert labels == [("config", False), ("config", True), ("feature", True), ("feature", True), ("refactor", False)]

    replay = load_dataset(out, "replay")
    pa = next(r for r in replay["train"] if r["mr"] == "acme/shop!1")
    assert sorted((f["line"], f["label"]) for f in pa["findings"]) == [
        (2, "accepted"),
        (3, "accepted"),
        (10, "rejected"),
    ]
    assert pa["diff"].startswith("diff --git a/shop/db.py")
    # RL and the gate prompt with the very s1 SFT trained on (and serving showed), not a re-rendering
    sft_pa = next(r for r in sft["train"] if r["mr"] == "acme/shop!1")
    assert pa["s1"] and pa["s1"] == sft_pa["prompt"][-1]["content"]
    case = case_from_dataset_row(pa, split="train")
    assert s1_for_snapshot(case.snapshot()) == pa["s1"]

    # no MR on both sides of the split, in any dataset
    for kind in ("strategy_sft", "strategy_dpo", "strategy_kto", "replay"):
        dd = load_dataset(out, kind)  # type: ignore[arg-type]
        assert not set(dd["train"]["mr"]) & set(dd["eval"]["mr"]), kind
        assert set(dd["eval"]["mr"]) <= {"acme/shop!3"}

    # no secret string in any prompt of any dataset; the prompt says where one was
    prompts = []
    for kind in ("strategy_sft", "strategy_dpo", "strategy_kto", "replay"):
        dd = load_from_disk(str(out / kind))
        for split in ("train", "eval"):
            prompts += [json.dumps(p) for p in dd[split]["prompt"]]
    joined = "\n".join(prompts)
    assert SECRET_TOKEN not in joined and SECRET_PASSWORD not in joined
    assert "[REDACTED]" in joined and "Deploy settings" in joined

    assert read_card(out).snapshot_id == card.snapshot_id
    readme = (out / "README.md").read_text()
    assert "| strategy_dpo | 2 | 1 |" in readme and "alpha=1.0" in readme


def test_since_filters_by_the_posted_review_time(db_dsn: str, tmp_path: Path) -> None:
    populate(db_dsn)
    card = build_datasets(db_dsn, tmp_path / "ds", since=JAN + timedelta(days=5))
    assert card.reviews == 2  # PC and its shadow
    assert card.merge_requests == {"train": 1, "eval": 0}  # a single MR is not held out
    assert card.counts["strategy_dpo"] == {"train": 1, "eval": 0}


def test_snapshot_id_is_stable(db_dsn: str, tmp_path: Path) -> None:
    populate(db_dsn)
    first = build_datasets(db_dsn, tmp_path / "one")
    second = build_datasets(db_dsn, tmp_path / "two")
    assert first.snapshot_id == second.snapshot_id


def test_an_eval_merge_request_whose_diff_train_has_is_dropped(db_dsn: str, tmp_path: Path) -> None:
    """MR 6 re-submits MR 1's change under another title (a cherry-pick): it is the newest, so the
    time split holds it out, and it is dropped from every eval kind rather than scoring a model on a
    change it trained on. MR 3, a change train never saw, stays."""
    ids = populate(db_dsn)
    with open_pool(db_dsn, max_size=2) as pool:
        again = snapshot(
            "Order lookup, again", "cherry-picked", {"shop/db.py": ["def q(c):", "    return c"]}, "9" * 40
        )
        assert again["diff"] == snapshot("", "", {"shop/db.py": ["def q(c):", "    return c"]}, "")["diff"]
        ids["PD"] = insert_review(
            pool,
            ReviewSpec(z("feature", "security"), findings=[FindingSpec("shop/db.py", 2, votes=[("gitlab:1", 1)])]),
            project="acme/shop",
            mr_iid=6,
            head_sha="9" * 40,
            snapshot=again,
            created_at=JAN + timedelta(days=20),
        )
    config = DatasetConfig(reward=FeedbackRewardConfig(alpha=1.0, beta=0.01), eval_fraction=0.5)
    card = build_datasets(db_dsn, tmp_path / "ds", config=config)
    assert card.merge_requests == {"train": 2, "eval": 2}  # MRs 1, 2 | 3, 6
    assert card.dropped["eval merge requests whose diff train has"] == 1
    for kind in ("strategy_sft", "strategy_kto", "replay"):
        dd = load_dataset(tmp_path / "ds", kind)  # type: ignore[arg-type]
        assert set(dd["eval"]["mr"]) == {"acme/shop!3"}, kind
        train_diffs = {json.dumps(p) for p in dd["train"]["prompt"]}
        assert not train_diffs & {json.dumps(p) for p in dd["eval"]["prompt"]}, kind
    replay = load_dataset(tmp_path / "ds", "replay")
    assert not set(replay["train"]["diff"]) & set(replay["eval"]["diff"])
    assert ids["PD"] not in replay["eval"]["review_id"]


def test_empty_database_is_one_clear_error(db_dsn: str, tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="no finished reviews with a strategy"):
        build_datasets(db_dsn, tmp_path / "ds")


def test_corrupt_or_missing_dataset_dir(db_dsn: str, tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="does not exist"):
        load_dataset(tmp_path / "nope", "strategy_sft")
    populate(db_dsn)
    out = tmp_path / "ds"
    build_datasets(db_dsn, out)
    (out / "strategy_sft" / "train" / "data-00000-of-00001.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(TrainingError, match="strategy_sft dataset .* is corrupt"):
        load_dataset(out, "strategy_sft")
    (out / "card.json").write_text("{")
    with pytest.raises(TrainingError, match="card.json is corrupt"):
        load_dataset(out, "strategy_dpo")
