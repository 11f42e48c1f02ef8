"""KEDA's worker-scaling query, run on a real Postgres with the real job-queue schema.

KEDA sets workers = ceil(query / targetQueryValue); the query must count the reviews waiting or
running on the review queue, and nothing else (other queues, finished jobs).
"""

from __future__ import annotations

import math

import psycopg
import yaml
from deploy_files import K8S

from api.worker import MAINTENANCE_QUEUE, QUEUE_TABLE, REVIEW_QUEUE, ensure_queue_schema


def _trigger() -> dict[str, str]:
    docs = list(yaml.safe_load_all((K8S / "worker-scaling.yaml").read_text(encoding="utf-8")))
    scaled = next(d for d in docs if d["kind"] == "ScaledObject")
    return dict(scaled["spec"]["triggers"][0]["metadata"])


def _add_jobs(conn: psycopg.Connection[tuple[object, ...]], queue: str, status: str, count: int) -> None:
    for _ in range(count):
        conn.execute(
            f"INSERT INTO {QUEUE_TABLE} (queue_name, task_name, args, status) VALUES (%s, %s, '{{}}', %s)",
            (queue, "review_merge_request", status),
        )


def test_scaling_query_counts_waiting_and_running_reviews_only(db_dsn: str) -> None:
    ensure_queue_schema(db_dsn)
    trigger = _trigger()
    query, target = trigger["query"], float(trigger["targetQueryValue"])
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        empty = conn.execute(query).fetchone()
        assert empty is not None and empty[0] == 0
        assert empty[0] <= float(trigger["activationTargetQueryValue"]), "an empty queue does not activate scaling"
        _add_jobs(conn, REVIEW_QUEUE, "todo", 3)
        _add_jobs(conn, REVIEW_QUEUE, "doing", 2)
        _add_jobs(conn, REVIEW_QUEUE, "succeeded", 4)
        _add_jobs(conn, REVIEW_QUEUE, "failed", 1)
        _add_jobs(conn, MAINTENANCE_QUEUE, "todo", 5)
        row = conn.execute(query).fetchone()
    assert row is not None
    assert isinstance(row[0], int), "KEDA needs a number"
    assert row[0] == 5, "3 waiting + 2 running reviews; finished jobs and other queues do not count"
    assert math.ceil(row[0] / target) == 3, "5 reviews at 2 per worker → 3 workers"
