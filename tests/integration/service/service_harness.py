"""Helpers for the service tests: a live server on loopback, webhook posting, SQL peeks, and a real
procrastinate worker drained on demand with a recording review function behind the worker's seam."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
from fakes.gitlab_server import BOT_USER_ID
from fakes.live_server import LiveServer as LiveServer  # re-exported: the tests import it from here
from pydantic import SecretStr

from agent.service_settings import Settings
from api.db import make_pool
from api.worker import AnswerFunction, QueueConfig, ReviewFunction, WorkerRuntime, create_queue_app, run_worker

SECRET = "hook-secret-for-tests"  # noqa: S105 - loopback test credential
API_TOKEN = "api-token-for-tests"  # noqa: S105
METRICS_TOKEN = "metrics-token-for-tests"  # noqa: S105
METRICS = {"Authorization": f"Bearer {METRICS_TOKEN}"}  # the headers Prometheus scrapes /metrics with
PID, IID = 42, 7
PATH = "team/service"
BASE = {"app.py": "def f():\n    return 1\n"}
HEAD = {"app.py": "def f():\n    return 2\n", "util.py": "X = 1\n"}
# retries are quick in tests: 1 s, 2 s, ...
FAST_QUEUE = QueueConfig(backoff_base_s=1, max_attempts=3, stalled_worker_timeout_s=5, heartbeat_interval_s=1)


def make_settings(dsn: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": dsn,
        "webhook_secret": SecretStr(SECRET),
        "api_tokens": f"ci:{API_TOKEN}",
        "metrics_token": SecretStr(METRICS_TOKEN),
        "metrics_cache_s": 0,  # the tests read counts right after they change them
        "gitlab_bot_user_id": BOT_USER_ID,
        "db_pool_size": 12,
    }
    values.update(overrides)
    return Settings(**values)


def post_hook(url: str, body: dict[str, Any] | bytes, headers: dict[str, str]) -> httpx.Response:
    content = body if isinstance(body, bytes) else httpx.Request("POST", url, json=body).content
    return httpx.post(f"{url}/webhooks/gitlab", content=content, headers=headers, timeout=30)


def rows(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def scalar(dsn: str, sql: str, *params: Any) -> Any:
    return rows(dsn, sql, *params)[0][0]


@dataclass
class RecordingReview:
    """The worker's review seam backed by a real function: writes a `reviews` row like the pipeline,
    or raises the errors it is told to, in order."""

    dsn: str
    failures: list[BaseException] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    delay_s: float = 0.0

    def __call__(self, *, project: str, mr_iid: int, head_sha: str | None, event_id: int | None) -> int:
        self.calls.append({"project": project, "mr_iid": mr_iid, "head_sha": head_sha, "event_id": event_id})
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.failures:
            raise self.failures.pop(0)
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                "INSERT INTO reviews (source, project, mr_iid, head_sha, status, started_at, finished_at)"
                " VALUES ('gitlab', %s, %s, %s, 'done', now() - interval '3 seconds', now()) RETURNING id",
                (project, mr_iid, head_sha),
            ).fetchone()
        assert row is not None
        return int(row[0])


def drain_queue(
    dsn: str, review: ReviewFunction, *, config: QueueConfig = FAST_QUEUE, answer: AnswerFunction | None = None
) -> None:
    """Run a real worker until no job is ready (procrastinate's `wait=False`)."""

    async def main() -> None:
        pool = make_pool(dsn, max_size=4)
        await pool.open(wait=True)
        runtime_pool = make_pool(dsn, max_size=2)
        await runtime_pool.open(wait=True)
        queue = create_queue_app(config)
        await queue.open_async(pool)
        try:
            runtime = WorkerRuntime(pool=runtime_pool, review=review, config=config, answer=answer)
            await run_worker(queue, runtime, concurrency=2, install_signal_handlers=False, wait=False)
        finally:
            await queue.close_async()
            await runtime_pool.close()
            await pool.close()

    asyncio.run(main())


class BackgroundWorker:
    """A real worker (wait=True) on its own event loop in a thread, stopped like SIGTERM would."""

    def __init__(self, dsn: str, review: ReviewFunction, *, config: QueueConfig = FAST_QUEUE, concurrency: int = 2):
        self.dsn, self.review, self.config, self.concurrency = dsn, review, config, concurrency
        self.loop = asyncio.new_event_loop()
        self.task: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as exc:  # surfaced by __exit__
            self.error = exc
        finally:
            self.loop.close()

    async def _main(self) -> None:
        pool = make_pool(self.dsn, max_size=4)
        await pool.open(wait=True)
        runtime_pool = make_pool(self.dsn, max_size=2)
        await runtime_pool.open(wait=True)
        queue = create_queue_app(self.config)
        await queue.open_async(pool)
        runtime = WorkerRuntime(pool=runtime_pool, review=self.review, config=self.config)
        self.task = asyncio.current_task()
        try:
            await run_worker(queue, runtime, concurrency=self.concurrency, install_signal_handlers=False)
        except asyncio.CancelledError:
            pass
        finally:
            await queue.close_async()
            await runtime_pool.close()
            await pool.close()

    def __enter__(self) -> BackgroundWorker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        deadline = time.monotonic() + 10
        while self.task is None and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.task is not None:
            self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(timeout=30)
        if self.error is not None:
            raise self.error


def wait_for(predicate: Any, *, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
