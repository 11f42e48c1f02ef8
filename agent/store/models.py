"""The model registry and the training-run log.

Every trained strategy model is a `model_versions` row, kept forever: `candidate` until the eval
gate decides, then `production` (at most one, enforced by the schema), `archived` when a newer one
replaced it, or `rejected`. Rolling back rejects the version in service and re-promotes the one it
replaced. `training_runs` records each pipeline step with its config, per-step metrics and outcome.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, TypedDict, cast

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from agent.store.db import Database, connection
from reviewers.kernel.errors import InputError

ModelStage = Literal["candidate", "production", "archived", "rejected"]
# The reviewers a strategy model was optimised for: run by the analyzers alone (the replay
# environment's fixed executor, as RL and the gate use it) or by a model's tool loop (production).
Executor = Literal["analyzer-only", "model-driven"]
TrainingKind = Literal["dataset", "sft", "dpo", "kto", "rl", "eval", "retrain"]
RunStatus = Literal["running", "succeeded", "failed", "skipped"]

# Serialises promotions and rollbacks across processes (the retrain CronJob and an operator's CLI).
PROMOTION_LOCK_KEY = 0x72766D70  # "rvmp"


class ModelVersionRow(TypedDict):
    id: int
    name: str
    stage: ModelStage
    base_model: str
    adapter_path: str | None
    serving_name: str | None
    dataset_snapshot: str | None
    metrics: dict[str, Any]
    parent_id: int | None
    created_at: datetime
    promoted_at: datetime | None
    executor: Executor | None


class TrainingRunRow(TypedDict):
    id: int
    kind: TrainingKind
    status: RunStatus
    reason: str | None
    config: dict[str, Any]
    metrics: dict[str, Any]
    step_metrics: list[dict[str, Any]]
    model_version_id: int | None
    parent_run_id: int | None
    started_at: datetime
    finished_at: datetime | None


def json_safe(value: Any) -> Any:
    """`value` with NaN and infinities as null: jsonb refuses them, and a diverged loss must still log."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


# --- model versions --------------------------------------------------------------------------------


def register_version(
    db: Database,
    *,
    name: str,
    base_model: str,
    adapter_path: str | None = None,
    serving_name: str | None = None,
    dataset_snapshot: str | None = None,
    metrics: Mapping[str, Any] | None = None,
    parent_id: int | None = None,
    executor: Executor | None = None,
) -> int:
    """Add a candidate version; returns its id. Names are unique. `executor`: the reviewers it was
    trained and gated for (None: not recorded)."""
    try:
        with connection(db) as conn:
            row = conn.execute(
                "INSERT INTO model_versions (name, base_model, adapter_path, serving_name, dataset_snapshot,"
                " metrics, parent_id, executor) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    name,
                    base_model,
                    adapter_path,
                    serving_name,
                    dataset_snapshot,
                    Jsonb(json_safe(metrics or {})),
                    parent_id,
                    executor,
                ),
            ).fetchone()
    except InputError as exc:
        if isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
            raise InputError(f"a model version named {name!r} already exists") from exc
        if isinstance(exc.__cause__, psycopg.errors.ForeignKeyViolation):
            raise InputError(f"no parent model version with id {parent_id}") from exc
        raise
    if row is None:  # cannot happen: INSERT .. RETURNING returns the row
        raise InputError(f"model version {name!r} was not stored")
    return int(row[0])


def promote(db: Database, version_id: int) -> None:
    """Put `version_id` in service; the version it replaces is archived. One transaction."""
    with connection(db) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PROMOTION_LOCK_KEY,))
        if conn.execute("SELECT 1 FROM model_versions WHERE id = %s", (version_id,)).fetchone() is None:
            raise InputError(f"no model version with id {version_id}")
        conn.execute(
            "UPDATE model_versions SET stage = 'archived' WHERE stage = 'production' AND id <> %s",
            (version_id,),
        )
        conn.execute("UPDATE model_versions SET stage = 'production', promoted_at = now() WHERE id = %s", (version_id,))


def rollback(db: Database) -> ModelVersionRow:
    """Reject the version in service and re-promote the one that served before it.

    The previous one is the archived version promoted most recently. Rejecting (not archiving) the
    current one makes a second rollback go one further back instead of flipping between two.
    """
    with connection(db) as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (PROMOTION_LOCK_KEY,))
        previous = cur.execute(
            "SELECT id FROM model_versions WHERE stage = 'archived' AND promoted_at IS NOT NULL"
            " ORDER BY promoted_at DESC, id DESC LIMIT 1"
        ).fetchone()
        if previous is None:
            raise InputError("no earlier production model version to roll back to")
        cur.execute("UPDATE model_versions SET stage = 'rejected' WHERE stage = 'production'")
        row = cur.execute(
            "UPDATE model_versions SET stage = 'production', promoted_at = now() WHERE id = %s RETURNING *",
            (previous["id"],),
        ).fetchone()
    return cast(ModelVersionRow, row)


def reject_version(db: Database, version_id: int) -> None:
    """The eval gate said no: the candidate stays on record, out of service."""
    with connection(db) as conn:
        row = conn.execute(
            "UPDATE model_versions SET stage = 'rejected' WHERE id = %s AND stage = 'candidate' RETURNING id",
            (version_id,),
        ).fetchone()
    if row is None:
        raise InputError(f"no candidate model version with id {version_id}")


def production_version(db: Database) -> ModelVersionRow | None:
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM model_versions WHERE stage = 'production'").fetchone()
    return cast(ModelVersionRow, row) if row else None


def get_version(db: Database, version_id: int) -> ModelVersionRow | None:
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM model_versions WHERE id = %s", (version_id,)).fetchone()
    return cast(ModelVersionRow, row) if row else None


def list_versions(db: Database) -> list[ModelVersionRow]:
    """Every version, newest first."""
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM model_versions ORDER BY created_at DESC, id DESC").fetchall()
    return [cast(ModelVersionRow, row) for row in rows]


# --- training runs ---------------------------------------------------------------------------------


def start_run(db: Database, kind: TrainingKind, config: Mapping[str, Any], *, parent_run_id: int | None = None) -> int:
    with connection(db) as conn:
        row = conn.execute(
            "INSERT INTO training_runs (kind, config, parent_run_id) VALUES (%s, %s, %s) RETURNING id",
            (kind, Jsonb(json_safe(config)), parent_run_id),
        ).fetchone()
    if row is None:  # cannot happen: INSERT .. RETURNING returns the row
        raise InputError(f"the {kind} run was not stored")
    return int(row[0])


def log_step(db: Database, run_id: int, metrics: Mapping[str, Any]) -> None:
    """Append one step's metrics (reward std, entropy, grad norm, ...) to the run."""
    with connection(db) as conn:
        row = conn.execute(
            "UPDATE training_runs SET step_metrics = step_metrics || jsonb_build_array(%s::jsonb)"
            " WHERE id = %s RETURNING id",
            (Jsonb(json_safe(metrics)), run_id),
        ).fetchone()
    if row is None:
        raise InputError(f"no training run with id {run_id}")


def finish_run(
    db: Database,
    run_id: int,
    *,
    status: RunStatus,
    metrics: Mapping[str, Any] | None = None,
    reason: str | None = None,
    model_version_id: int | None = None,
) -> None:
    with connection(db) as conn:
        row = conn.execute(
            "UPDATE training_runs SET status = %s, metrics = %s, reason = %s,"
            " model_version_id = coalesce(%s, model_version_id), finished_at = now()"
            " WHERE id = %s RETURNING id",
            (status, Jsonb(json_safe(metrics or {})), reason, model_version_id, run_id),
        ).fetchone()
    if row is None:
        raise InputError(f"no training run with id {run_id}")


def get_run(db: Database, run_id: int) -> TrainingRunRow | None:
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM training_runs WHERE id = %s", (run_id,)).fetchone()
    return cast(TrainingRunRow, row) if row else None


def list_runs(db: Database, *, limit: int = 50, kind: TrainingKind | None = None) -> list[TrainingRunRow]:
    """Newest first, step metrics included."""
    if limit < 1:
        raise InputError(f"invalid limit {limit}")
    with connection(db) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT * FROM training_runs WHERE (%(kind)s::text IS NULL OR kind = %(kind)s)"
            " ORDER BY started_at DESC, id DESC LIMIT %(limit)s",
            {"kind": kind, "limit": limit},
        ).fetchall()
    return [cast(TrainingRunRow, row) for row in rows]
