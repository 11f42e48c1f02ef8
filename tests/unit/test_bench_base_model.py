"""The base-model benchmark's reading of spans, its medians and its table — by hand-computed values,
without loading a model — and the fake model server's model list."""

from __future__ import annotations

import sys
from pathlib import Path

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.diff import parse_unified_diff
from agent.llm.spans import chat_span
from agent.repo_config import parse_repo_config
from agent.strategy import Strategy

# bench/ is the repository's benchmark folder, not an installed package: import it from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.base_model import (  # noqa: E402
    BaseModelResult,
    ModelCall,
    ReviewRun,
    calls_from_spans,
    demo_request,
    render,
    run,
    summarize,
    unified_diff,
)
from bench.fake_llm_server import DelayedLLMServer  # noqa: E402


def test_model_calls_are_read_from_the_genai_spans_and_other_spans_are_ignored() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("review"):
        with chat_span(provider="transformers", model="m", purpose="strategy", tracer=tracer) as call:
            call.input_tokens, call.output_tokens = 900, 40
        with chat_span(provider="transformers", model="m", purpose="reviewer.security", tracer=tracer) as call:
            call.input_tokens, call.output_tokens = 1200, 25
        with (
            pytest.raises(RuntimeError),
            chat_span(provider="transformers", model="m", purpose="verify", tracer=tracer),
        ):
            raise RuntimeError("generation failed")
    calls = calls_from_spans(exporter.get_finished_spans())
    assert [(c.purpose, c.input_tokens, c.output_tokens, c.failed) for c in calls] == [
        ("strategy", 900, 40, False),
        ("reviewer.security", 1200, 25, False),
        ("verify", 0, 0, True),  # failed before the tokenizer counted anything
    ]
    assert all(c.latency_s >= 0 for c in calls)


def call(purpose: str, tokens_in: int, tokens_out: int, latency_s: float = 1.0) -> ModelCall:
    return ModelCall(purpose, tokens_in, tokens_out, latency_s, failed=False)


def review(n: int, wall_s: float, calls: list[ModelCall], *, posted: int = 1) -> ReviewRun:
    return ReviewRun("demo", n, wall_s, calls, executions=n, posted=posted, cut_by_deadline=0, load_1min=2.0)


def test_rows_are_medians_per_n_with_calls_counted_by_stage() -> None:
    runs = [
        review(1, 100.0, [call("strategy", 1000, 50), call("reviewer.security", 2000, 20)]),
        review(1, 140.0, [call("strategy", 1000, 50), call("verify", 500, 10), call("verify", 500, 10)]),
        review(1, 120.0, [call("strategy", 1000, 70)]),
        review(3, 300.0, [call("strategy", 3000, 150), call("reviewer.code_quality", 4000, 40)], posted=2),
    ]
    one, three = summarize(runs)
    assert (one["n"], one["runs"], one["wall_s"], one["wall_runs_s"]) == (1, 3, 120.0, [100.0, 140.0, 120.0])
    assert one["calls"] == 2  # median of 2, 3, 1
    assert one["input_tokens"] == 2000  # median of 3000, 2000, 1000
    assert one["output_tokens"] == 70  # median of 70, 70, 70
    assert one["model_s"] == 2.0
    assert one["calls_by_stage"] == {"reviewer": 0, "strategy": 1, "verify": 0}  # medians of (1,0,0), (1,1,1), (0,2,0)
    assert (three["n"], three["calls"], three["input_tokens"], three["posted"]) == (3, 2, 7000, 2)
    assert three["calls_by_stage"] == {"reviewer": 1, "strategy": 1}


def test_the_table_shows_the_figures_and_n3_against_n1() -> None:
    rows = summarize(
        [
            review(1, 200.0, [call("strategy", 10_000, 400)] + [call("reviewer.security", 1_000, 10)] * 3),
            review(3, 500.0, [call("strategy", 25_000, 900)] * 2 + [call("verify", 1_000, 10)] * 6),
        ]
    )
    text = render(BaseModelResult(rows=rows, model="smollm2", max_output_tokens=1024))
    assert "| 1 | 1 | 4 | reviewer 3, strategy 1 | 0 | 13,000 | 430 | 4 | 200 | 200 | 1 | 0 | 2.00 |" in text
    assert "| 3 | 3 | 8 | strategy 2, verify 6 | 0 | 56,000 | 1,860 | 8 | 500 | 500 | 1 | 0 | 2.00 |" in text
    assert "2.50× the wall time, 4.31× the input tokens, 2.00× the calls" in text
    failed = render(BaseModelResult(rows=rows[:1], failures=["N = 3, run 1: LLMError: boom"]))
    assert "- N = 3, run 1: LLMError: boom" in failed and "× the wall time" not in failed


def test_a_skipped_run_is_one_line() -> None:
    text = render(BaseModelResult(skipped="the base model could not be built"))
    assert text.splitlines()[-1] == "Skipped: the base model could not be built."
    assert "|" not in text


def test_the_demo_diff_has_only_the_changed_files_and_the_config_sets_n() -> None:
    diff = unified_diff(
        {"a.py": "x = 1\n", "same.py": "y\n"}, {"a.py": "x = 1\nz = 2\n", "same.py": "y\n", "b.py": "w"}
    )
    changes = {c.path: (c.status, [(ln.kind, ln.text, ln.new_line) for h in c.hunks for ln in h.lines if ln.kind != "context"])
               for c in parse_unified_diff(diff)}  # fmt: skip
    assert changes == {"a.py": ("modified", [("add", "z = 2", 2)]), "b.py": ("added", [("add", "w", 1)])}
    request = demo_request(3)
    assert request.files is not None and request.diff_text
    assert parse_repo_config(request.files[".reviewloop.toml"]).agreement.strategies == 3
    assert ".reviewloop.toml" not in request.diff_text  # the config is in the files, not the change


def test_the_fake_server_lists_its_model_for_the_context_length_lookup() -> None:
    strategy = Strategy(change_type="feature", plan=[], stop_condition="done")
    with DelayedLLMServer(delay_s=0.0, strategy=strategy) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        try:
            models = client.models.list()
        finally:
            client.close()
    assert [m.id for m in models.data] == ["bench"]
    assert (models.data[0].model_extra or {}).get("max_model_len") is None  # no context length: nothing trimmed


@pytest.mark.slow  # imports torch (seconds), though it loads no model
def test_a_model_that_cannot_be_loaded_skips_the_benchmark_with_its_reason(tmp_path: Path) -> None:
    result = run(model_path=tmp_path / "no-model")
    assert result.rows == [] and result.skipped is not None
    assert "ConfigError" in result.skipped and "config.json is missing" in result.skipped
    assert render(result).endswith(".") and "\n" not in result.skipped
