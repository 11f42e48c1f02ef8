"""The sample cases that ship with the project: `reviewloop eval` runs on them in a fresh clone
(docs/cli.md's example, once the README's), and the committed file is exactly what `examples/make_cases.py`
builds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.verdicts.track_record import poor_record, shipped_track_record
from api.cli import app

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "examples" / "cases.jsonl"


@pytest.fixture
def env(db_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATABASE_URL", db_dsn)
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)


def eval_scores() -> dict[str, Any]:
    result = CliRunner().invoke(app, ["eval", "--cases", str(CASES), "--format", "json"])
    assert result.exit_code == 0, result.output
    scores: dict[str, Any] = json.loads(result.stdout)
    assert {c["id"] for c in scores["cases"]} == {json.loads(line)["id"] for line in CASES.read_text().splitlines()}
    return scores


def test_the_readme_eval_example_runs_on_the_shipped_cases(env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "reviewloop eval --cases examples/cases.jsonl" in (REPO / "docs/cli.md").read_text(encoding="utf-8")
    # By default (posting="proven") both injections post; the shared /tmp file (bandit:B108, never
    # judged on unseen code) is listed for a person, so eval, which scores what posts, misses it.
    cases = {c["id"]: c for c in eval_scores()["cases"]}
    assert cases["sample-shell-from-form"] == {"id": "sample-shell-from-form", "tp": 1, "fp": 0, "fn": 1}
    assert cases["sample-sql-percent"]["tp"] == 1 and cases["sample-sql-percent"]["fn"] == 0
    assert cases["sample-clean-conversion"]["fp"] == 0
    # posting every rule no record holds back: the shared /tmp file's rule (bandit:B108) is held back by
    # its held-out record (right in none of the findings judged at first sight), so recall stays at the
    # two injections; with that record set aside the planted problems are all found, and the clean
    # change is left alone either way
    monkeypatch.setenv("REVIEWLOOP_POSTING", "all")
    assert poor_record(shipped_track_record().get("bandit:B108"))
    scores = eval_scores()
    assert cases_found(scores) == {"sample-shell-from-form": (1, 1), "sample-sql-percent": (1, 0)}
    monkeypatch.setattr("agent.verdicts.track_record.shipped_track_record", dict)
    monkeypatch.setattr("agent.verdicts.posting.shipped_track_record", dict)
    scores = eval_scores()
    assert scores["overall"]["recall"] == 1.0
    clean = next(c for c in scores["cases"] if c["id"] == "sample-clean-conversion")
    assert clean["fp"] == 0


def cases_found(scores: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Case id → (found, missed), for the cases with a planted problem."""
    return {c["id"]: (c["tp"], c["fn"]) for c in scores["cases"] if c["tp"] or c["fn"]}


def test_the_committed_cases_are_what_the_generator_builds(tmp_path: Path) -> None:
    before = CASES.read_bytes()
    copy = tmp_path / "examples"
    copy.mkdir()
    (copy / "make_cases.py").write_bytes((REPO / "examples" / "make_cases.py").read_bytes())
    subprocess.run([sys.executable, str(copy / "make_cases.py")], check=True, timeout=60)
    assert (copy / "cases.jsonl").read_bytes() == before
