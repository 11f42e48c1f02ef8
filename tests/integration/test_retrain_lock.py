"""Two retrains never run at once, and the worker's periodic job is there only when a cron is set.

The lock is the real Postgres advisory lock; the refused retrain is the real `reviewloop retrain`
command in a subprocess, and the periodic job's body runs against the same database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from agent.service_settings import Settings
from agent.store.db import open_pool
from api.retrain_task import RETRAIN_TASK, register_retrain_task, run_scheduled_retrain
from api.worker import QueueConfig, create_queue_app
from learning.retrain import RetrainBusyError, RetrainConfig, retrain, retrain_lock
from reviewers.kernel.errors import ConfigError

CLI = (sys.executable, "-c", "from api.cli import main; main()")


def runs(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute("SELECT kind, status, reason, parent_run_id FROM training_runs ORDER BY id").fetchall()


@pytest.fixture
def base_model(tmp_path: Path) -> Path:
    """Enough of a model directory for the command's cheap checks (the refusal comes before loading)."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text("{}")
    return tmp_path / "base"


def test_the_lock_is_exclusive_and_released(db_dsn: str) -> None:
    with retrain_lock(db_dsn) as first:
        assert first
        with retrain_lock(db_dsn) as second:
            assert not second
    with retrain_lock(db_dsn) as again:
        assert again, "the lock was not released"


def test_a_second_retrain_is_refused_with_one_line_and_exit_75(db_dsn: str, base_model: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "REVIEWLOOP_DATABASE_URL": db_dsn,
        "REVIEWLOOP_DATA_DIR": str(tmp_path / "data"),
        "COLUMNS": "200",
    }
    with retrain_lock(db_dsn) as held:
        assert held
        done = subprocess.run(
            [*CLI, "retrain", "--base-model", str(base_model), "--work-dir", str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        with open_pool(db_dsn, max_size=1) as pool, pytest.raises(RetrainBusyError, match="another retrain is running"):
            retrain(pool, RetrainConfig(base_model=base_model, work_dir=tmp_path))
    assert done.returncode == 75, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reviewloop: another retrain is running"), done.stderr
    refused = runs(db_dsn)
    assert [(r["kind"], r["status"]) for r in refused] == [("retrain", "skipped"), ("retrain", "skipped")]
    assert all("another retrain is running" in r["reason"] for r in refused)
    assert not any(p.name.startswith("run-") for p in tmp_path.iterdir()), "a refused retrain wrote files"


def test_without_a_base_model_the_command_says_what_to_set(db_dsn: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWLOOP_")}
    env |= {"REVIEWLOOP_DATABASE_URL": db_dsn, "REVIEWLOOP_DATA_DIR": str(tmp_path), "COLUMNS": "200"}
    done = subprocess.run([*CLI, "retrain"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "reviewloop: no base model to train: pass --base-model, set base_model in --config, or set"
        " REVIEWLOOP_LLM_MODEL_PATH (or REVIEWLOOP_LLM_MODEL, fetched from the hub)"
    ]


def test_the_periodic_job_is_registered_only_with_a_cron() -> None:
    assert RETRAIN_TASK not in create_queue_app(QueueConfig()).tasks
    app = create_queue_app(QueueConfig(retrain_cron="0 3 * * 0"))
    assert RETRAIN_TASK in app.tasks
    [periodic] = [p for p in app.periodic_registry.periodic_tasks.values() if p.task.name == RETRAIN_TASK]
    assert periodic.cron == "0 3 * * 0" and app.tasks[RETRAIN_TASK].queue == "maintenance"
    with pytest.raises(ConfigError, match="REVIEWLOOP_RETRAIN_CRON 'weekly' is not a cron expression"):
        register_retrain_task(create_queue_app(QueueConfig()), cron="weekly")


def test_the_periodic_job_counts_a_busy_lock_as_skipped(db_dsn: str, base_model: Path, tmp_path: Path) -> None:
    settings = Settings(database_url=db_dsn, data_dir=tmp_path, llm_model_path=base_model)
    with retrain_lock(db_dsn) as held:
        assert held
        outcome = run_scheduled_retrain(settings)
    assert outcome.startswith("skipped: another retrain is running")
    # without the lock held, the same job runs the pipeline: an empty store skips every stage
    outcome = run_scheduled_retrain(settings)
    assert "succeeded" in outcome and "decision keep" in outcome
    rows = runs(db_dsn)
    parent = [r for r in rows if r["kind"] == "retrain"][-1]
    stages = {r["kind"]: (r["status"], r["reason"]) for r in rows if r["parent_run_id"] is not None}
    assert parent["status"] == "succeeded"
    assert stages["dataset"][0] == "skipped" and "nothing to build from" in stages["dataset"][1]
    assert {k: s for k, (s, _) in stages.items()} == {
        k: "skipped" for k in ("dataset", "sft", "dpo", "kto", "rl", "eval")
    }
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT metrics FROM training_runs WHERE kind = 'eval'").fetchone()
    assert row is not None and row[0] == {"decision": "keep", "promoted": False}


def test_the_command_reports_every_stage_and_the_decision(db_dsn: str, base_model: Path, tmp_path: Path) -> None:
    """An empty store: every stage is skipped with its reason and the version in service (none) stays."""
    config = tmp_path / "retrain.toml"
    config.write_text("min_sft_examples = 2\n[sft]\nmax_steps = 3\n")
    env = {**os.environ, "REVIEWLOOP_DATABASE_URL": db_dsn, "REVIEWLOOP_DATA_DIR": str(tmp_path), "COLUMNS": "200"}
    done = subprocess.run(
        [*CLI, "retrain", "--base-model", str(base_model), "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "retrain run 1: succeeded" in done.stdout
    for stage in ("dataset", "sft", "dpo", "kto", "rl", "eval"):
        assert f"│ {stage} " in done.stdout, done.stdout
    assert "nothing to build from" in done.stdout
    assert "gate: keep (candidate version -); kept the version in service; in service: rules" in done.stdout
    [parent] = [r for r in runs(db_dsn) if r["kind"] == "retrain"]
    assert parent["status"] == "succeeded"
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT config FROM training_runs WHERE kind = 'retrain'").fetchone()
    assert row is not None and row[0]["min_sft_examples"] == 2 and row[0]["sft"]["max_steps"] == 3
    assert row[0]["work_dir"] == str(tmp_path / "retrain"), "the work dir defaults to <data dir>/retrain"
