"""`retrain` end to end on real parts (issue 6, Done when 1 and 2).

A database is seeded through the real review pipeline (rule-based strategies, two shadow strategies
per merge request) with a team's votes: this team wants the bot's security comments and finds the
rest noise, so it 👍s security findings that match the case's labels and 👎s everything else. The
reviews are spread over two weeks: 24 merge requests (the development set three times, retitled)
and then 4 held-out ones, the newest, which the time split puts in eval: security changes of the
development set moved to names and a layout no training merge request has (`src/<package>/<module>/`
rather than `<package>/<file>`), retitled and redescribed. No training row of any kind (SFT, DPO,
KTO, replay) shares a diff, a prompt or a path with them (a test checks it), and the tiny model's
tokenizer learned from the training merge requests only. The rule-based strategy runs every
reviewer; what the team's votes teach is to plan security first and alone.

The retrain then runs on the CPU with the tiny model: dataset → SFT → DPO (KTO recorded as not
needed) → StraTA RL → evaluation gate against the rules (nothing is in service yet) → promotion,
with a vLLM-compatible server on loopback receiving the promoted adapter. The gate asks the
candidate as serving does (in process, grammar-constrained, one retry); the candidate's plans run
with the analyzers alone, so it is decoded under the decisions-only schema (agent/strategy_schema.py)
and serving asks it the same way. What is fair to claim: on a code change that schema allows
security and at most one more reviewer, so part of the candidate's gain over the rules (which run
all four) is the schema's; what the model decides is the second reviewer or none, the change type,
the focus and the budget. Measured (one reviewer, before the second was allowed): the candidate
planned security alone on all 4 held-out MRs (reward 1.45 vs the rules' 1.05, 1 step vs 4). RL
samples its plans under the same schema (`served_train`), so every rollout is a valid plan. While it runs, a second `reviewloop retrain` (a
real subprocess) is refused. The next review carries the new version on its row and its strategy span.
Finally a candidate worse by construction (no plan fits its tokens, so serving falls back to the rules
the version in service beat) is gated out, and the service keeps the version it had;
before all this, a candidate that writes no valid strategy at all is kept out against the rules.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import psycopg
import pytest
from fakes.vllm_lora_server import FakeVllmLora
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from agent.context import ReviewRequest
from agent.diff import parse_unified_diff
from agent.evaluation import ExpectedFinding, match_findings
from agent.pipeline import run_review
from agent.runtime import Runtime
from agent.session import prepare_database
from agent.store import feedback as store_feedback
from agent.store.db import Pool, open_pool
from agent.strategy import DEFAULT_STOP_CONDITION, STRATEGY_SYSTEM_PROMPT, Strategy
from agent.strategy_model import ServingOptions, StrategyModelSource
from agent.tracing import setup_tracing, shutdown_tracing
from learning.retrain import RetrainReport, VllmServer, retrain
from learning.retrain_config import RetrainConfig
from learning.train_configs import DPOTrainingConfig, KTOTrainingConfig, SFTTrainingConfig

pytestmark = [
    pytest.mark.slow,
    # pytest-timeout guards against a hang and counts fixture setup: the promoting retrain took 543 s of
    # the default 600 on a loaded 2-core machine (issue 21); a guard must not be what decides
    pytest.mark.timeout(2400),
    # peft 0.21 reads transformers 5's deprecated `is_gradient_checkpointing`; drop when peft reads the new name
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]

SHOWN = (  # the stage numbers the test prints
    "reviews",
    "before_valid_strategy_share",
    "after_valid_strategy_share",
    "after_eval_loss",
    "after_eval_margin",
    "steps",
    "first_reward_mean",
    "last_reward_mean",
    "decision",
    "reward_delta",
)
CLI = (sys.executable, "-c", "from api.cli import main; main()")
COPIES = 3  # each dev-set case reviewed as three merge requests: 24, enough for every stage's minimum
# The held-out merge requests: dev-set security changes under names and a layout training never has.
HELD_OUT: dict[str, dict[str, str]] = {
    "dev-sqli-fstring": {
        "shop/db.py": "src/storefront/persistence/order_queries.py",
        "tests/test_db.py": "src/storefront/tests/test_order_queries.py",
        "shop.db": "storefront.persistence.order_queries",
    },
    "dev-secret-verify": {"billing/client.py": "src/payments/gateway/http_client.py"},
    # (dev-path-traversal was held out until its sink, fed by a parameter of unknown origin, stopped
    # producing any finding to label: issue 22; a held-out MR must leave a labeled replay case)
    "dev-bare-except": {"jobs/runner.py": "src/scheduler/tasks/runner.py"},
    "dev-pickle-shell": {"tools/cache.py": "src/devtools/caching/store.py"},
}
HELD_OUT_TITLES = {
    "dev-sqli-fstring": ("Storefront: query orders per buyer", "Lets support staff list one buyer's orders."),
    "dev-secret-verify": ("Payments gateway client defaults", "Gateway calls work without passing credentials."),
    "dev-bare-except": ("Scheduler: skip repeated tasks", "A task queued twice runs once."),
    "dev-pickle-shell": ("Devtools cache store", "A faster on-disk format and compression for the cache."),
}
EVAL_FRACTION = len(HELD_OUT) / (8 * COPIES + len(HELD_OUT))  # the time split holds out exactly the 4
START = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
TRAINER: dict[str, Any] = {  # the tiny model on one CPU thread (fastest on a shared 2-core machine)
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "lora_dropout": 0.0,
    "lora_modules_to_save": ["norm"],  # a random tiny model's logits are too flat for LoRA alone
    "warmup_steps": 0,
    "logging_steps": 10,
    "device": "cpu",
    "cpu_threads": 1,
    "seed": 0,
    "min_train_rows": 2,
}


def rows(dsn: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


@dataclasses.dataclass(frozen=True)
class Seeded:
    dsn: str
    base_model: Path
    merge_requests: int


def held_out_case(case: dict[str, Any]) -> dict[str, Any]:
    """A dev-set case moved to its held-out names (paths in the diff, files, labels and code)."""
    text = json.dumps(case)
    for old, new in HELD_OUT[case["id"]].items():
        text = text.replace(old, new)
    moved: dict[str, Any] = json.loads(text)
    moved["title"], moved["description"] = HELD_OUT_TITLES[case["id"]]
    return moved


def seed_reviews(pool: Pool, dsn: str, devset_path: Path, *, copies: int = COPIES, held_out: bool = True) -> int:
    """Review every case as its own MR (with two shadow strategies), then the held-out ones last; the
    team votes 👍 on security findings matching the case's labels and 👎 on the rest; MRs are nine
    hours apart."""
    cases = [json.loads(line) for line in devset_path.read_text().splitlines() if line.strip()]
    runtime = Runtime(pool=pool, llm=None, shadow_strategies=2)
    reviewed = [
        (case if copy == 0 else {**case, "title": f"{case['title']} (part {copy + 1})"})
        for copy in range(copies)
        for case in cases
    ]
    if held_out:
        reviewed += [held_out_case(c) for c in cases if c["id"] in HELD_OUT]
    for iid, case in enumerate(reviewed, 1):
        request = ReviewRequest(
            source="diff",
            project="shop/app",
            mr_iid=iid,
            title=case["title"],
            description=case["description"],
            diff_text=case["diff"],
            files=case.get("files") or None,
        )
        outcome = run_review(runtime, request, dsn=dsn)
        ids = {
            r["fingerprint"]: r["id"]
            for r in rows(dsn, "SELECT id, fingerprint FROM findings WHERE review_id = %s", outcome.review_id)
        }
        # the team judges what it was shown: the threads (emoji) and the summary's "needs a human look"
        # list (the dashboard) — a sink fed by a parameter of unknown origin goes to a person (issue 22)
        shown = [v for v in outcome.verified if v.verdict in ("REAL", "NEEDS_HUMAN_REVIEW")]
        match = match_findings(
            [v.finding for v in shown], [ExpectedFinding.model_validate(e) for e in case.get("expected", [])]
        )
        accepted = {f.fingerprint for f, _ in match.true_positives if f.category == "security"}
        for verified in shown:
            finding = verified.finding
            value: Literal[1, -1] = 1 if finding.fingerprint in accepted else -1
            source = "emoji" if verified.verdict == "REAL" else "dashboard"
            store_feedback.record_vote(pool, ids[finding.fingerprint], user_key="gitlab:7", source=source, value=value)
        at = START + timedelta(hours=9 * iid)
        with pool.connection() as conn:
            conn.execute(
                "UPDATE reviews SET created_at = %s + (id - %s) * interval '1 second'"
                " WHERE id = %s OR parent_review_id = %s",
                (at, outcome.review_id, outcome.review_id, outcome.review_id),
            )
    return len(reviewed)


@pytest.fixture(scope="module")
def seeded(pg_admin_dsn: str, devset_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    from learning.tiny_model import build_tiny_model

    name = f"rl_retrain_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(pg_admin_dsn, dbname=name)
    prepare_database(dsn)
    with open_pool(dsn, max_size=4) as pool:
        n = seed_reviews(pool, dsn, devset_path)
    # the tokenizer learns from the training merge requests only: never from the held-out ones
    older = rows(
        dsn,
        "SELECT snapshot->>'s1' AS s1, strategy FROM reviews WHERE coalesce(parent_review_id, id) IN"
        " (SELECT id FROM reviews WHERE NOT is_shadow ORDER BY created_at LIMIT %s)",
        n - len(HELD_OUT),
    )
    corpus = [STRATEGY_SYSTEM_PROMPT] + [r["s1"] for r in older if r["s1"]]
    corpus += [Strategy.model_validate(r["strategy"]).to_json() for r in older if r["strategy"]]
    base = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0, corpus=corpus, vocab_size=1024)
    yield Seeded(dsn=dsn, base_model=base, merge_requests=n)
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def tiny_config(base_model: Path, work_dir: Path, **changes: Any) -> RetrainConfig:
    """Small thresholds and few steps: the pipeline is the production one, the sizes are a test's."""
    config = RetrainConfig(
        base_model=base_model,
        work_dir=work_dir,
        min_sft_examples=8,
        min_dpo_pairs=4,
        min_kto_labels=8,
        min_replay_cases=4,
        min_eval_cases=3,
        eval_fraction=EVAL_FRACTION,
        margin=0.05,
        # The pipeline's mechanics are this file's subject (promotion, vLLM hot-load, rollback). The tiny
        # model learns the best fixed rule's plan exactly (+0.000 against it on every held-out MR,
        # 2026-11-29), which the production gate rightly refuses; that bar has its own tests
        # (tests/unit/strata/test_gate_and_config.py), so here the gate pairs with the baseline alone.
        gate_vs_best_fixed=False,
        sft=SFTTrainingConfig(
            max_steps=150, learning_rate=1e-2, validity_sample=2, validity_max_new_tokens=300, **TRAINER
        ),
        # a gentle DPO: the tiny model's strategies stop validating after a few large preference steps
        # (DPO's learning signal has its own test; here it is a stage of the chain)
        dpo=DPOTrainingConfig(max_steps=4, learning_rate=1e-5, **TRAINER),
        kto=KTOTrainingConfig(max_steps=4, learning_rate=1e-3, **TRAINER),
    )
    return dataclasses.replace(config, **changes)


def rl_changes() -> dict[str, Any]:
    from learning.replay import ReplayEnvConfig
    from learning.strata.config import StrataConfig
    from learning.strata.policy import PolicyConfig
    from learning.train_rl import EvalConfig, RLRunConfig

    return {
        "rl": RLRunConfig(
            strata=StrataConfig(
                sigma=2,
                n_strategies=2,
                m_executions=1,
                max_steps=2,
                max_new_tokens=300,
                # under the schema every sample is a valid plan, so the sampling can spread
                temperature=1.0,
                learning_rate=1e-5,
                keep_ratio=1.0,
                embedder="hashing",
            ),
            # the retrain's own default (plans decoded under the decisions-only schema), smaller
            train=dataclasses.replace(RLRunConfig().train, mrs_per_step=2, ppo_epochs=1, cpu_threads=1),
            policy=PolicyConfig(device="cpu"),
            env=ReplayEnvConfig(),
            eval=EvalConfig(samples=1, max_cases=2),
        ),
        "gate_max_new_tokens": 300,
    }


def test_an_invalid_candidate_is_kept_out_of_service(seeded: Seeded, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A candidate that writes no valid strategy (the gate gives it 4 tokens, too few for any plan, so
    serving would fall back to the rules for every merge request) loses the gate: it is rejected, the
    version in service stays, and nothing is sent to a model server. Runs before the promoting retrain,
    so the baseline is the rules."""
    before = rows(seeded.dsn, "SELECT id FROM model_versions WHERE stage = 'production'")
    config = dataclasses.replace(
        tiny_config(seeded.base_model, tmp_path_factory.mktemp("invalid"), run_preference=False, run_rl=False),
        sft=SFTTrainingConfig(max_steps=1, learning_rate=1e-6, validity_sample=1, validity_max_new_tokens=8, **TRAINER),
        gate_max_new_tokens=4,
    )
    vllm = FakeVllmLora(api_key="sk-vllm").start()
    try:
        with open_pool(seeded.dsn, max_size=4) as pool:
            report = retrain(pool, config, vllm=VllmServer(vllm.base_url, "sk-vllm"))
    finally:
        vllm.stop()
    assert report.status == "succeeded", report.reason
    m = report.stage("eval").metrics
    print(f"\ninvalid candidate: {m['candidate']} vs {m['baseline']}; {m['decision']}: {m['why']}")
    assert m["eval_cases"] == len(HELD_OUT)
    assert m["candidate"]["valid_share"] == 0.0, "4 tokens held a valid strategy"
    assert report.decision == "keep" and not report.promoted and m["decision"] == "keep" and m["promoted"] is False
    if m["baseline"]["name"] == "rules":
        assert m["why"] == "valid strategy share fell from 1.00 to 0.00"
    [candidate] = rows(seeded.dsn, "SELECT stage FROM model_versions WHERE id = %s", report.candidate_version_id)
    assert candidate["stage"] == "rejected"
    assert rows(seeded.dsn, "SELECT id FROM model_versions WHERE stage = 'production'") == before
    assert vllm.requests == [], "a rejected candidate was sent to the model server"


@dataclasses.dataclass
class PromotedRun:
    report: RetrainReport
    seconds: float
    refused: subprocess.CompletedProcess[str]
    vllm: FakeVllmLora
    work: Path


@pytest.fixture(scope="module")
def promoted_run(seeded: Seeded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromotedRun]:
    """One retrain on the seeded store, with a second `reviewloop retrain` started while it runs."""
    work = tmp_path_factory.mktemp("retrain")
    vllm = FakeVllmLora(api_key="sk-vllm").start()
    with open_pool(seeded.dsn, max_size=4) as pool:
        config = tiny_config(seeded.base_model, work, **rl_changes())
        result: dict[str, Any] = {}

        def run() -> None:
            started = time.monotonic()
            try:
                result["report"] = retrain(pool, config, vllm=VllmServer(vllm.base_url, "sk-vllm"))
            except BaseException as exc:  # surfaced by the fixture below
                result["error"] = exc
            result["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 120
        while not rows(seeded.dsn, "SELECT 1 FROM training_runs WHERE kind = 'retrain' AND status = 'running'"):
            assert thread.is_alive() and time.monotonic() < deadline, result.get("error")
            time.sleep(0.2)
        env = {**os.environ, "REVIEWLOOP_DATABASE_URL": seeded.dsn, "REVIEWLOOP_DATA_DIR": str(work), "COLUMNS": "200"}
        refused = subprocess.run(
            [*CLI, "retrain", "--base-model", str(seeded.base_model), "--work-dir", str(work / "second")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        thread.join()
    if "error" in result:
        raise result["error"]
    report: RetrainReport = result["report"]
    print(f"\nretrain run {report.run_id}: {report.status} in {result['seconds']:.0f} s")
    for stage in report.stages:
        shown = {k: v for k, v in stage.metrics.items() if k in SHOWN}
        print(f"  {stage.kind:8} {stage.status:9} {stage.reason or ''} {shown}")
    yield PromotedRun(report, result["seconds"], refused, vllm, work)
    vllm.stop()


def test_every_stage_is_recorded_under_the_retrain_run(seeded: Seeded, promoted_run: PromotedRun) -> None:
    report = promoted_run.report
    assert report.status == "succeeded", report.reason
    stages = {
        r["kind"]: r for r in rows(seeded.dsn, "SELECT * FROM training_runs WHERE parent_run_id = %s", report.run_id)
    }
    assert set(stages) == {"dataset", "sft", "dpo", "kto", "rl", "eval"}
    assert {k: r["status"] for k, r in stages.items()} == {
        "dataset": "succeeded",
        "sft": "succeeded",
        "dpo": "succeeded",
        "kto": "skipped",
        "rl": "succeeded",
        "eval": "succeeded",
    }
    assert stages["kto"]["reason"].startswith("DPO trained on ") and "pairs are too few" in stages["kto"]["reason"]
    card = stages["dataset"]["metrics"]["card"]
    assert card["merge_requests"]["train"] and card["merge_requests"]["eval"], "the time split has one side only"
    # the trainers' own rows joined the run, with their step metrics; SFT's held-out loss fell. (Its
    # valid share is measured unconstrained, and there the tiny model writes no valid strategy before
    # or after (measured 0.0 → 0.0): it writes them only under the schema, as the gate and serving ask.)
    assert any(s.get("loss") is not None for s in stages["sft"]["step_metrics"])
    sft = stages["sft"]["metrics"]
    assert sft["after_eval_loss"] < sft["before_eval_loss"]
    assert any("rewards/margins" in s for s in stages["dpo"]["step_metrics"])
    assert [s["step"] for s in stages["rl"]["step_metrics"]] == [1, 2]
    assert all("reward_std" in s and "grad_norm" in s or s.get("skipped") for s in stages["rl"]["step_metrics"])
    # RL sampled its plans as the candidate is served (decisions-only schema): every one is valid
    assert [s["valid_share"] for s in stages["rl"]["step_metrics"]] == [1.0, 1.0]
    [parent] = rows(seeded.dsn, "SELECT * FROM training_runs WHERE id = %s", report.run_id)
    assert parent["kind"] == "retrain" and parent["status"] == "succeeded"
    assert parent["model_version_id"] == report.candidate_version_id


def test_the_gate_promotes_a_better_candidate_and_vllm_gets_it(seeded: Seeded, promoted_run: PromotedRun) -> None:
    report = promoted_run.report
    [gate] = rows(seeded.dsn, "SELECT * FROM training_runs WHERE parent_run_id = %s AND kind = 'eval'", report.run_id)
    m = gate["metrics"]
    cand, base = m["candidate"], m["baseline"]
    print(
        f"\ngate on {m['eval_cases']} held-out MRs: candidate reward {cand['mean_reward']} F1 {cand['f1']}"
        f" (valid {cand['valid_share']:.2f}, {cand['mean_steps']} steps) vs {base['name']} {base['mean_reward']}"
        f" F1 {base['f1']} ({base['mean_steps']} steps); {m['decision']}: {m['why']}"
    )
    assert m["decision"] == "promote" and m["promoted"] is True and report.promoted
    assert base["name"] == "rules", "nothing was in service: the rules are the baseline"
    assert cand["valid_share"] == 1.0 and m["reward_delta"] > m["margin"]
    assert cand["mean_steps"] < base["mean_steps"], "the learned plan should spend less than every reviewer"
    [version] = rows(seeded.dsn, "SELECT * FROM model_versions WHERE id = %s", report.candidate_version_id)
    assert version["stage"] == "production" and gate["model_version_id"] == version["id"]
    assert version["base_model"] == str(seeded.base_model)
    assert Path(version["adapter_path"], "adapter_config.json").is_file()
    # the model server was asked to load the adapter under the version's serving name, with the key
    [load] = promoted_run.vllm.requests
    assert load["body"] == {"lora_name": version["serving_name"], "lora_path": version["adapter_path"]}
    assert load["headers"]["Authorization"] == "Bearer sk-vllm"
    assert promoted_run.vllm.loaded == {version["serving_name"]: version["adapter_path"]}


def test_a_second_concurrent_retrain_is_refused(seeded: Seeded, promoted_run: PromotedRun) -> None:
    refused = promoted_run.refused
    assert refused.returncode == 75, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(f"reviewloop: another retrain is running (run {promoted_run.report.run_id}, started ")
    skipped = rows(seeded.dsn, "SELECT * FROM training_runs WHERE kind = 'retrain' AND status = 'skipped'")
    assert len(skipped) == 1 and skipped[0]["reason"] in line


def test_no_training_row_of_any_stage_holds_a_held_out_merge_request(promoted_run: PromotedRun) -> None:
    """The gate's held-out merge requests are exactly the 4 moved ones, and no SFT, DPO, KTO or replay
    (RL) training row shares a diff, a prompt, a title or a path with them."""
    from learning.datasets import load_dataset

    dataset = promoted_run.work / f"run-{promoted_run.report.run_id}" / "dataset"
    held_paths = {new for moves in HELD_OUT.values() for old, new in moves.items() if old.endswith(".py")}
    held_titles = {title for title, _ in HELD_OUT_TITLES.values()}
    replay = load_dataset(dataset, "replay")
    held = replay["eval"]
    assert sorted(held["title"]) == sorted(held_titles), "the gate's held-out set is not the moved MRs"
    for row in held:
        changed = {line.split(" b/", 1)[1] for line in row["diff"].splitlines() if line.startswith("diff --git ")}
        assert changed and changed <= held_paths, changed
    held_diffs = set(held["diff"])
    held_prompts = {json.dumps(p) for p in held["prompt"]}
    old_paths = {old for moves in HELD_OUT.values() for old in moves if old.endswith(".py")}
    for kind in ("strategy_sft", "strategy_dpo", "strategy_kto", "replay"):
        dd = load_dataset(dataset, kind)  # type: ignore[arg-type]
        assert len(dd["train"]) > 0, kind
        for row in dd["train"]:
            text = json.dumps(row, default=str)
            assert not any(p in text for p in held_paths | held_titles), f"{kind} train row names a held-out MR"
            assert json.dumps(row["prompt"]) not in held_prompts, kind
            assert row.get("diff") not in held_diffs, kind
        for row in dd["eval"]:  # every eval row is a held-out MR's
            text = json.dumps(row, default=str)
            assert any(p in text for p in held_paths) and not any(f" b/{p}" in text for p in old_paths), kind


def test_the_next_review_uses_the_promoted_version(
    seeded: Seeded, promoted_run: PromotedRun, devset_path: Path
) -> None:
    version_id = promoted_run.report.candidate_version_id
    cases = [json.loads(line) for line in devset_path.read_text().splitlines() if line.strip()]
    # A new push of an MR whose findings were all accepted: its file's acceptance history stays at
    # 100%, so the serving prompt differs from the trained ones only in the title. (A tiny model
    # memorises more than it generalises: a history line that moved since training can derail it.)
    case = next(c for c in cases if c["expected"] and all(e["category"] == "security" for e in c["expected"]))
    request = ReviewRequest(
        source="diff",
        project="shop/app",
        mr_iid=900,
        title=case["title"],
        description=case["description"],
        diff_text=case["diff"],
        files=case["files"],
    )
    with open_pool(seeded.dsn, max_size=4) as pool:
        source = StrategyModelSource(pool, ServingOptions(max_output_tokens=300))
        assert source.current().version_id == version_id
        provider = setup_tracing(pool=pool)
        try:
            outcome = run_review(Runtime(pool=pool, llm=None, strategy_model=source), request, dsn=seeded.dsn)
            provider.force_flush()
        finally:
            shutdown_tracing(provider)
    [review] = rows(seeded.dsn, "SELECT * FROM reviews WHERE id = %s", outcome.review_id)
    assert review["strategy_source"] == "model", "the promoted adapter did not write a valid strategy"
    assert review["model_version_id"] == version_id
    [span] = rows(
        seeded.dsn, "SELECT attributes FROM spans WHERE trace_id = %s AND name = 'strategy'", review["trace_id"]
    )
    assert span["attributes"]["reviewloop.model_version_id"] == version_id


WORSE_GATE_TOKENS = 150  # the worse run's decoding budget, for both versions (see the test below)


def minimal_plan_tokens(tokenizer: Any, changed_paths: list[str]) -> int:
    """The fewest tokens any valid decisions-only plan for a code change can take: the shortest change
    type, security alone on the shortest changed path, budget 1, no whitespace."""
    plans = [
        Strategy.model_validate(
            {
                "change_type": "docs",
                "risk_areas": [],
                "plan": [{"reviewer": "security", "focus_paths": [p], "checks": "", "step_budget": 1}],
                "stop_condition": DEFAULT_STOP_CONDITION,
            }
        ).to_json()
        for p in changed_paths
    ]
    return min(len(tokenizer(plan)["input_ids"]) for plan in plans)


def test_a_worse_candidate_is_kept_out_of_service(
    seeded: Seeded, promoted_run: PromotedRun, tmp_path_factory: pytest.TempPathFactory, devset_path: Path
) -> None:
    """Done when 2: a candidate worse than the version in service is kept out of service; the version
    in service stays, for the registry and for serving.

    Worse by construction, not by a coin flip (issue 21). The candidate is trained on a base model whose
    tokenizer has almost no merges, so the shortest plan it could write for any held-out merge request
    is longer than the gate's decoding budget: on every one, serving falls back to the rules, which run
    every reviewer and post the code-quality, architecture and test-impact findings this team rejects.
    Its reward is the rules' reward on these merge requests, which the version in service beat by the
    margin to be promoted (the promoting run's gate, same cases); the version in service writes its
    plans well within the budget (a 1024-token vocabulary learned from such plans). An untrained
    candidate that writes valid plans, as this test used before, scores within noise of the trained
    one (1.583 vs 1.567 and 1.413 vs 1.400 in two runs: the schema requires security first), and which
    of the two won depended on the run. (Against the rules, with nothing in service, a candidate that
    writes no plan is its own test.)"""
    from transformers import AutoTokenizer

    from learning.tiny_model import MIN_VOCAB_SIZE, build_tiny_model

    in_service = promoted_run.report.candidate_version_id
    assert in_service is not None
    promoting_gate = promoted_run.report.stage("eval").metrics
    assert promoting_gate["baseline"]["name"] == "rules"
    byte_level = build_tiny_model(tmp_path_factory.mktemp("bytes") / "model", seed=0, vocab_size=MIN_VOCAB_SIZE)
    cases = [json.loads(line) for line in devset_path.read_text().splitlines() if line.strip()]
    tokenizer = AutoTokenizer.from_pretrained(byte_level)
    for case in (held_out_case(c) for c in cases if c["id"] in HELD_OUT):
        shortest = minimal_plan_tokens(tokenizer, [f.path for f in parse_unified_diff(case["diff"])])
        assert shortest > WORSE_GATE_TOKENS, f"{case['id']}: a plan fits in {shortest} tokens"
    # the eval split: the held-out merge requests and whatever was reviewed since seeding (newer, and
    # without labels, so no replay case), so that the gate sees the promoting gate's cases again
    reviewed = rows(seeded.dsn, "SELECT DISTINCT project, mr_iid FROM reviews WHERE NOT is_shadow")
    since = len(reviewed) - seeded.merge_requests
    worse = dataclasses.replace(
        tiny_config(byte_level, tmp_path_factory.mktemp("worse"), run_preference=False, run_rl=False),
        eval_fraction=(len(HELD_OUT) + since) / len(reviewed),
        sft=SFTTrainingConfig(
            max_steps=1,
            learning_rate=1e-6,
            validity_sample=1,
            validity_max_new_tokens=8,
            max_length=4096,  # its prompts take several times the tokens; none may lose its completion
            **TRAINER,
        ),
        gate_max_new_tokens=WORSE_GATE_TOKENS,
    )
    with open_pool(seeded.dsn, max_size=4) as pool:
        report = retrain(pool, worse, vllm=VllmServer(promoted_run.vllm.base_url, "sk-vllm"))
        current = StrategyModelSource(pool, ServingOptions(max_output_tokens=300)).current()
    assert report.status == "succeeded", report.reason
    assert report.decision == "keep" and not report.promoted
    gate = report.stage("eval")
    m = gate.metrics
    print(
        f"\nworse candidate: reward {m['candidate']['mean_reward']} (valid {m['candidate']['valid_share']:.2f})"
        f" vs in service {m['baseline']['mean_reward']} (valid {m['baseline']['valid_share']:.2f});"
        f" {m['decision']}: {m['why']}"
    )
    assert gate.status == "succeeded" and m["decision"] == "keep" and m["promoted"] is False
    assert m["baseline"]["name"] == promoted_run_name(seeded, in_service)
    # the same held-out cases as the promoting gate: the candidate scores what the rules scored there,
    # and the version in service what it scored there (greedy decoding, deterministic replay)
    assert m["eval_cases"] == promoting_gate["eval_cases"] == len(HELD_OUT)
    assert m["candidate"]["valid_share"] == 0.0 < m["baseline"]["valid_share"]
    assert m["candidate"]["mean_reward"] == promoting_gate["baseline"]["mean_reward"]
    # (the version in service's own reward is not compared with the promoting gate's: one held-out plan of
    # the tiny model in service is invalid here, and which one varied; the decision rests on valid share)
    gain = m["candidate"]["mean_reward"] - m["baseline"]["mean_reward"]
    assert promoting_gate["reward_delta"] > promoting_gate["margin"]  # why the version in service was promoted
    assert gain < 0  # the worse candidate scores below the version in service on the same cases
    [stored] = rows(seeded.dsn, "SELECT metrics FROM training_runs WHERE id = %s", gate.run_id)
    assert stored["metrics"]["decision"] == "keep" and stored["metrics"]["promoted"] is False
    stages = {r["id"]: r["stage"] for r in rows(seeded.dsn, "SELECT id, stage FROM model_versions")}
    assert stages[report.candidate_version_id] == "rejected" and stages[in_service] == "production"
    assert report.serving_version_id == in_service
    assert current.version_id == in_service, "serving moved off the version in service"
    assert len(promoted_run.vllm.requests) == 1, "a rejected candidate was sent to the model server"
    assert {r.kind: r.status for r in report.stages} == {
        "dataset": "succeeded",
        "sft": "succeeded",
        "dpo": "skipped",
        "kto": "skipped",
        "rl": "skipped",
        "eval": "succeeded",
    }
    assert report.stage("rl").reason == "switched off (run_rl = false)"


def promoted_run_name(seeded: Seeded, version_id: int) -> str:
    [row] = rows(seeded.dsn, "SELECT name FROM model_versions WHERE id = %s", version_id)
    return str(row["name"])


def test_a_failing_stage_fails_the_run_and_skips_the_rest(db_dsn: str, devset_path: Path, tmp_path: Path) -> None:
    """SFT cannot load its base model: its row says why, later stages say they did not run, the run
    failed, and nothing was registered."""
    prepare_database(db_dsn)
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # passes the cheap directory check, cannot load
    with open_pool(db_dsn, max_size=4) as pool:
        seed_reviews(pool, db_dsn, devset_path, copies=2, held_out=False)
        report = retrain(pool, tiny_config(broken, tmp_path / "work", min_sft_examples=2))
    assert report.status == "failed" and report.decision == "keep" and not report.promoted
    assert report.reason is not None and "cannot load the base model" in report.reason
    statuses = {r.kind: (r.status, r.reason) for r in report.stages}
    assert statuses["dataset"][0] == "succeeded"
    assert statuses["sft"][0] == "failed" and "cannot load the base model" in str(statuses["sft"][1])
    for kind in ("dpo", "kto", "rl", "eval"):
        assert statuses[kind] == ("skipped", "not run: the sft stage failed"), kind
    stored = rows(db_dsn, "SELECT kind, status, parent_run_id FROM training_runs ORDER BY id")
    assert [r["kind"] for r in stored if r["parent_run_id"] == report.run_id] == [
        "dataset", "sft", "dpo", "kto", "rl", "eval"
    ]  # fmt: skip
    assert [(r["kind"], r["status"]) for r in stored if r["parent_run_id"] is None] == [("retrain", "failed")]
    assert rows(db_dsn, "SELECT id FROM model_versions") == []


def test_runs_an_interrupted_retrain_left_running_are_closed(db_dsn: str, tmp_path: Path) -> None:
    from agent.store import models as store_models

    base = tmp_path / "model"
    base.mkdir()
    (base / "config.json").write_text("{}")
    with open_pool(db_dsn, max_size=2) as pool:
        killed = store_models.start_run(pool, "retrain", {})
        child = store_models.start_run(pool, "sft", {}, parent_run_id=killed)
        manual = store_models.start_run(pool, "sft", {})  # an operator's `reviewloop train sft`, alive
        report = retrain(pool, tiny_config(base, tmp_path / "work"))
    assert report.status == "succeeded"
    got = {r["id"]: r for r in rows(db_dsn, "SELECT id, status, reason FROM training_runs")}
    for run_id in (killed, child):
        assert got[run_id]["status"] == "failed"
        assert got[run_id]["reason"].startswith("interrupted: the process ended before the run finished")
    assert got[manual]["status"] == "running", "a run outside any retrain is not ours to close"
