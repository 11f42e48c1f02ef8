"""Prometheus metrics.

Two kinds. Webhook outcomes are counted in the process that answered them (each API replica is
scraped on its own). Everything the workers produce (queue depth, review latency, LLM tokens,
findings by verdict) is read from Postgres at scrape time, so it is right however many worker
processes on however many hosts did the work, and survives their restarts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from api.db import DbConnection

REGISTRY = CollectorRegistry(auto_describe=True)

WEBHOOK_OUTCOMES = Counter(
    "reviewloop_webhook_outcomes",
    "Webhook deliveries by outcome (queued, duplicate, ignored, processed, unauthorized, too_large, invalid, "
    "busy, timeout, disconnected, unavailable)",
    ["status"],
    registry=REGISTRY,
)
WEBHOOK_BODY_READS = Gauge(
    "reviewloop_webhook_body_reads",
    "Webhook bodies being read now (authenticated senders whose body is not in yet)",
    registry=REGISTRY,
)
WEBHOOK_SECONDS = Histogram(
    "reviewloop_webhook_seconds",
    "Time from request to answer on POST /webhooks/gitlab",
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=REGISTRY,
)
WEBHOOK_INTAKE_BATCH = Histogram(
    "reviewloop_webhook_intake_batch_deliveries",
    "Reviewable webhook deliveries written per statement and commit (group commit, api/intake_batch.py)",
    buckets=(1, 2, 4, 8, 16, 32, 48),
    registry=REGISTRY,
)

# Review wall time in seconds: reviews range from seconds (no model) to many minutes (large MRs).
REVIEW_LATENCY_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
QUEUE_STATUSES = ("todo", "doing", "succeeded", "failed", "cancelled", "aborting", "aborted")


@dataclass
class DatabaseSnapshot:
    """The worker-side numbers, as read from Postgres for one scrape."""

    database_up: bool = True
    queue_jobs: dict[str, int] = field(default_factory=dict)
    reviews_by_status: dict[str, int] = field(default_factory=dict)
    findings_by_verdict: dict[str, int] = field(default_factory=dict)
    llm_tokens: int = 0
    latency_bucket_counts: list[int] = field(default_factory=list)  # cumulative, per REVIEW_LATENCY_BUCKETS
    latency_count: int = 0
    latency_sum: float = 0.0


async def read_snapshot(conn: DbConnection) -> DatabaseSnapshot:
    snap = DatabaseSnapshot()
    cur = await conn.execute("SELECT status::text AS status, count(*) AS n FROM procrastinate_jobs GROUP BY 1")
    snap.queue_jobs = {r["status"]: int(r["n"]) for r in await cur.fetchall()}
    cur = await conn.execute("SELECT status, count(*) AS n FROM reviews GROUP BY 1")
    snap.reviews_by_status = {r["status"]: int(r["n"]) for r in await cur.fetchall()}
    cur = await conn.execute("SELECT verdict, count(*) AS n FROM findings GROUP BY 1")
    snap.findings_by_verdict = {r["verdict"]: int(r["n"]) for r in await cur.fetchall()}
    cur = await conn.execute("SELECT coalesce(sum(cost_tokens), 0) AS n FROM reviews")
    row = await cur.fetchone()
    snap.llm_tokens = int(row["n"]) if row else 0
    cur = await conn.execute(
        """
        WITH d AS (SELECT extract(epoch FROM finished_at - started_at)::float8 AS s FROM reviews
                    WHERE status = 'done' AND started_at IS NOT NULL AND finished_at IS NOT NULL)
        SELECT (SELECT count(*) FROM d) AS n, (SELECT coalesce(sum(s), 0) FROM d) AS total,
               array(SELECT (SELECT count(*) FROM d WHERE d.s <= u.b)
                       FROM unnest(%s::float8[]) WITH ORDINALITY AS u(b, i) ORDER BY u.i) AS buckets
        """,
        (list(REVIEW_LATENCY_BUCKETS),),
    )
    row = await cur.fetchone()
    if row:
        snap.latency_count = int(row["n"])
        snap.latency_sum = float(row["total"])
        snap.latency_bucket_counts = [int(x) for x in row["buckets"]]
    return snap


class SnapshotCollector(Collector):
    def __init__(self, snap: DatabaseSnapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterable[Metric]:
        return list(self._families())

    def _families(self) -> Iterator[Metric]:
        snap = self.snap
        yield GaugeMetricFamily(
            "reviewloop_database_up", "1 when Postgres answered this scrape", value=snap.database_up
        )
        if not snap.database_up:
            return
        depth = GaugeMetricFamily("reviewloop_queue_jobs", "Jobs in the queue by status", labels=["status"])
        for status in QUEUE_STATUSES:
            depth.add_metric([status], snap.queue_jobs.get(status, 0))
        yield depth
        reviews = GaugeMetricFamily("reviewloop_reviews", "Reviews by status", labels=["status"])
        for status, n in sorted(snap.reviews_by_status.items()):
            reviews.add_metric([status], n)
        yield reviews
        findings = CounterMetricFamily("reviewloop_findings", "Findings by verdict", labels=["verdict"])
        for verdict in ("REAL", "FALSE_POSITIVE", "DUPLICATE", "NEEDS_HUMAN_REVIEW"):
            findings.add_metric([verdict], snap.findings_by_verdict.get(verdict, 0))
        yield findings
        yield CounterMetricFamily("reviewloop_llm_tokens", "LLM tokens spent by reviews", value=snap.llm_tokens)
        counts = snap.latency_bucket_counts or [0] * len(REVIEW_LATENCY_BUCKETS)
        buckets = [(repr(b), float(c)) for b, c in zip(REVIEW_LATENCY_BUCKETS, counts, strict=True)]
        buckets.append(("+Inf", float(snap.latency_count)))
        yield HistogramMetricFamily(
            "reviewloop_review_seconds", "Review wall time", buckets=buckets, sum_value=snap.latency_sum
        )


def exposition(snap: DatabaseSnapshot) -> bytes:
    """The process's own metrics followed by the database snapshot, in the text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snap))
    return generate_latest(REGISTRY) + generate_latest(registry)
