"""The model registry through the learning side: register from a training directory, promote,
roll back, and what the strategy generator would load."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.store.db import open_pool
from agent.store.models import production_version
from learning.registry import (
    promote_version,
    register_adapter,
    register_trained,
    resolve_version,
    rollback_version,
    serving_model,
)
from learning.train_configs import SFTTrainingConfig
from learning.training import TrainResult, write_training_file
from reviewers.kernel.errors import InputError, TrainingError


def trained_dir(path: Path, *, uses_lora: bool = True) -> Path:
    path.mkdir()
    result = TrainResult(
        kind="sft",
        out_dir=path,
        base_model="/models/qwen2.5-1.5b-instruct",
        dataset_snapshot="0123456789abcdef",
        run_id=None,
        metrics={"after_eval_loss": 1.5, "before_eval_loss": 2.5},
        uses_lora=uses_lora,
    )
    write_training_file(result, SFTTrainingConfig())
    return path


def test_register_promote_rollback(db_dsn: str, tmp_path: Path) -> None:
    with open_pool(db_dsn, max_size=2) as pool:
        assert production_version(pool) is None and serving_model(pool) is None
        v1 = register_trained(pool, trained_dir(tmp_path / "v1"), name="sft-1")
        assert v1["stage"] == "candidate"
        assert v1["base_model"] == "/models/qwen2.5-1.5b-instruct"
        assert v1["adapter_path"] == str((tmp_path / "v1").resolve())
        assert v1["dataset_snapshot"] == "0123456789abcdef"
        assert v1["metrics"]["after_eval_loss"] == 1.5 and v1["metrics"]["kind"] == "sft"
        v2 = register_trained(pool, trained_dir(tmp_path / "v2"), parent="sft-1")
        assert v2["parent_id"] == v1["id"] and v2["name"].startswith("strategy-sft-01234567-")

        promote_version(pool, "sft-1")
        promoted = promote_version(pool, str(v2["id"]))
        assert promoted["stage"] == "production"
        assert resolve_version(pool, v1["id"])["stage"] == "archived"
        serving = serving_model(pool)
        assert serving is not None and serving.version_id == v2["id"]
        assert serving.adapter_path == (tmp_path / "v2").resolve() and serving.serving_name == v2["name"]

        restored = rollback_version(pool)
        assert restored["id"] == v1["id"] and restored["stage"] == "production"
        assert resolve_version(pool, v2["id"])["stage"] == "rejected"
        with pytest.raises(InputError, match="no earlier production model version"):
            rollback_version(pool)
        with pytest.raises(InputError, match="was rejected"):
            promote_version(pool, v2["id"])
        with pytest.raises(InputError, match="no model version named 'nope'"):
            promote_version(pool, "nope")
        with pytest.raises(InputError, match="no model version with id 999"):
            promote_version(pool, 999)


def test_full_finetune_is_its_own_base(db_dsn: str, tmp_path: Path) -> None:
    with open_pool(db_dsn, max_size=1) as pool:
        row = register_trained(pool, trained_dir(tmp_path / "full", uses_lora=False), name="full")
        assert row["adapter_path"] is None and row["base_model"] == str((tmp_path / "full").resolve())
        direct = register_adapter(
            pool,
            name="served",
            base_model="/m",
            adapter_path=None,
            dataset_snapshot=None,
            metrics={},
            serving_name="strategy-lora",
        )
        assert direct["serving_name"] == "strategy-lora"
        with pytest.raises(InputError, match="already exists"):
            register_adapter(pool, name="served", base_model="/m", adapter_path=None, dataset_snapshot=None, metrics={})


def test_register_needs_a_training_directory(db_dsn: str, tmp_path: Path) -> None:
    with open_pool(db_dsn, max_size=1) as pool, pytest.raises(TrainingError, match="holds no trained model"):
        register_trained(pool, tmp_path)
