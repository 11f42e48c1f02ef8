"""The retraining pipeline: reviews and feedback in, a better strategy model in service (or not).

    dataset build ─▶ SFT ─▶ DPO (pairs) or KTO (unpaired labels) ─▶ StraTA RL ─▶ evaluation gate ─▶ promote
                     └──────── each stage trains a LoRA adapter on the base with the earlier ones folded in

Every stage runs only when its data suffices and is otherwise skipped with the reason; every stage is
a `training_runs` row (kind dataset, sft, dpo, kto, rl, eval) under one parent row of kind `retrain`
(learning/retrain_stages.py). The gate compares the combined candidate with the version in service
and promotes it only when it is better by the margin (`gate_stage` in learning/retrain_stages.py runs
the one evaluation gate, learning/gate.py).

Two retrains never run at once: a Postgres advisory lock, held on a dedicated connection for the
whole run, refuses a second one (`RetrainBusyError`, recorded as a skipped `retrain` row). Rows a
killed retrain left `running` are closed as failed by the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg

from agent.store import models as store_models
from agent.store.db import Pool, connection
from agent.store.models import RunStatus
from learning.retrain_config import RetrainConfig, config_as_dict
from learning.retrain_stages import (
    STAGES,
    Chain,
    Decision,
    RunContext,
    StageKind,
    StageRecord,
    Stages,
    dataset_stage,
    first_line,
    gate_stage,
    preference_stage,
    rl_stage,
    sft_stage,
)
from learning.vllm_lora import VllmServer
from reviewers.kernel.errors import ReviewloopError, TrainingError

log = logging.getLogger(__name__)

RETRAIN_LOCK_KEY = 0x72767274  # "rvrt": one retrain at a time, across processes and hosts


class RetrainBusyError(TrainingError):
    """Another retrain holds the lock; this one did not start."""


@dataclass
class RetrainReport:
    """What one retrain did: its parent run, each stage, the candidate and the gate's decision."""

    run_id: int
    status: RunStatus
    reason: str | None
    stages: list[StageRecord]
    candidate_version_id: int | None = None
    decision: Decision | None = None
    promoted: bool = False
    serving_version_id: int | None = None  # the version in service when the run ended

    def stage(self, kind: StageKind) -> StageRecord:
        for record in self.stages:
            if record.kind == kind:
                return record
        raise KeyError(kind)


# --- the lock --------------------------------------------------------------------------------------


@contextmanager
def retrain_lock(dsn: str) -> Iterator[bool]:
    """Try the retrain lock on a connection of its own, held until the block ends; yields whether it was got.

    A session-level advisory lock lives as long as its connection: if the process dies, Postgres
    drops the connection and with it the lock, so a crashed retrain never blocks the next one.
    """
    conn = psycopg.connect(dsn, autocommit=True, application_name="reviewloop-retrain-lock")
    try:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (RETRAIN_LOCK_KEY,)).fetchone()
        got = bool(row and row[0])
        try:
            yield got
        finally:
            if got and not conn.closed:
                conn.execute("SELECT pg_advisory_unlock(%s)", (RETRAIN_LOCK_KEY,))
    finally:
        conn.close()


def pool_dsn(db: Pool) -> str:
    """The DSN a pool connects with (a pool may also be built from a callable: not ours)."""
    if not isinstance(db.conninfo, str):
        raise TrainingError("the store pool has no plain DSN to open the retrain lock connection with")
    return db.conninfo


def _running_retrain(db: Pool) -> tuple[int, datetime] | None:
    with connection(db) as conn:
        row = conn.execute(
            "SELECT id, started_at FROM training_runs WHERE kind = 'retrain' AND status = 'running'"
            " ORDER BY id DESC LIMIT 1"
        ).fetchone()
    return (int(row[0]), row[1]) if row else None


def _close_interrupted(db: Pool, by_run: int) -> int:
    """Rows a killed retrain left `running` (we hold the lock, so none of them is alive)."""
    with connection(db) as conn:
        rows = conn.execute(
            "UPDATE training_runs SET status = 'failed', finished_at = now(),"
            " reason = 'interrupted: the process ended before the run finished (closed by retrain run ' || %s || ')'"
            " WHERE status = 'running' AND id <> %s AND (kind = 'retrain' OR parent_run_id IN"
            " (SELECT id FROM training_runs WHERE kind = 'retrain')) RETURNING id",
            (str(by_run), by_run),
        ).fetchall()
    return len(rows)


# --- the pipeline ----------------------------------------------------------------------------------


def retrain(db: Pool, config: RetrainConfig, *, vllm: VllmServer | None = None) -> RetrainReport:
    """Run the whole pipeline once (see the module docstring); refuses to run beside another retrain.

    Errors the data or the configuration cause end the run with its status `failed` and the reason
    (the report says which stage); anything else is recorded and raised.
    """
    if config.base_model is None:
        raise TrainingError("no base model: pass --base-model or set REVIEWLOOP_LLM_MODEL_PATH")
    from learning.training import check_base_model

    check_base_model(config.base_model)
    with retrain_lock(pool_dsn(db)) as got:
        if not got:
            running = _running_retrain(db)
            since = f" (run {running[0]}, started {running[1]:%Y-%m-%d %H:%M:%S %Z})" if running else ""
            reason = f"another retrain is running{since}; this one did not start"
            run_id = store_models.start_run(db, "retrain", config_as_dict(config))
            store_models.finish_run(db, run_id, status="skipped", reason=reason)
            raise RetrainBusyError(reason)
        run_id = store_models.start_run(db, "retrain", config_as_dict(config))
        closed = _close_interrupted(db, run_id)
        if closed:
            log.warning("closed %d training runs an interrupted retrain left running", closed)
        run_dir = Path(config.work_dir) / f"run-{run_id}"
        run = RunContext(
            db=db,
            config=config,
            stages=Stages(db, run_id),
            chain=Chain(base_model=Path(config.base_model), work_dir=run_dir),
            dataset_dir=run_dir / "dataset",
        )
        report = RetrainReport(run_id=run_id, status="running", reason=None, stages=run.stages.records)
        try:
            _run_stages(run, report, vllm=vllm)
        except ReviewloopError as exc:
            report.status, report.reason = "failed", first_line(exc)
        except BaseException as exc:
            report.status, report.reason = "failed", f"{type(exc).__name__}: {first_line(exc)}"
            _finish_parent(db, report)
            raise
        finally:
            if not config.keep_merged:
                run.chain.remove_merged()
        if report.status == "running":
            report.status = "succeeded"
        if report.decision is None:  # no gate ran: the version in service stays
            report.decision = "keep"
        production = store_models.production_version(db)
        report.serving_version_id = production["id"] if production else None
        _finish_parent(db, report)
        return report


def _run_stages(run: RunContext, report: RetrainReport, *, vllm: VllmServer | None) -> None:
    dataset = _guarded(run, "dataset", lambda: dataset_stage(run))
    if dataset.status != "succeeded":
        _skip_rest(run.stages, "no dataset: nothing to train on")
        return
    _guarded(run, "sft", lambda: sft_stage(run))
    _guarded(run, "dpo", lambda: preference_stage(run))
    _guarded(run, "rl", lambda: rl_stage(run))

    def gate() -> StageRecord:
        outcome = gate_stage(run, vllm=vllm)
        report.decision, report.promoted = outcome.decision, outcome.promoted
        report.candidate_version_id = outcome.candidate_version_id
        return outcome.record

    _guarded(run, "eval", gate)


def _guarded(run: RunContext, kind: StageKind, body: Callable[[], StageRecord]) -> StageRecord:
    """Run one stage; an error a user or the data can cause ends the retrain with the stage failed."""
    try:
        return body()
    except ReviewloopError as exc:
        if not any(r.kind == kind for r in run.stages.records):
            run_id = run.stages.start(kind, {})
            run.stages.finish(kind, run_id, status="failed", reason=first_line(exc), metrics={})
        _skip_rest(run.stages, f"not run: the {kind} stage failed")
        raise


def _skip_rest(stages: Stages, reason: str) -> None:
    done = {r.kind for r in stages.records}
    for kind in STAGES:
        if kind not in done:
            stages.skip(kind, reason)


def _finish_parent(db: Pool, report: RetrainReport) -> None:
    metrics = {
        "stages": {r.kind: r.status for r in report.stages},
        "candidate_version_id": report.candidate_version_id,
        "decision": report.decision,
        "promoted": report.promoted,
        "serving_version_id": report.serving_version_id,
    }
    store_models.finish_run(
        db,
        report.run_id,
        status="failed" if report.status == "failed" else "succeeded",
        reason=report.reason,
        metrics=metrics,
        model_version_id=report.candidate_version_id,
    )


__all__ = [
    "RETRAIN_LOCK_KEY",
    "RetrainBusyError",
    "RetrainConfig",
    "RetrainReport",
    "StageRecord",
    "VllmServer",
    "retrain",
    "retrain_lock",
]
