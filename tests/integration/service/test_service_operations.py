"""Health, readiness, metrics, the queue's schema, and the API's import weight."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable

import httpx
import psycopg
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import FakeGitLab
from service_harness import IID, METRICS, PID, SECRET, LiveServer, RecordingReview, drain_queue, post_hook

from api.worker import ensure_queue_schema


def test_importing_the_api_loads_no_model_library() -> None:
    code = (
        "import sys, api.app, api.worker, api.routes.webhooks\n"
        "heavy = [m for m in ('torch', 'transformers', 'trl', 'peft', 'agent.pipeline') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == ""


def test_healthz_and_readyz(serve: Callable[..., LiveServer], service_dsn: str) -> None:
    api_only = serve()
    assert httpx.get(f"{api_only.url}/healthz", timeout=10).json() == {"status": "ok"}
    ready = httpx.get(f"{api_only.url}/readyz", timeout=10)
    assert ready.status_code == 200 and ready.json()["database"] and ready.json()["queue"]


def test_readyz_waits_for_a_worker_when_one_is_required(service_dsn: str) -> None:
    from service_harness import FAST_QUEUE, make_settings

    from api.app import create_app

    app = create_app(make_settings(service_dsn), require_worker=True, queue_config=FAST_QUEUE)
    with LiveServer(app) as live:
        waiting = httpx.get(f"{live.url}/readyz", timeout=10)
        assert waiting.status_code == 503 and waiting.json()["workers"] == 0
        with psycopg.connect(service_dsn) as conn:  # a worker registers (as procrastinate does at start)
            conn.execute("SELECT procrastinate_register_worker_v1()")
        up = httpx.get(f"{live.url}/readyz", timeout=10)
        assert up.status_code == 200 and up.json()["workers"] == 1
        with psycopg.connect(service_dsn) as conn:  # ... and then stops beating
            conn.execute("UPDATE procrastinate_workers SET last_heartbeat = now() - interval '1 hour'")
        assert httpx.get(f"{live.url}/readyz", timeout=10).status_code == 503


def test_metrics_exposition(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    queued = post_hook(
        service.url, merge_request_hook(fake, PID, IID, action="open"), hook_headers("Merge Request Hook", token=SECRET)
    )
    assert queued.status_code == 202
    assert post_hook(service.url, b"{}", hook_headers("Merge Request Hook", token="bad")).status_code == 401
    before = httpx.get(f"{service.url}/metrics", headers=METRICS, timeout=10)
    assert before.status_code == 200 and before.headers["content-type"].startswith("text/plain")
    text = before.text
    assert 'reviewloop_webhook_outcomes_total{status="queued"}' in text
    assert 'reviewloop_webhook_outcomes_total{status="unauthorized"}' in text
    assert 'reviewloop_queue_jobs{status="todo"} 1.0' in text
    assert "reviewloop_database_up 1.0" in text

    drain_queue(service_dsn, RecordingReview(service_dsn))
    with psycopg.connect(service_dsn) as conn:
        conn.execute("UPDATE reviews SET cost_tokens = 1234")
        review_id = conn.execute("SELECT id FROM reviews").fetchone()
        assert review_id is not None
        conn.execute(
            "INSERT INTO findings (review_id, fingerprint, path, line, end_line, category, severity, title, body,"
            " reviewer, verdict, verdict_reason) VALUES (%s, 'fp', 'a.py', 1, 1, 'security', 'low', 't', 'b',"
            " 'security', 'NEEDS_HUMAN_REVIEW', 'low acceptance')",
            (review_id[0],),
        )
    after = httpx.get(f"{service.url}/metrics", headers=METRICS, timeout=10).text
    assert 'reviewloop_queue_jobs{status="todo"} 0.0' in after
    assert 'reviewloop_queue_jobs{status="succeeded"}' in after
    assert "reviewloop_llm_tokens_total 1234.0" in after
    assert 'reviewloop_findings_total{verdict="NEEDS_HUMAN_REVIEW"} 1.0' in after
    # the review took 3 s (RecordingReview's timestamps): in the 5 s bucket, not in the 2.5 s one
    assert 'reviewloop_review_seconds_bucket{le="2.5"} 0.0' in after
    assert 'reviewloop_review_seconds_bucket{le="5.0"} 1.0' in after
    assert "reviewloop_review_seconds_count 1.0" in after


def test_queue_schema_is_created_once_even_when_raced(db_dsn: str) -> None:
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(ensure_queue_schema(db_dsn))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, True]
    assert ensure_queue_schema(db_dsn) is False
