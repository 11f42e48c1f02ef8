"""`reviewloop review`: a Databricks notebook exported as Python source receives names the file does
not bind (the runtime's `spark`, `dbutils`, `display`; everything a `%run` cell's notebook binds), so
ruff's F821 there is no finding; a name no notebook can receive still is (issue 39, the second
held-out batch of 2026-11-29: every wrong posted finding was this shape). It failed before the
change (main at c557b45)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.local_range import change_repo, review_report

HEADER = "# Databricks notebook source\n"
CELL = "\n# COMMAND ----------\n\n"


@pytest.fixture(autouse=True)
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    for name in (
        "REVIEWLOOP_DATABASE_URL",
        "REVIEWLOOP_LLM_BASE_URL",
        "REVIEWLOOP_LLM_MODEL",
        "REVIEWLOOP_LLM_MODEL_PATH",
    ):
        monkeypatch.delenv(name, raising=False)


def _review(tmp_path: Path, head: dict[str, str]) -> list[dict[str, Any]]:
    findings: list[dict[str, Any]] = review_report(change_repo(tmp_path / "repo", {}, head), "--all")["findings"]
    return [f for f in findings if f["rule"] == "ruff:F821"]


def test_names_a_notebook_receives_from_the_runtime_or_a_run_cell_are_no_finding(tmp_path: Path) -> None:
    runs_common = (
        HEADER + "# MAGIC %run ./Common" + CELL + "info = get_model_info(model_uri)\n" + CELL
        + "df = spark.table(input_table)\ndisplay(df)\n"
    )  # fmt: skip
    runtime_only = HEADER + "rows = spark.sql('select 1').collect()\ndbutils.widgets.text('name', '')\ndisplay(rows)\n"
    found = _review(tmp_path, {"notebooks/Signature.py": runs_common, "notebooks/Rows.py": runtime_only})
    assert found == []


def test_an_undefined_name_is_still_said_where_no_notebook_can_supply_it(tmp_path: Path) -> None:
    # no %run cell: a name that is neither the runtime's nor bound here fails when the cell runs
    typo = HEADER + "import mlflow\n" + CELL + "client = mlfow.MlflowClient()\ndisplay(client)\n"
    # not a notebook at all: `spark` is just an unbound name in a module
    plain = "def rows():\n    return spark.sql('select 1').collect()\n"
    found = _review(tmp_path, {"notebooks/Typo.py": typo, "app/rows.py": plain})
    assert sorted((f["path"], f["title"]) for f in found) == [
        ("app/rows.py", "Undefined name `spark`"),
        ("notebooks/Typo.py", "Undefined name `mlfow`"),
    ]
