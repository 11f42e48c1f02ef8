"""The strategy model registry as the learning loop uses it: register what training produced,
promote it, roll back, and say which version serves.

The rows and their stage rules live in `agent.store.models`; this module adds what only the
learning side knows: reading a training output directory (its `training.json`: base model,
dataset snapshot, metrics), naming versions, accepting an id or a name, and describing the version
in service the way the LLM factory loads it (a base model path plus a LoRA adapter, or a name an
OpenAI-compatible server with multi-LoRA knows the adapter by).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.store import models as store_models
from agent.store.db import Database
from agent.store.models import Executor, ModelVersionRow
from learning.training import read_training_file
from reviewers.kernel.errors import InputError, TrainingError


@dataclass(frozen=True, slots=True)
class ServingModel:
    """How the strategy generator loads the version in service."""

    version_id: int
    name: str
    base_model: str
    adapter_path: Path | None  # a LoRA adapter for the transformers backend; None = a full model
    serving_name: str  # the adapter's name on a vLLM server started with --enable-lora


def default_version_name(kind: str, snapshot: str, *, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"strategy-{kind}-{snapshot[:8] or 'nodata'}-{stamp}"


def register_adapter(
    db: Database,
    *,
    name: str,
    base_model: str,
    adapter_path: Path | None,
    dataset_snapshot: str | None,
    metrics: Mapping[str, Any],
    parent: int | str | None = None,
    serving_name: str | None = None,
    executor: Executor | None = None,
) -> ModelVersionRow:
    """Add a candidate version. `parent` (id or name) is the version it was trained from; `executor`
    the reviewers its training and gate ran the plans with (None: not recorded)."""
    parent_id = resolve_version(db, parent)["id"] if parent is not None else None
    version_id = store_models.register_version(
        db,
        name=name,
        base_model=base_model,
        adapter_path=str(Path(adapter_path).resolve()) if adapter_path is not None else None,
        serving_name=serving_name or name,
        dataset_snapshot=dataset_snapshot,
        metrics=metrics,
        parent_id=parent_id,
        executor=executor,
    )
    return _get(db, version_id)


def register_trained(
    db: Database, out_dir: Path, *, name: str | None = None, parent: int | str | None = None
) -> ModelVersionRow:
    """Register a directory `train_sft`/`train_dpo`/`train_kto` wrote, from its training.json."""
    info = read_training_file(out_dir)
    try:
        kind, base_model = str(info["kind"]), str(info["base_model"])
        snapshot = str(info.get("dataset_snapshot") or "")
        metrics = {**dict(info.get("metrics") or {}), "kind": kind, "run_id": info.get("run_id")}
    except (KeyError, TypeError) as exc:
        raise TrainingError(f"{out_dir}/training.json lacks {exc}") from exc
    uses_lora = bool(info.get("uses_lora", True))
    return register_adapter(
        db,
        name=name or default_version_name(kind, snapshot),
        # a full fine-tune is its own base model; an adapter needs the base it was trained on
        base_model=base_model if uses_lora else str(Path(out_dir).resolve()),
        adapter_path=Path(out_dir) if uses_lora else None,
        dataset_snapshot=snapshot or None,
        metrics=metrics,
        parent=parent,
    )


def resolve_version(db: Database, ref: int | str | None) -> ModelVersionRow:
    """A version by id (an int or a string of digits) or by name."""
    if ref is None:
        raise InputError("no model version given")
    if isinstance(ref, int) or str(ref).isdigit():
        row = store_models.get_version(db, int(ref))
        if row is None:
            raise InputError(f"no model version with id {ref}")
        return row
    for row in store_models.list_versions(db):
        if row["name"] == ref:
            return row
    raise InputError(f"no model version named {ref!r}")


def promote_version(db: Database, ref: int | str) -> ModelVersionRow:
    """Put a version in service (the one it replaces is archived)."""
    version = resolve_version(db, ref)
    if version["stage"] == "rejected":
        raise InputError(f"model version {version['name']} was rejected; register it again to promote it")
    store_models.promote(db, version["id"])
    return _get(db, version["id"])


def rollback_version(db: Database) -> ModelVersionRow:
    """Reject the version in service and restore the one before it; returns the restored version."""
    return store_models.rollback(db)


def serving_model(db: Database) -> ServingModel | None:
    """The version in service as the LLM factory needs it, or None (the rule-based strategy serves)."""
    row = store_models.production_version(db)
    if row is None:
        return None
    return ServingModel(
        version_id=row["id"],
        name=row["name"],
        base_model=row["base_model"],
        adapter_path=Path(row["adapter_path"]) if row["adapter_path"] else None,
        serving_name=row["serving_name"] or row["name"],
    )


def _get(db: Database, version_id: int) -> ModelVersionRow:
    row = store_models.get_version(db, version_id)
    if row is None:  # deleted between two statements: only an operator's manual DELETE does that
        raise InputError(f"no model version with id {version_id}")
    return row
