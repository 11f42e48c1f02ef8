"""The whole loop on real parts: real reviews into Postgres, people's votes, datasets built from
them, SFT on the tiny model, the adapter registered and promoted, the next review's strategy
written by it (version id on the review row and its strategy span), and a rollback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from agent.context import ReviewRequest
from agent.evaluation import ExpectedFinding, match_findings
from agent.pipeline import run_review
from agent.runtime import Runtime
from agent.session import prepare_database
from agent.store import feedback as store_feedback
from agent.store.db import open_pool
from agent.strategy import STRATEGY_SYSTEM_PROMPT
from agent.strategy_model import ServingOptions, StrategyModelSource
from agent.tracing import setup_tracing, shutdown_tracing

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]

SECRET = "glpat-Zq8Xk2LmN4pR7sT9vW1y"  # must never reach a training prompt


def rows(dsn: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def cases(devset_path: Path) -> list[dict[str, Any]]:
    out = [json.loads(line) for line in devset_path.read_text().splitlines() if line.strip()]
    # one more MR that carries a secret in its description and diff
    leak = dict(out[0])
    leak["id"] = "leak"
    leak["description"] = f"Uses token {SECRET} for the staging call."
    leak["diff"] = out[0]["diff"].replace('"""Orders of one customer, newest first."""', f'"""token: {SECRET}"""')
    leak["files"] = {
        k: v.replace('"""Orders of one customer, newest first."""', f'"""token: {SECRET}"""')
        for k, v in out[0]["files"].items()
    }
    # three changes pushed twice and the leak (whose finding the team rejects), as older MRs: the time
    # split holds out the newest, and an eval MR whose diff train has would be dropped
    # (learning/datasets.py), leaving nothing held out
    again = [dict(c, id=c["id"] + "-again") for c in out[:3]]
    return [*again, leak, *out]


def review_and_vote(pool: Any, dsn: str, devset_path: Path) -> list[int]:
    """Review every case as its own MR; two people vote: 👍 on findings matching the labels, 👎 on the rest."""
    review_ids = []
    for iid, case in enumerate(cases(devset_path), start=1):
        request = ReviewRequest(
            source="diff",
            project="shop/app",
            mr_iid=iid,
            title=case["title"],
            description=case["description"],
            diff_text=case["diff"],
            files=case.get("files") or None,
        )
        outcome = run_review(Runtime(pool=pool, llm=None, shadow_strategies=1), request, dsn=dsn)
        review_ids.append(outcome.review_id)
        ids = {
            f["fingerprint"]: f["id"]
            for f in rows(dsn, "SELECT id, fingerprint FROM findings WHERE review_id = %s", outcome.review_id)
        }
        # the team judges what it was shown: threads (emoji) and the summary's "needs a human look" list
        # (the dashboard) — a sink fed by a parameter of unknown origin goes to a person (issue 22)
        shown = [v for v in outcome.verified if v.verdict in ("REAL", "NEEDS_HUMAN_REVIEW")]
        match = match_findings(
            [v.finding for v in shown], [ExpectedFinding.model_validate(e) for e in case.get("expected", [])]
        )
        good = {f.fingerprint for f, _ in match.true_positives}
        for v in shown:
            source = "emoji" if v.verdict == "REAL" else "dashboard"
            for user in ("gitlab:7", "gitlab:8"):
                store_feedback.record_vote(
                    pool, ids[v.finding.fingerprint], user_key=user, source=source,
                    value=1 if v.finding.fingerprint in good else -1,
                )  # fmt: skip
    return review_ids


def test_feedback_to_promoted_strategy_model(db_dsn: str, devset_path: Path, tmp_path: Path) -> None:
    from learning.datasets import build_datasets, load_dataset
    from learning.registry import promote_version, register_trained, rollback_version
    from learning.tiny_model import build_tiny_model
    from learning.train_configs import SFTTrainingConfig
    from learning.train_sft import train_sft

    prepare_database(db_dsn)
    with open_pool(db_dsn, max_size=4) as pool:
        review_ids = review_and_vote(pool, db_dsn, devset_path)

        # 1. datasets from the real reviews and votes
        card = build_datasets(db_dsn, tmp_path / "ds")
        sft = load_dataset(tmp_path / "ds", "strategy_sft")
        replay = load_dataset(tmp_path / "ds", "replay")
        assert card.counts["strategy_sft"]["train"] >= 8, card.counts  # type: ignore[index]
        mrs = {split: {r["mr"] for r in sft[split]} | {r["mr"] for r in replay[split]} for split in ("train", "eval")}
        assert mrs["train"] and mrs["eval"] and not mrs["train"] & mrs["eval"], "an MR on both sides of the split"
        for split in ("train", "eval"):
            for r in sft[split]:
                assert SECRET not in json.dumps(r["prompt"]), "a secret reached a training prompt"
                assert json.loads(r["completion"][0]["content"])["plan"] is not None
            for r in replay[split]:
                labels = {f["label"] for f in r["findings"]}
                assert labels <= {"accepted", "rejected", "unknown"}
        assert any(f["label"] == "rejected" for r in replay["train"] for f in r["findings"])
        assert any(f["label"] == "accepted" for r in replay["train"] for f in r["findings"])
        dpo = load_dataset(tmp_path / "ds", "strategy_dpo")
        for r in dpo["train"]:
            assert r["chosen_reward"] > r["rejected_reward"]

        # 2. SFT on the tiny model, then the registry
        corpus = [STRATEGY_SYSTEM_PROMPT] + [m["content"] for r in sft["train"] for m in r["prompt"] + r["completion"]]
        base = build_tiny_model(tmp_path / "tiny", seed=0, corpus=corpus, vocab_size=1024)
        config = SFTTrainingConfig(
            max_steps=150,
            learning_rate=1e-2,
            per_device_train_batch_size=8,
            gradient_accumulation_steps=1,
            lora_dropout=0.0,
            lora_modules_to_save=["norm"],
            warmup_steps=0,
            logging_steps=20,
            device="cpu",
            cpu_threads=1,
            seed=0,
            validity_sample=2,
            validity_max_new_tokens=300,
        )
        result = train_sft(
            base_model=base, dataset_dir=tmp_path / "ds", out_dir=tmp_path / "sft", config=config, db=pool
        )
        print("SFT", result.metrics)
        v1 = register_trained(pool, tmp_path / "sft", name="sft-v1")
        v2 = register_trained(pool, tmp_path / "sft", name="sft-v2", parent=v1["id"])
        promote_version(pool, v1["id"])

        # 3. the next review's strategy comes from the promoted version
        source = StrategyModelSource(pool, ServingOptions(max_output_tokens=400))
        demo = cases(devset_path)[0]
        provider = setup_tracing(pool=pool)
        try:

            def next_review(iid: int) -> int:
                request = ReviewRequest(
                    source="replay",
                    project="shop/app",
                    mr_iid=iid,
                    title=demo["title"],
                    description=demo["description"],
                    diff_text=demo["diff"],
                    files=demo["files"],
                )
                return run_review(Runtime(pool=pool, llm=None, strategy_model=source), request, dsn=db_dsn).review_id

            first = next_review(100)
            promote_version(pool, v2["id"])
            second = next_review(101)
            restored = rollback_version(pool)
            third = next_review(102)
            provider.force_flush()
        finally:
            shutdown_tracing(provider)
    assert restored["id"] == v1["id"]
    got = {
        r["id"]: r
        for r in rows(
            db_dsn,
            "SELECT id, strategy_source, model_version_id, trace_id FROM reviews WHERE id = ANY(%s)",
            [first, second, third],
        )
    }
    assert got[first]["strategy_source"] == "model", "the promoted adapter did not write a valid strategy"
    assert [got[i]["model_version_id"] for i in (first, second, third)] == [v1["id"], v2["id"], v1["id"]]
    for rid in (first, second, third):
        [span] = rows(
            db_dsn, "SELECT attributes FROM spans WHERE trace_id = %s AND name = 'strategy'", got[rid]["trace_id"]
        )
        assert span["attributes"]["reviewloop.model_version_id"] == got[rid]["model_version_id"]
    assert len(set(review_ids)) == len(review_ids)
