"""The analyzers never wait for the model (issue 40): `reviewloop review` against an OpenAI-compatible
address on loopback that accepts the connection and never answers still reports every analyzer
finding, and names the model steps that did not complete.

The review's deadline here is far shorter than one model call's timeout: before the analyzers ran
first, under a deadline of their own, the strategy's unanswered call used the whole deadline and
the review ended with no findings; and no model call waits past the model's own deadline
(`agent.llm.deadline`), so the review ends long before one call's timeout would."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from tests.integration.test_findings_kept import SEVEN_FLOWS, new_file_diff

FLOW_LINES = {15, 21, 27, 33, 39, 46, 52}  # the seven request-to-sink flows of SEVEN_FLOWS
MODEL_TIMEOUT_S = 60  # one unanswered call's wait, were it not for the model's deadline (and 2 retries)
DEADLINE_S = 3  # the analyzers' own, then the model's own


@pytest.fixture
def silent_model_server() -> Iterator[str]:
    """A loopback address whose connections the kernel accepts and nobody ever answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def test_a_model_that_never_answers_leaves_every_analyzer_finding(
    silent_model_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("REVIEWLOOP_LLM_MODEL_PATH", raising=False)
    monkeypatch.setenv("REVIEWLOOP_LLM_BASE_URL", silent_model_server)
    monkeypatch.setenv("REVIEWLOOP_LLM_MODEL", "fake-model")
    monkeypatch.setenv("REVIEWLOOP_LLM_TIMEOUT_S", str(MODEL_TIMEOUT_S))
    monkeypatch.setenv("REVIEWLOOP_LLM_MAX_RETRIES", "2")
    monkeypatch.setenv("REVIEWLOOP_LLM_CONTEXT_TOKENS", "8192")  # not asked of the server, outside any deadline
    monkeypatch.setenv("REVIEWLOOP_REVIEW_DEADLINE_S", str(DEADLINE_S))
    patch = tmp_path / "change.patch"
    patch.write_text(new_file_diff("app/views.py", SEVEN_FLOWS), encoding="utf-8")

    started = time.monotonic()
    result = CliRunner().invoke(app, ["review", "--diff", str(patch), "--no-store", "--format", "json"])
    elapsed = time.monotonic() - started

    assert result.exit_code == 0, result.output
    assert elapsed < MODEL_TIMEOUT_S / 2, f"{elapsed:.0f} s: a model call waited past the model's deadline"
    doc = json.loads(result.stdout)
    flows = {f["line"] for f in doc["findings"] if f["category"] == "security" and f["verdict"] == "REAL"}
    assert flows == FLOW_LINES
    assert doc["complete"] is True and doc["not_reviewed"] == []  # the deadline cut no analyzer short
    assert doc["strategy_source"] == "fallback"
    model = doc["model"]
    assert model["completed"] is False
    [strategy] = [gap for gap in model["not_completed"] if gap.startswith("strategy:")]
    assert "LLMUnavailableError" in strategy or "timed out" in strategy.lower(), strategy
    named = " ".join(model["not_completed"])
    assert "security reviewer:" in named and "verifier: model judgment unavailable" in named

    table = CliRunner().invoke(app, ["review", "--diff", str(patch), "--no-store", "--format", "table"])
    assert table.exit_code == 0, table.output
    assert "model step not completed: strategy:" in table.stdout
