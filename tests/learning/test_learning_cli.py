"""`reviewloop dataset|train|models`: the happy path prints a summary; what a user can get wrong
is one line on stderr and exit status 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_datasets import populate
from test_registry import trained_dir
from typer.testing import CliRunner

from api.cli import app

runner = CliRunner()


def invoke(db_dsn: str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"REVIEWLOOP_DATABASE_URL": db_dsn})
    return result.exit_code, result.stdout, result.stderr


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("reviewloop: ")
    return lines[0]


def test_dataset_build_on_an_empty_database(db_dsn: str, tmp_path: Path) -> None:
    code, _, stderr = invoke(db_dsn, "dataset", "build", "--out", str(tmp_path / "ds"))
    assert code == 1
    assert "no finished reviews with a strategy" in one_line(stderr)


def test_dataset_build_bad_date(db_dsn: str, tmp_path: Path) -> None:
    code, _, stderr = invoke(db_dsn, "dataset", "build", "--out", str(tmp_path / "ds"), "--since", "last week")
    assert code == 1 and "is not a date" in one_line(stderr)


def test_dataset_build_then_train_errors(db_dsn: str, tmp_path: Path, tiny_model_dir: Path) -> None:
    populate(db_dsn)
    ds = tmp_path / "ds"
    code, stdout, _ = invoke(db_dsn, "dataset", "build", "--out", str(ds), "--since", "2025-01-01")
    assert code == 0, stdout
    assert "strategy_sft" in stdout and "8 reviews" in stdout

    # a missing base model path
    code, _, stderr = invoke(
        db_dsn,
        "train",
        "sft",
        "--base-model",
        str(tmp_path / "nope"),
        "--dataset",
        str(ds),
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 1 and "base model path" in one_line(stderr) and "does not exist" in stderr

    # a dataset too small to train on (3 SFT examples, 8 needed by default)
    code, _, stderr = invoke(
        db_dsn, "train", "sft", "--base-model", str(tiny_model_dir), "--dataset", str(ds), "--out", str(tmp_path / "o")
    )
    assert code == 1 and "has 3 examples; at least 8 are needed" in one_line(stderr)

    # a corrupt dataset directory
    (ds / "strategy_dpo" / "dataset_dict.json").write_text("garbage")
    code, _, stderr = invoke(
        db_dsn, "train", "dpo", "--base-model", str(tiny_model_dir), "--dataset", str(ds), "--out", str(tmp_path / "o")
    )
    assert code == 1 and "strategy_dpo dataset" in one_line(stderr) and "corrupt" in stderr

    # a directory that is no dataset at all
    code, _, stderr = invoke(
        db_dsn,
        "train",
        "kto",
        "--base-model",
        str(tiny_model_dir),
        "--dataset",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 1 and "is not a dataset directory" in one_line(stderr)

    # a config file with a field that does not exist
    bad = tmp_path / "bad.json"
    bad.write_text('{"learning_rat": 0.1}')
    code, _, stderr = invoke(
        db_dsn,
        "train",
        "sft",
        "--base-model",
        str(tiny_model_dir),
        "--dataset",
        str(ds),
        "--out",
        str(tmp_path / "o"),
        "--config",
        str(bad),
    )
    assert code == 1 and "unknown SFTTrainingConfig field(s): learning_rat" in one_line(stderr)


def test_models_commands(db_dsn: str, tmp_path: Path) -> None:
    code, stdout, _ = invoke(db_dsn, "models", "list")
    assert code == 0 and "no model versions yet" in stdout
    for name in ("first", "second"):
        code, stdout, stderr = invoke(db_dsn, "models", "register", str(trained_dir(tmp_path / name)), "--name", name)
        assert code == 0 and f"({name}) as candidate" in stdout, stderr
        code, stdout, _ = invoke(db_dsn, "models", "promote", name)
        assert code == 0 and f"({name}) is in production" in stdout
    code, stdout, _ = invoke(db_dsn, "models", "list")
    assert code == 0 and "production" in stdout and "archived" in stdout
    code, stdout, _ = invoke(db_dsn, "models", "rollback")
    assert code == 0 and "(first) is in production" in stdout
    code, _, stderr = invoke(db_dsn, "models", "promote", "42")
    assert code == 1 and "no model version with id 42" in one_line(stderr)
    code, _, stderr = invoke(db_dsn, "models", "rollback")
    assert code == 1 and "no earlier production model version" in one_line(stderr)
    code, _, stderr = invoke(db_dsn, "models", "register", str(tmp_path))
    assert code == 1 and "holds no trained model" in one_line(stderr)


@pytest.mark.slow
def test_cli_starts_without_torch() -> None:
    probe = (
        "import sys, api.cli; print(sorted(m for m in ('torch', 'trl', 'transformers', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
