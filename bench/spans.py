"""How fast spans reach Postgres.

Two figures: `ingest` times the exporter alone on spans made beforehand (what the export thread can
sustain), `end_to_end` times making the spans with the SDK and flushing them through the batch
processor (what an application pays in total). The spans look like a review's: one root per
trace with nested model-call spans carrying GenAI attributes and an event.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from agent.store.migrate import upgrade
from agent.tracing import (
    MAX_EXPORT_BATCH_SIZE,
    REVIEW_ID_ATTRIBUTE,
    PostgresSpanExporter,
    genai_attributes,
    setup_tracing,
    shutdown_tracing,
)

SPANS_PER_TRACE = 10  # a root (the review) and nine model calls under it
DEFAULT_SPANS = 50_000


class _Collector(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _emit_review_traces(provider: TracerProvider, n: int, run_tag: str) -> None:
    tracer = provider.get_tracer("bench.spans")
    made = 0
    review_id = 0
    while made < n:
        review_id += 1
        with tracer.start_as_current_span("review", attributes={REVIEW_ID_ATTRIBUTE: review_id, "bench.run": run_tag}):
            made += 1
            for step in range(min(SPANS_PER_TRACE - 1, n - made)):
                attrs = genai_attributes(
                    operation="chat", provider="openai", model="strategy-1", input_tokens=812, output_tokens=95
                )
                attrs[REVIEW_ID_ATTRIBUTE] = review_id
                attrs["reviewloop.step"] = step
                with tracer.start_as_current_span("chat strategy-1", attributes=attrs) as span:
                    span.add_event("gen_ai.choice", {"finish_reason": "stop"})
                made += 1


def _make_spans(n: int, run_tag: str) -> list[ReadableSpan]:
    collector = _Collector()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(collector))
    _emit_review_traces(provider, n, run_tag)
    provider.shutdown()
    return collector.spans


def _delete_run(dsn: str, run_tag: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(
            "DELETE FROM spans WHERE trace_id IN (SELECT trace_id FROM spans WHERE attributes->>'bench.run' = %s)",
            (run_tag,),
        )
        return cur.rowcount


def _ingest(dsn: str, n: int) -> tuple[float, float]:
    """(spans per second, client CPU microseconds per span) of the exporter alone."""
    run_tag = uuid.uuid4().hex
    spans = _make_spans(n, run_tag)
    exporter = PostgresSpanExporter(dsn=dsn)
    try:
        exporter.export(spans[:1])  # connect outside the timed part
        started, cpu_started = time.perf_counter(), time.process_time()
        for i in range(1, len(spans), MAX_EXPORT_BATCH_SIZE):
            exporter.export(spans[i : i + MAX_EXPORT_BATCH_SIZE])
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        exporter.shutdown()
    stored = _delete_run(dsn, run_tag)
    if stored != len(spans) or exporter.dropped_spans:
        raise RuntimeError(f"bench stored {stored} of {len(spans)} spans ({exporter.dropped_spans} dropped)")
    return (len(spans) - 1) / elapsed, cpu / (len(spans) - 1) * 1e6


def bench_span_ingest(dsn: str, n: int) -> float:
    """Spans per second the Postgres exporter stores, in batches the size the processor sends."""
    return _ingest(dsn, n)[0]


def bench_span_end_to_end(dsn: str, n: int) -> float:
    """Spans per second from `start_as_current_span` to rows in Postgres, through `setup_tracing`."""
    run_tag = uuid.uuid4().hex
    provider = setup_tracing(dsn=dsn, install_global=False)
    started = time.perf_counter()
    _emit_review_traces(provider, n, run_tag)
    provider.force_flush()
    elapsed = time.perf_counter() - started
    shutdown_tracing(provider)
    stored = _delete_run(dsn, run_tag)
    if stored != n:
        raise RuntimeError(f"bench stored {stored} of {n} spans")
    return n / elapsed


def run(dsn: str, n: int = DEFAULT_SPANS) -> dict[str, Any]:
    """The span figures for `make bench`. CPU time per span is the exporter process's own share,
    the figure that holds when other work shares the machine's cores and the wall-clock rate does not."""
    upgrade(dsn)
    rate, cpu_us = _ingest(dsn, n)
    return {
        "spans": n,
        "span_ingest_spans_per_s": round(rate),
        "span_ingest_client_cpu_us_per_span": round(cpu_us, 1),
        "span_end_to_end_spans_per_s": round(bench_span_end_to_end(dsn, n)),
    }


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_SPANS)))
