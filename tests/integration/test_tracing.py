"""Tracing into a real Postgres: nested spans become linked rows with their GenAI attributes, the
exporter survives the database going away, and OTLP goes out over real HTTP."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from agent.store.db import open_pool
from agent.tracing import (
    APPLICATION_NAME,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_SYSTEM,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    REVIEW_ID_ATTRIBUTE,
    PostgresSpanExporter,
    genai_attributes,
    get_tracer,
    otlp_traces_url,
    postgres_exporter,
    setup_tracing,
    shutdown_tracing,
    span_row,
)
from reviewers.kernel.errors import ConfigError


def span_rows(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM spans ORDER BY start_time, span_id").fetchall()


class _Collector(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def finished_spans(count: int, **attributes: Any) -> list[ReadableSpan]:
    collector = _Collector()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(collector))
    tracer = provider.get_tracer("test")
    for i in range(count):
        with tracer.start_as_current_span(f"span-{i}", attributes=attributes):
            pass
    provider.shutdown()
    return collector.spans


# --- pure parts ------------------------------------------------------------------------------------


def test_genai_attributes_use_the_semantic_convention_names() -> None:
    attrs = genai_attributes(operation="chat", provider="openai", model="m1", input_tokens=10, output_tokens=3)
    assert attrs == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "m1",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
    }
    assert GEN_AI_USAGE_INPUT_TOKENS not in genai_attributes(operation="chat", provider="vllm", model="m")


def test_span_row_keeps_exact_microseconds_and_hex_ids() -> None:
    span = ReadableSpan(name="x", start_time=1_763_766_000_123_456_789, end_time=1_763_766_001_000_000_999)
    assert span_row(span) is None  # no context: nothing to key it by
    (real,) = finished_spans(1, **{REVIEW_ID_ATTRIBUTE: "42"})
    row = span_row(real)
    assert row is not None
    trace_id, span_id, parent, *_, review_id = row
    assert len(trace_id) == 32 and len(span_id) == 16 and parent is None
    assert int(trace_id, 16) == real.context.trace_id
    assert review_id == 42
    timed = ReadableSpan(
        name="t",
        context=real.context,
        start_time=1_763_766_000_123_456_789,
        end_time=1_763_766_001_000_000_999,
    )
    timed_row = span_row(timed)
    assert timed_row is not None
    assert timed_row[5] == datetime(2025, 11, 21, 23, 0, 0, 123456, tzinfo=UTC)
    assert timed_row[6] == datetime(2025, 11, 21, 23, 0, 1, 0, tzinfo=UTC)


def test_otlp_url_and_exporter_arguments() -> None:
    assert otlp_traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert otlp_traces_url("http://collector:4318/v1/traces/") == "http://collector:4318/v1/traces"
    with pytest.raises(ConfigError):
        PostgresSpanExporter()
    with pytest.raises(ConfigError):
        setup_tracing(pool=object(), dsn="postgresql://x", install_global=False)  # type: ignore[arg-type]


# --- into Postgres ---------------------------------------------------------------------------------


def test_nested_spans_become_linked_rows(db_dsn: str) -> None:
    provider = setup_tracing(dsn=db_dsn, install_global=False)
    try:
        tracer = get_tracer("reviewloop.test")  # the provider set up last
        with tracer.start_as_current_span("review", attributes={REVIEW_ID_ATTRIBUTE: 7}) as root:
            with tracer.start_as_current_span(
                "chat strategy-model",
                kind=SpanKind.CLIENT,
                attributes=genai_attributes(
                    operation="chat", provider="openai", model="strategy-model", input_tokens=812, output_tokens=95
                ),
            ) as chat:
                chat.add_event("gen_ai.choice", {"finish_reason": "stop"})
                with pytest.raises(ValueError):
                    with tracer.start_as_current_span("parse") as parse:
                        parse.set_attribute("note", "nul\x00byte")
                        parse.set_attribute("big", 2**70)  # beyond orjson's 64 bits
                        raise ValueError("bad json")
            root.set_attribute("reviewloop.findings", 2)
        assert provider.force_flush()
    finally:
        shutdown_tracing(provider)

    rows = {row["name"]: row for row in span_rows(db_dsn)}
    assert set(rows) == {"review", "chat strategy-model", "parse"}
    review, chat_row, parse_row = rows["review"], rows["chat strategy-model"], rows["parse"]
    assert review["parent_span_id"] is None
    assert chat_row["parent_span_id"] == review["span_id"]
    assert parse_row["parent_span_id"] == chat_row["span_id"]
    assert {r["trace_id"] for r in rows.values()} == {review["trace_id"]}
    assert review["review_id"] == 7 and chat_row["review_id"] is None
    assert review["attributes"] == {REVIEW_ID_ATTRIBUTE: 7, "reviewloop.findings": 2}
    assert chat_row["kind"] == "CLIENT" and review["kind"] == "INTERNAL"
    attrs = chat_row["attributes"]
    assert attrs[GEN_AI_OPERATION_NAME] == "chat" and attrs[GEN_AI_REQUEST_MODEL] == "strategy-model"
    assert attrs[GEN_AI_PROVIDER_NAME] == attrs[GEN_AI_SYSTEM] == "openai"
    assert (attrs[GEN_AI_USAGE_INPUT_TOKENS], attrs[GEN_AI_USAGE_OUTPUT_TOKENS]) == (812, 95)
    assert [e["name"] for e in chat_row["events"]] == ["gen_ai.choice"]
    assert chat_row["events"][0]["attributes"] == {"finish_reason": "stop"}
    assert parse_row["status_code"] == StatusCode.ERROR.name
    assert parse_row["attributes"]["otel.status_description"] == "ValueError: bad json"
    assert parse_row["attributes"]["note"] == "nulbyte"
    assert parse_row["attributes"]["big"] == 2**70
    assert [e["name"] for e in parse_row["events"]] == ["exception"]
    assert review["start_time"] <= chat_row["start_time"] <= parse_row["start_time"]
    assert parse_row["end_time"] <= chat_row["end_time"] <= review["end_time"]


def test_exporter_through_the_application_pool(db_dsn: str) -> None:
    pool = open_pool(db_dsn, min_size=1, max_size=2)
    try:
        provider = setup_tracing(pool=pool, install_global=False)
        tracer = provider.get_tracer("t")
        for i in range(5):
            with tracer.start_as_current_span(f"step-{i}", attributes={REVIEW_ID_ATTRIBUTE: 3}):
                pass
        provider.force_flush()
        exporter = postgres_exporter(provider)
        assert exporter is not None and exporter.exported_spans == 5 and exporter.dropped_spans == 0
        shutdown_tracing(provider)
        shutdown_tracing(provider)  # twice is harmless
    finally:
        pool.close()
    rows = span_rows(db_dsn)
    assert [r["name"] for r in rows] == [f"step-{i}" for i in range(5)]
    assert {r["review_id"] for r in rows} == {3}


def test_a_batch_sent_twice_is_stored_once(db_dsn: str) -> None:
    spans = finished_spans(3)
    exporter = PostgresSpanExporter(dsn=db_dsn)
    try:
        assert exporter.export(spans[:2]) is SpanExportResult.SUCCESS
        assert exporter.export(spans) is SpanExportResult.SUCCESS  # COPY refused; row by row keeps the new one
    finally:
        exporter.shutdown()
    assert len(span_rows(db_dsn)) == 3
    assert exporter.dropped_spans == 0
    assert exporter.export(spans) is SpanExportResult.FAILURE  # shut down: counted, not raised
    assert exporter.dropped_spans == 3


def _set_connections_allowed(admin_dsn: str, dbname: str, *, allowed: bool) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            )


def _kill_exporter_connection(admin_dsn: str, dbname: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
            (dbname, APPLICATION_NAME),
        ).fetchall()
    return len(rows)


@pytest.fixture
def exporter_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.WARNING, logger="agent.tracing"):
        yield caplog


def test_exporter_survives_the_database_going_away(
    pg_admin_dsn: str, db_dsn: str, exporter_logs: pytest.LogCaptureFixture
) -> None:
    dbname = str(conninfo_to_dict(db_dsn)["dbname"])
    provider = setup_tracing(dsn=db_dsn, install_global=False, retry_after_s=0.0)
    exporter = postgres_exporter(provider)
    assert exporter is not None
    tracer = provider.get_tracer("t")

    def emit(name: str) -> None:
        with tracer.start_as_current_span(name):
            pass
        assert provider.force_flush()  # never raises, whatever the database does

    try:
        emit("before")
        # a killed connection is replaced on the next batch: nothing lost
        assert _kill_exporter_connection(pg_admin_dsn, dbname) == 1
        emit("after-kill")
        assert (exporter.exported_spans, exporter.dropped_spans) == (2, 0)

        _set_connections_allowed(pg_admin_dsn, dbname, allowed=False)
        try:
            emit("lost-1")
            emit("lost-2")
            assert exporter.dropped_spans == 2
        finally:
            _set_connections_allowed(pg_admin_dsn, dbname, allowed=True)
        emit("recovered")
    finally:
        shutdown_tracing(provider)

    assert [r["name"] for r in span_rows(db_dsn)] == ["before", "after-kill", "recovered"]
    assert (exporter.exported_spans, exporter.dropped_spans) == (3, 2)
    messages = [r.getMessage() for r in exporter_logs.records if r.name == "agent.tracing"]
    assert len([m for m in messages if "failed" in m]) == 1  # logged once per outage
    assert any("recovered; 2 spans were dropped" in m for m in messages)


def test_exporter_backs_off_after_a_failure() -> None:
    exporter = PostgresSpanExporter(dsn="postgresql://postgres@127.0.0.1:1/none", retry_after_s=60.0)
    spans = finished_spans(2)
    assert exporter.export(spans) is SpanExportResult.FAILURE
    assert exporter.export(spans) is SpanExportResult.FAILURE  # inside the back-off: not even tried
    assert exporter.dropped_spans == 4


# --- OTLP over real HTTP ---------------------------------------------------------------------------


class _OtlpReceiver(BaseHTTPRequestHandler):
    received: list[tuple[str, str, int]] = []

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, self.headers.get("Content-Type", ""), len(body)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def test_spans_also_go_to_an_otlp_collector(db_dsn: str) -> None:
    server = HTTPServer(("127.0.0.1", 0), _OtlpReceiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _OtlpReceiver.received = []
    try:
        endpoint = f"http://127.0.0.1:{server.server_port}"
        provider = setup_tracing(dsn=db_dsn, otlp_endpoint=endpoint, install_global=False)
        with provider.get_tracer("t").start_as_current_span("both"):
            pass
        provider.force_flush()
        shutdown_tracing(provider)
    finally:
        server.shutdown()
        server.server_close()
    assert [(path, ctype) for path, ctype, _ in _OtlpReceiver.received] == [("/v1/traces", "application/x-protobuf")]
    assert _OtlpReceiver.received[0][2] > 0
    assert [r["name"] for r in span_rows(db_dsn)] == ["both"]
