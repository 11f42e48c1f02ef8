"""The job queue: procrastinate on the same Postgres as everything else.

    webhook ──(one transaction: webhook_events row + procrastinate job)──▶ procrastinate_jobs
    worker  ──fetch (lock "mr:<project>:<iid>")──▶ review_merge_request ──to_thread──▶ agent.gitlab.review

- One pending review per merge request: the job's `queueing_lock`; intake cancels an older pending
  job of the same MR before deferring the newer push (see api/intake.py).
- One running review per merge request: the job's `lock`.
- Retries with exponential backoff only for errors whose `retryable` flag is set (reviewers/kernel/errors.py).
- Stalled jobs (a worker died mid-review, e.g. SIGKILL): every worker prunes workers whose heartbeat
  is older than `stalled_worker_timeout_s`; their jobs lose their worker and are retried by the
  periodic `recover_stalled_jobs` task and once at every worker start, each death counted as an
  attempt (up to `max_attempts`). `reviewloop worker` runs each review in a child process
  (api/review_child.py), so a review that crashes is one failed attempt, not a dead worker.
- SIGTERM/SIGINT stop the worker gracefully: no new job is fetched, running ones finish.
- A worker that stopped on a lost database (a Postgres restart) starts again by itself; a review
  cut off by the restart fails with a retryable error and resumes from its checkpoint.

This module imports neither the pipeline nor any model library at import time: the API imports it
to defer jobs and must stay small.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import procrastinate
import psycopg
from procrastinate import exceptions as queue_errors
from procrastinate.app import WorkerOptions
from procrastinate.jobs import Job, Status
from procrastinate.retry import BaseRetryStrategy, RetryDecision
from procrastinate.schema import SchemaManager

from agent.store.migrate import MIGRATION_LOCK_KEY, acquire_migration_lock
from api.db import DbPool
from api.logs import log_context
from api.retention import prune_history
from api.retrain_task import register_retrain_task
from reviewers.kernel.errors import ConfigError, ReviewloopError

if TYPE_CHECKING:
    from agent.gitlab.review import ReviewDeps

logger = logging.getLogger(__name__)

REVIEW_TASK = "review_merge_request"
ANSWER_TASK = "answer_thread_question"
RECOVERY_TASK = "recover_stalled_jobs"
RETENTION_TASK = "prune_old_history"
REVIEW_QUEUE = "reviews"
MAINTENANCE_QUEUE = "maintenance"
QUEUE_TABLE = "procrastinate_jobs"
# Pause before a worker that stopped on a database error starts again: a restarting Postgres is back
# within seconds, and a longer outage then costs one warning every few seconds, not a busy loop.
WORKER_RESTART_DELAY_S = 2.0


@dataclass(frozen=True)
class QueueConfig:
    """How the queue retries and detects dead workers. Defaults suit a review of a few minutes."""

    max_attempts: int = 5
    """Runs of one job at most (the first plus retries) before it fails for good."""
    backoff_base_s: int = 5
    """Retry n (n = 0, 1, ...) waits backoff_base_s * 2**n seconds: 5, 10, 20, 40 by default."""
    heartbeat_interval_s: float = 10.0
    """How often a worker proves it is alive."""
    stalled_worker_timeout_s: float = 30.0
    """A worker silent this long is dead; its running jobs are retried (three missed heartbeats)."""
    recovery_cron: str = "* * * * * */30"
    """When the periodic stalled-job recovery runs (6th field = seconds)."""
    shutdown_graceful_timeout_s: float | None = None
    """On SIGTERM, how long running reviews may finish before they are aborted (None = no limit)."""
    retrain_cron: str | None = None
    """When the periodic retrain runs (REVIEWLOOP_RETRAIN_CRON); None = never (api/retrain_task.py)."""
    retention_days: int = 30
    """Handled webhook events and finished jobs older than this are deleted (api/retention.py); 0 = never."""
    retention_cron: str = "17 3 * * *"
    """When the retention pass runs: daily, at a quiet hour."""

    @classmethod
    def with_liveness(cls, *, heartbeat_interval_s: float, stalled_after_s: float) -> QueueConfig:
        """Heartbeat and stall timeout as given; the recovery runs about once per stall timeout."""
        if heartbeat_interval_s <= 0 or stalled_after_s <= heartbeat_interval_s:
            raise ConfigError("the stall timeout must be longer than the heartbeat interval (and both positive)")
        every = int(stalled_after_s)
        cron = f"* * * * * */{max(1, every)}" if every < 60 else f"*/{min(59, every // 60)} * * * *"
        return cls(
            heartbeat_interval_s=heartbeat_interval_s, stalled_worker_timeout_s=stalled_after_s, recovery_cron=cron
        )


def is_retryable(error: BaseException) -> bool:
    return isinstance(error, ReviewloopError) and error.retryable


def backoff_seconds(attempts: int, *, base_s: int) -> int:
    """Delay before the retry that follows `attempts` earlier runs (0 on the first failure)."""
    return int(base_s * 2**attempts)


def will_retry(error: BaseException, *, attempts: int, max_attempts: int) -> bool:
    """Whether the queue will run the job again after it raised `error` on run `attempts + 1`."""
    return is_retryable(error) and attempts + 1 < max_attempts


class RetryableErrors(BaseRetryStrategy):
    """procrastinate's retry policy, reading our hierarchy's `retryable` flag."""

    def __init__(self, *, max_attempts: int, backoff_base_s: int) -> None:
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s

    def get_retry_decision(self, *, exception: BaseException, job: Job) -> RetryDecision | None:
        if not will_retry(exception, attempts=job.attempts, max_attempts=self.max_attempts):
            return None
        return RetryDecision(retry_in={"seconds": backoff_seconds(job.attempts, base_s=self.backoff_base_s)})


class ReviewFunction(Protocol):
    """`agent.gitlab.review.review_gitlab_merge_request` with its deps bound; returns the review id."""

    def __call__(self, *, project: str, mr_iid: int, head_sha: str | None, event_id: int | None) -> int: ...


class AnswerFunction(Protocol):
    """`agent.gitlab.answers.answer_thread_question` with its deps bound; returns the reply's note id,
    or None when there was nothing to answer (already answered, the thread or finding gone)."""

    def __call__(self, *, finding_id: int, discussion_id: str, note_id: int) -> int | None: ...


@dataclass(frozen=True)
class WorkerRuntime:
    """What a running job needs, handed to tasks through procrastinate's `additional_context`."""

    pool: DbPool
    review: ReviewFunction | None
    """None when GitLab is not configured: the worker then leaves review jobs waiting in the queue."""
    config: QueueConfig
    answer: AnswerFunction | None = None
    """Answers questions in the bot's threads; None without GitLab (its jobs wait, as reviews do)."""


def runtime_of(context: procrastinate.JobContext) -> WorkerRuntime:
    runtime = context.additional_context.get("runtime")
    if not isinstance(runtime, WorkerRuntime):
        raise RuntimeError("the worker was started without a WorkerRuntime in additional_context")
    return runtime


async def mark_event(pool: DbPool, event_id: int | None, *, status: str, reason: str) -> None:
    if event_id is None:
        return
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE webhook_events SET status = %s, reason = %s WHERE id = %s", (status, reason, event_id)
        )


async def processed_reason(pool: DbPool, review_id: int, *, event_head: str | None) -> str:
    """'review N', saying which head it reviewed when the event named an older one (a late delivery
    of an older push, or pushes since): the history must not file a review under a head it never saw."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT head_sha FROM reviews WHERE id = %s", (review_id,))
        row = await cur.fetchone()
    reviewed = str(row["head_sha"]) if row and row["head_sha"] else None
    if event_head and reviewed and reviewed != event_head:
        return f"review {review_id} of the newest head {reviewed[:12]} (this event's head {event_head[:12]} is older)"
    return f"review {review_id}"


async def run_review(
    runtime: WorkerRuntime, *, attempts: int, project: str, mr_iid: int, head_sha: str | None, event_id: int | None
) -> int:
    """Run one review in a thread (the pipeline is synchronous) and record the event's outcome."""
    with log_context(project=project, mr_iid=mr_iid, head_sha=head_sha, event_id=event_id):
        logger.info("review started", extra={"attempt": attempts + 1})
        if runtime.review is None:  # not fetched by such a worker (see _run_worker_once); never run blind
            raise ConfigError("GitLab is not configured in this worker (REVIEWLOOP_GITLAB_URL, _TOKEN)")
        call = functools.partial(runtime.review, project=project, mr_iid=mr_iid, head_sha=head_sha, event_id=event_id)
        try:
            review_id = await asyncio.to_thread(call)
        except Exception as exc:
            retry = will_retry(exc, attempts=attempts, max_attempts=runtime.config.max_attempts)
            logger.warning(
                "review failed", extra={"error": str(exc), "retryable": is_retryable(exc), "will_retry": retry}
            )
            if retry:  # the dashboard shows why a review is waiting for its next attempt
                reason = f"attempt {attempts + 1} failed, will retry: {exc}"
                await mark_event(runtime.pool, event_id, status="queued", reason=reason[:1000])
            else:
                await mark_event(runtime.pool, event_id, status="failed", reason=str(exc)[:1000])
            raise
        reason = await processed_reason(runtime.pool, review_id, event_head=head_sha)
        await mark_event(runtime.pool, event_id, status="processed", reason=reason)
        logger.info("review finished", extra={"review_id": review_id})
        return review_id


async def recover_stalled_jobs(
    app: procrastinate.App, *, seconds_since_heartbeat: float, max_attempts: int, pool: DbPool | None = None
) -> list[int]:
    """Put back in the queue the running jobs of workers that stopped sending heartbeats.

    A worker's death counts as one attempt of each review it was running, like any other failure:
    a job that has had `max_attempts` runs is failed, not retried, and its webhook event (through
    `pool`) says why. Without the count, a review that kills its worker was retried for ever
    (issue 40, M1). A stalled review whose MR already has a newer pending job (same queueing lock)
    is failed instead: the newer push supersedes it, and retrying it would violate the queueing lock.
    """
    recovered: list[int] = []
    for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=seconds_since_heartbeat):
        assert job.id is not None
        runs = job.attempts + 1
        if runs >= max_attempts:
            await app.job_manager.finish_job_by_id_async(job.id, status=Status.FAILED, delete_job=False)
            reason = f"the worker running this review stopped mid-review on each of its {runs} attempts; not retried"
            logger.warning("stalled job failed: no attempts left", extra={"job_id": job.id, "attempts": runs})
            event_id = job.task_kwargs.get("event_id")
            if pool is not None and isinstance(event_id, int):
                await mark_event(pool, event_id, status="failed", reason=reason)
            continue
        try:
            await app.job_manager.retry_job(job)
            recovered.append(job.id)
            logger.warning("stalled job retried", extra={"job_id": job.id, "task": job.task_name})
        except queue_errors.UniqueViolation:
            await app.job_manager.finish_job_by_id_async(job.id, status=Status.FAILED, delete_job=False)
            logger.warning("stalled job superseded by a newer pending one", extra={"job_id": job.id})
        except queue_errors.ConnectorException:
            # another worker's recovery got to this job first (retry_job refuses a job no longer doing)
            logger.info("stalled job already recovered elsewhere", extra={"job_id": job.id})
    return recovered


def create_queue_app(config: QueueConfig | None = None) -> procrastinate.App:
    """A fresh procrastinate App with our tasks; open it on a pool with `await app.open_async(pool)`.

    A factory rather than a module global: the app binds one pool when opened, and tests (and the
    `serve` command) open several in one process.
    """
    cfg = config or QueueConfig()
    app = procrastinate.App(connector=procrastinate.PsycopgConnector())

    @app.task(
        name=REVIEW_TASK,
        queue=REVIEW_QUEUE,
        pass_context=True,
        retry=RetryableErrors(max_attempts=cfg.max_attempts, backoff_base_s=cfg.backoff_base_s),
    )
    async def review_merge_request(
        context: procrastinate.JobContext,
        *,
        project: str,
        mr_iid: int,
        head_sha: str | None = None,
        event_id: int | None = None,
    ) -> int:
        return await run_review(
            runtime_of(context),
            attempts=context.job.attempts,
            project=project,
            mr_iid=mr_iid,
            head_sha=head_sha,
            event_id=event_id,
        )

    @app.task(
        name=ANSWER_TASK,
        queue=REVIEW_QUEUE,  # needs GitLab, as reviews do: a worker without it does not take these
        pass_context=True,
        retry=RetryableErrors(max_attempts=cfg.max_attempts, backoff_base_s=cfg.backoff_base_s),
    )
    async def answer_thread_question(
        context: procrastinate.JobContext, *, finding_id: int, discussion_id: str, note_id: int
    ) -> int | None:
        answer = runtime_of(context).answer
        if answer is None:
            raise RuntimeError("this worker cannot answer threads: it was started without GitLab")
        bound = functools.partial(answer, finding_id=finding_id, discussion_id=discussion_id, note_id=note_id)
        return await asyncio.to_thread(bound)

    @app.periodic(cron=cfg.recovery_cron, periodic_id=RECOVERY_TASK)
    @app.task(name=RECOVERY_TASK, queue=MAINTENANCE_QUEUE, queueing_lock=RECOVERY_TASK, pass_context=True)
    async def recover_stalled(context: procrastinate.JobContext, timestamp: int) -> int:
        del timestamp  # procrastinate passes the scheduled time; the recovery does not need it
        jobs = await recover_stalled_jobs(
            context.app,
            seconds_since_heartbeat=cfg.stalled_worker_timeout_s,
            max_attempts=cfg.max_attempts,
            pool=runtime_of(context).pool,
        )
        return len(jobs)

    if cfg.retention_days > 0:

        @app.periodic(cron=cfg.retention_cron, periodic_id=RETENTION_TASK)
        @app.task(name=RETENTION_TASK, queue=MAINTENANCE_QUEUE, queueing_lock=RETENTION_TASK, pass_context=True)
        async def prune_old_history(context: procrastinate.JobContext, timestamp: int) -> int:
            del timestamp
            return await prune_history(context.app, runtime_of(context).pool, older_than_days=cfg.retention_days)

    register_retrain_task(app, cron=cfg.retrain_cron)
    return app


def review_lock(*, project_id: int | str, mr_iid: int) -> str:
    return f"mr:{project_id}:{mr_iid}"


def ensure_queue_schema(dsn: str) -> bool:
    """Create procrastinate's tables and functions unless present; True when it created them.

    Run under our migration advisory lock so that replicas starting together create it once.
    Upgrading procrastinate across a schema change needs its migrations
    (`procrastinate schema --migrations-path`), as its changelog says for each such release; that
    is why pyproject.toml pins it to one minor version: a bump comes with a migration of ours that
    applies them (and a look at migration 0002, which calls its SQL functions).
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        acquire_migration_lock(conn)
        try:
            row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (QUEUE_TABLE,)).fetchone()
            if row is not None and row[0]:
                return False
            schema_sql = SchemaManager.get_schema()
            with conn.transaction():
                conn.execute(schema_sql.encode())  # no parameters: '%' in the SQL is not a placeholder
            return True
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))


async def run_worker(
    app: procrastinate.App,
    runtime: WorkerRuntime,
    *,
    concurrency: int = 2,
    name: str | None = None,
    install_signal_handlers: bool = True,
    wait: bool = True,
) -> None:
    """Run a worker on an opened app until stopped (SIGTERM/SIGINT, or cancelling this coroutine).

    Reviews run in threads, so `concurrency` is the number of reviews in parallel. A stop lets the
    running reviews finish; a second signal ends the process at once.

    procrastinate stops a worker by itself when one of its side tasks fails: on a Postgres restart
    the LISTEN connection cannot reconnect at once, or the heartbeat finds no server. Running jobs
    still finish; then, while this worker is meant to wait for jobs, it is started again here after
    `WORKER_RESTART_DELAY_S`, so a database restart costs a pause, not the worker.
    """
    loop = asyncio.get_running_loop()
    outer = asyncio.current_task()
    stop = asyncio.Event()
    running: asyncio.Task[None] | None = None
    handled: list[signal.Signals] = []

    def remove_handlers() -> None:
        for sig in handled:
            loop.remove_signal_handler(sig)
        handled.clear()

    def request_stop() -> None:
        remove_handlers()  # a second signal now has its default effect
        logger.info("stop requested: running reviews finish, no new one starts")
        stop.set()
        if running is not None:
            running.cancel()  # procrastinate's graceful stop: no new fetch, running jobs finish

    if install_signal_handlers and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, request_stop)
            handled.append(sig)
    try:
        while not stop.is_set():
            running = asyncio.create_task(_run_worker_once(app, runtime, concurrency=concurrency, name=name, wait=wait))
            try:
                await running
            except asyncio.CancelledError:
                if stop.is_set() and outer is not None and outer.cancelling() == 0:
                    return  # our own stop, not a cancellation of this coroutine
                raise
            except (queue_errors.ConnectorException, psycopg.OperationalError) as exc:
                if not wait or stop.is_set():
                    raise
                logger.warning("the worker lost the database; starting it again", extra={"error": str(exc)})
            else:
                if not wait or stop.is_set():
                    return
                logger.warning("the worker stopped by itself (a side task failed); starting it again")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=WORKER_RESTART_DELAY_S)
    finally:
        remove_handlers()


async def _run_worker_once(
    app: procrastinate.App, runtime: WorkerRuntime, *, concurrency: int, name: str | None, wait: bool
) -> None:
    cfg = runtime.config
    pruned = await app.job_manager.prune_stalled_workers(cfg.stalled_worker_timeout_s)
    if pruned:
        logger.warning("pruned stalled workers", extra={"workers": pruned})
    await recover_stalled_jobs(
        app, seconds_since_heartbeat=cfg.stalled_worker_timeout_s, max_attempts=cfg.max_attempts, pool=runtime.pool
    )
    options: WorkerOptions = {
        "concurrency": concurrency,
        "wait": wait,
        "install_signal_handlers": False,  # run_worker's own handlers stop it (and tell a stop from a failure)
        "additional_context": {"runtime": runtime},
        "update_heartbeat_interval": cfg.heartbeat_interval_s,
        "stalled_worker_timeout": cfg.stalled_worker_timeout_s,
        "listen_notify": True,
    }
    if name is not None:
        options["name"] = name
    if runtime.review is None:
        # GitLab is not configured: merge-request reviews wait in the queue for a worker that can run them
        options["queues"] = [MAINTENANCE_QUEUE]
    if cfg.shutdown_graceful_timeout_s is not None:
        options["shutdown_graceful_timeout"] = cfg.shutdown_graceful_timeout_s
    await app.run_worker_async(**options)


def pipeline_answer_function(deps: ReviewDeps) -> AnswerFunction:
    """Bind the thread-answering flow's deps (lazily imported, as the review flow is)."""
    from agent.gitlab.answers import answer_thread_question

    bound: Callable[..., int | None] = functools.partial(answer_thread_question, deps)
    return bound


def pipeline_review_function(deps: ReviewDeps) -> ReviewFunction:
    """Bind the review flow's deps; imported lazily so the API never loads the agent's heavy parts."""
    from agent.gitlab.review import review_gitlab_merge_request

    bound: Callable[..., int] = functools.partial(review_gitlab_merge_request, deps)
    return bound
