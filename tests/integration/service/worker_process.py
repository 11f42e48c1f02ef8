"""A worker in its own process, for the SIGKILL and SIGTERM tests: `python worker_process.py DSN SECONDS`.

Its review function writes a `reviews` row after sleeping SECONDS, and appends "start <job args>"
and "end" lines to the file named by REVIEW_LOG so the test sees where the process was killed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import psycopg

from api.db import make_pool
from api.worker import QueueConfig, WorkerRuntime, create_queue_app, run_worker

CONFIG = QueueConfig(
    backoff_base_s=1, max_attempts=3, stalled_worker_timeout_s=3, heartbeat_interval_s=0.5, recovery_cron="* * * * * *"
)


def main(dsn: str, seconds: float) -> None:
    log_path = os.environ["REVIEW_LOG"]

    def review(*, project: str, mr_iid: int, head_sha: str | None, event_id: int | None) -> int:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"start {os.getpid()} {project} {mr_iid} {head_sha}\n")
        time.sleep(seconds)
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "INSERT INTO reviews (source, project, mr_iid, head_sha, status, started_at, finished_at)"
                " VALUES ('gitlab', %s, %s, %s, 'done', now(), now()) RETURNING id",
                (project, mr_iid, head_sha),
            ).fetchone()
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"end {os.getpid()}\n")
        assert row is not None
        return int(row[0])

    async def run() -> None:
        pool = make_pool(dsn, max_size=4)
        await pool.open(wait=True)
        runtime_pool = make_pool(dsn, max_size=2)
        await runtime_pool.open(wait=True)
        queue = create_queue_app(CONFIG)
        await queue.open_async(pool)
        try:
            runtime = WorkerRuntime(pool=runtime_pool, review=review, config=CONFIG)
            await run_worker(queue, runtime, concurrency=1, install_signal_handlers=True)
        finally:
            await queue.close_async()
            await runtime_pool.close()
            await pool.close()

    asyncio.run(run())


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
