"""OpenTelemetry tracing, stored in our own Postgres and optionally sent to an OTLP collector.

Spans are the raw material of learning: a review's spans hold its strategy, each reviewer step and
every model call with its token counts, keyed by `reviewloop.review_id`. So they go to the `spans`
table through `PostgresSpanExporter`, a batching exporter (COPY, one transaction per batch) behind
the SDK's `BatchSpanProcessor`. Tracing must never break a review: when Postgres is away the
exporter logs once, drops batches and counts them, and picks up again when the server is back.

OTel's API is global by design; `setup_tracing` returns its provider so callers and tests can pass
it around, and `get_tracer` uses the provider set up last (call it where a span starts, not at
import time, so a test's provider is the one used).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.util.types import AttributeValue

from agent.store.db import CONNECT_TIMEOUT_S, Pool
from reviewers.kernel.errors import ConfigError

logger = logging.getLogger(__name__)

# GenAI semantic conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/). `gen_ai.system`
# is the older name of `gen_ai.provider.name`; both are set so older dashboards keep working.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
# Our own: the review a span belongs to, copied into `spans.review_id` for joins.
REVIEW_ID_ATTRIBUTE = "reviewloop.review_id"
STATUS_DESCRIPTION_ATTRIBUTE = "otel.status_description"

# The SDK's default batch (512) is small for COPY; 2048 spans per transaction amortises the round trip.
MAX_EXPORT_BATCH_SIZE = 2048
MAX_QUEUE_SIZE = 65536  # ~a minute of a busy worker's spans while Postgres restarts
SCHEDULE_DELAY_MS = 1000
# After a failed batch, drop without trying for this long: a dead host should not stall the
# export thread on a connect timeout for every batch.
RETRY_AFTER_S = 5.0
APPLICATION_NAME = "reviewloop-tracing"  # names the exporter's own connection in pg_stat_activity

_SPAN_COLUMNS = (
    "trace_id, span_id, parent_span_id, name, kind, start_time, end_time, status_code, attributes, events, review_id"
)
_COPY_SQL = f"COPY spans ({_SPAN_COLUMNS}) FROM STDIN"
_INSERT_SQL = (
    f"INSERT INTO spans ({_SPAN_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (trace_id, span_id) DO NOTHING"
)
# Spans are telemetry: losing the last moment of them in a server crash is acceptable, and not
# waiting for the WAL flush on each batch's commit lets the export thread keep up.
_NO_SYNC_COMMIT = "SET LOCAL synchronous_commit = off"

SpanRow = tuple[str, str, str | None, str, str, datetime, datetime, str, str, str, int | None]


def genai_attributes(
    *,
    operation: str,
    provider: str,
    model: str,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
) -> dict[str, AttributeValue]:
    """The GenAI attributes of one model call (`operation` is e.g. "chat" or "text_completion")."""
    attrs: dict[str, AttributeValue] = {
        GEN_AI_OPERATION_NAME: operation,
        GEN_AI_PROVIDER_NAME: provider,
        GEN_AI_SYSTEM: provider,
        GEN_AI_REQUEST_MODEL: model,
    }
    if input_tokens is not None:
        attrs[GEN_AI_USAGE_INPUT_TOKENS] = input_tokens
    if output_tokens is not None:
        attrs[GEN_AI_USAGE_OUTPUT_TOKENS] = output_tokens
    return attrs


# --- span → row ------------------------------------------------------------------------------------


def _timestamp(ns: int) -> datetime:
    # Whole microseconds first: as a float of seconds they are exact to well under half a
    # microsecond until 2106, so the rounding in fromtimestamp lands on the right one.
    return datetime.fromtimestamp(ns // 1000 / 1e6, UTC)


def _strip_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, Mapping):
        return {_strip_nul(str(k)): _strip_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strip_nul(v) for v in value]
    return value


# The stdlib encoder is the fallback for what orjson refuses (integers beyond 64 bits).
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)


def _encode(value: Any) -> str:
    try:
        # orjson: an order of magnitude faster than json, and JSON encoding is most of an export
        return orjson.dumps(value, default=str).decode()
    except orjson.JSONEncodeError:
        return _JSON.encode(value)


def _to_json(value: Any) -> str:
    text = _encode(value)
    # jsonb refuses \u0000 (model output can contain it); such values are rare, so pay only then
    if "\\u0000" in text:
        text = _encode(_strip_nul(value))
    return text


def _as_dict(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """A plain dict of span or event attributes.

    The SDK hands out a read-only view of `BoundedAttributes`, whose `copy()` is a dict copy; `dict()`
    over it would take the attributes' lock once per key, the largest cost of a row before this.
    """
    if not attributes:
        return {}
    copy = getattr(attributes, "copy", None)
    if copy is not None:
        copied = copy()
        if isinstance(copied, dict):
            return copied
    return dict(attributes)


def _review_id(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def span_row(span: ReadableSpan) -> SpanRow | None:
    """The `spans` row of a finished span; None for a span without a context (nothing to key it by)."""
    ctx = span.context
    if ctx is None:
        return None
    attributes = _as_dict(span.attributes)
    status = span.status
    if status.description:
        attributes[STATUS_DESCRIPTION_ATTRIBUTE] = status.description
    events = span.events
    events_json = (
        _to_json(
            [
                {
                    "name": event.name,
                    "time_unix_nano": event.timestamp,
                    "attributes": _as_dict(event.attributes),
                }
                for event in events
            ]
        )
        if events
        else "[]"
    )
    start_ns = span.start_time or 0
    return (
        format(ctx.trace_id, "032x"),
        format(ctx.span_id, "016x"),
        format(span.parent.span_id, "016x") if span.parent is not None else None,
        span.name.replace("\x00", ""),
        span.kind.name,
        _timestamp(start_ns),
        _timestamp(span.end_time or start_ns),
        status.status_code.name,
        _to_json(attributes),
        events_json,
        _review_id(attributes.get(REVIEW_ID_ATTRIBUTE)),
    )


# --- the exporter ----------------------------------------------------------------------------------


class PostgresSpanExporter(SpanExporter):
    """Writes span batches into `spans`, through a pool or through its own connection to `dsn`.

    `export` never raises: a failed batch is logged (once per outage) and counted in
    `dropped_spans`; `exported_spans` counts what was stored.
    """

    def __init__(
        self,
        *,
        pool: Pool | None = None,
        dsn: str | None = None,
        acquire_timeout_s: float = float(CONNECT_TIMEOUT_S),
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        if (pool is None) == (dsn is None):
            raise ConfigError("PostgresSpanExporter needs exactly one of pool or dsn")
        self._pool = pool
        self._dsn = dsn
        self._acquire_timeout_s = acquire_timeout_s
        self._retry_after_s = retry_after_s
        self._conn: psycopg.Connection[Any] | None = None
        # export() is called by the processor's worker thread and by force_flush on the caller's
        self._lock = threading.Lock()
        self._retry_at = 0.0
        self._failing = False
        self._dropped_in_outage = 0
        self._closed = False
        self.exported_spans = 0
        self.dropped_spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            if self._closed:
                self.dropped_spans += len(spans)
                return SpanExportResult.FAILURE
            if time.monotonic() < self._retry_at:
                self._drop(len(spans))
                return SpanExportResult.FAILURE
            try:
                rows = [row for row in map(span_row, spans) if row is not None]
                refused = self._write(rows) if rows else 0
            except Exception as exc:  # tracing must never take the application down with it
                self._fail(exc, len(spans))
                return SpanExportResult.FAILURE
            lost = len(spans) - len(rows) + refused
            self.exported_spans += len(spans) - lost
            self.dropped_spans += lost
            if self._failing:
                logger.warning("span export to Postgres recovered; %d spans were dropped", self._dropped_in_outage)
                self._failing = False
                self._dropped_in_outage = 0
            return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # export() writes synchronously; nothing is buffered here

    def _drop(self, count: int) -> None:
        self.dropped_spans += count
        self._dropped_in_outage += count

    def _fail(self, exc: Exception, count: int) -> None:
        self._drop(count)
        self._retry_at = time.monotonic() + self._retry_after_s
        if not self._failing:
            self._failing = True
            logger.warning("span export to Postgres failed, dropping spans until it recovers: %s", exc)
        else:
            logger.debug("span export still failing: %s", exc)

    def _write(self, rows: list[SpanRow]) -> int:
        if self._pool is not None:
            with self._pool.connection(timeout=self._acquire_timeout_s) as conn:
                return _write_batch(conn, rows)
        own = self._conn
        if own is not None and not own.closed:
            try:
                return _write_batch(own, rows)
            except psycopg.OperationalError:
                # the server restarted or killed this connection since the last batch: one fresh try
                own.close()
        self._conn = None
        if self._dsn is None:  # cannot happen: the constructor wants a pool or a dsn
            raise ConfigError("PostgresSpanExporter has neither a pool nor a dsn")
        self._conn = psycopg.connect(
            self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name=APPLICATION_NAME
        )
        return _write_batch(self._conn, rows)


def _write_batch(conn: psycopg.Connection[Any], rows: list[SpanRow]) -> int:
    """COPY the batch in one transaction; if the batch is refused, insert row by row.

    Returns how many rows Postgres refused (lost). A span already stored (a retried batch) is not lost.
    """
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(_NO_SYNC_COMMIT)
            with cur.copy(_COPY_SQL) as copy:
                for row in rows:
                    copy.write_row(row)
        return 0
    except psycopg.OperationalError:
        raise
    except (psycopg.Error, UnicodeError) as exc:
        # A span exported twice or one bad value: keep the rest of the batch.
        logger.debug("span batch refused (%s); inserting row by row", exc)
    refused = 0
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(_NO_SYNC_COMMIT)
        for row in rows:
            try:
                with conn.transaction():
                    cur.execute(_INSERT_SQL, row)
            except psycopg.OperationalError:
                raise
            except (psycopg.Error, UnicodeError) as exc:
                refused += 1
                logger.warning("dropping span %s/%s that Postgres refused: %s", row[0], row[1], exc)
    return refused


# --- setting up ------------------------------------------------------------------------------------

_active_provider: TracerProvider | None = None


class _RoutingSpanProcessor(SpanProcessor):
    """The global provider's one processor: it forwards to the processors of the provider set up
    last. OTel lets a process install its global provider only once, but the library's tracers
    (`trace.get_tracer` in the graph, the LLM port, the reviewers) must follow each `setup_tracing`
    — a second database in tests, a re-configured worker."""

    def __init__(self) -> None:
        self.targets: tuple[SpanProcessor, ...] = ()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for target in self.targets:
            target.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for target in self.targets:
            target.on_end(span)

    def shutdown(self) -> None:
        self.targets = ()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(target.force_flush(timeout_millis) for target in self.targets)


_router = _RoutingSpanProcessor()
_global_provider: TracerProvider | None = None
_exporters: weakref.WeakKeyDictionary[TracerProvider, PostgresSpanExporter] = weakref.WeakKeyDictionary()


def otlp_traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for a collector's base URL (or the full URL, left as it is)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


def setup_tracing(
    *,
    pool: Pool | None = None,
    dsn: str | None = None,
    service_name: str = "reviewloop",
    otlp_endpoint: str | None = None,
    install_global: bool = True,
    schedule_delay_millis: int = SCHEDULE_DELAY_MS,
    retry_after_s: float = RETRY_AFTER_S,
) -> TracerProvider:
    """A provider exporting to Postgres (through `pool` or its own connection to `dsn`) and to OTLP.

    With neither a database nor an endpoint, spans are made but not kept. `install_global` makes it
    OTel's global provider too, which OTel allows once per process; `get_tracer` uses it either way.
    """
    global _active_provider, _global_provider
    if pool is not None and dsn is not None:
        raise ConfigError("setup_tracing takes a pool or a dsn, not both")
    resource = Resource.create({SERVICE_NAME: service_name})
    provider = TracerProvider(resource=resource)
    processors: list[SpanProcessor] = []
    if pool is not None or dsn is not None:
        exporter = PostgresSpanExporter(pool=pool, dsn=dsn, retry_after_s=retry_after_s)
        processors.append(
            BatchSpanProcessor(
                exporter,
                max_queue_size=MAX_QUEUE_SIZE,
                schedule_delay_millis=schedule_delay_millis,
                max_export_batch_size=MAX_EXPORT_BATCH_SIZE,
            )
        )
        _exporters[provider] = exporter
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processors.append(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_traces_url(otlp_endpoint))))
    for processor in processors:
        provider.add_span_processor(processor)
    _active_provider = provider
    if install_global:
        if _global_provider is None and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            _global_provider = TracerProvider(resource=resource)
            _global_provider.add_span_processor(_router)
            trace.set_tracer_provider(_global_provider)
        _router.targets = tuple(processors)
    return provider


def postgres_exporter(provider: TracerProvider) -> PostgresSpanExporter | None:
    """The Postgres exporter `setup_tracing` gave this provider (for its counters), if any."""
    return _exporters.get(provider)


def get_tracer(name: str = "reviewloop") -> trace.Tracer:
    """A tracer from the provider set up last, else from OTel's global one."""
    provider = _active_provider
    if provider is not None:
        return provider.get_tracer(name)
    return trace.get_tracer(name)


def shutdown_tracing(provider: TracerProvider | None = None) -> None:
    """Flush and stop `provider` (default: the one set up last). Safe to call twice."""
    global _active_provider
    target = provider or _active_provider
    if target is None:
        return
    target.force_flush()
    if target is _active_provider:
        _router.targets = ()
        _active_provider = None
    target.shutdown()
