"""`reviewloop serve`, `reviewloop worker`, `reviewloop db upgrade`, `reviewloop tokens create|revoke`.

`serve` is the one-machine deployment: the HTTP API, and a worker in a child process (reviews in the
API's process starve its event loop: api/worker_process.py), on the embedded Postgres unless
`REVIEWLOOP_DATABASE_URL` names one. `worker` runs more workers,
on any host that reaches the same database. Heavy imports (the pipeline and its model backends)
happen inside the commands that run reviews.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from agent.service_settings import Settings
from api.commands.app import app
from reviewers.kernel.errors import ReviewloopError

if TYPE_CHECKING:
    from agent.session import Session
    from api.worker import QueueConfig, WorkerRuntime
    from api.worker_process import WorkerChild

logger = logging.getLogger(__name__)
err = Console(stderr=True)

db_app = typer.Typer(help="The database schema (ours and the job queue's).", no_args_is_help=True)
tokens_app = typer.Typer(help="Bearer tokens of the feedback and read API.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(tokens_app, name="tokens")


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"reviewloop: {message}", markup=False, highlight=False)
    return typer.Exit(code)


def prepare_database(settings: Settings) -> str:
    """Resolve the DSN (starting the embedded server if none is configured) and migrate everything:
    our tables, LangGraph's checkpoints and the job queue's schema."""
    from agent.session import prepare_database as prepare_agent_database
    from agent.store.db import resolve_dsn
    from api.worker import ensure_queue_schema

    dsn = resolve_dsn(database_url=settings.database_url, data_dir=settings.data_dir)
    prepare_agent_database(dsn)
    if ensure_queue_schema(dsn):
        logger.info("created the job queue schema")
    return dsn


def worker_runtime(settings: Settings, config: QueueConfig) -> tuple[WorkerRuntime, Session]:
    """The review flow's dependencies (store pool, tracing, GitLab client, model) and the worker's own
    small async pool. The session (its pool and tracer) is the caller's to close."""
    from agent.gitlab.review import build_deps
    from agent.session import llm_from_settings, open_session
    from api.db import make_pool
    from api.review_child import ReviewInChild
    from api.worker import (
        AnswerFunction,
        ReviewFunction,
        WorkerRuntime,
        pipeline_answer_function,
        pipeline_review_function,
    )

    session = open_session(settings)
    review: ReviewFunction | None = None
    answer: AnswerFunction | None = None
    if settings.gitlab_configured:
        # built here once, so that bad settings stop the worker at its start rather than fail each review
        deps = build_deps(settings, pool=session.pool, dsn=session.dsn, llm=llm_from_settings(settings))
        if settings.llm_model_path is not None:
            # a model in this process takes seconds to minutes to load: reviews share it, in threads
            review = pipeline_review_function(deps)
        else:
            # each review in its own process (api/review_child.py), with the database this worker resolved
            review = ReviewInChild(env={**os.environ, "REVIEWLOOP_DATABASE_URL": session.dsn})
        # answers in threads are a database read and one GitLab call: in this process, in a thread
        answer = pipeline_answer_function(deps)
    else:
        logger.warning(
            "GitLab is not configured: merge-request reviews wait in the queue until a worker runs with "
            "REVIEWLOOP_GITLAB_URL and REVIEWLOOP_GITLAB_TOKEN set; maintenance tasks run"
        )
    runtime = WorkerRuntime(
        pool=make_pool(session.dsn, max_size=2, name="reviewloop-worker"), review=review, config=config, answer=answer
    )
    return runtime, session


@contextlib.contextmanager
def clear_errors() -> Iterator[None]:
    """Errors a user can cause become one line on stderr, not a traceback."""
    try:
        yield
    except ReviewloopError as exc:
        raise fail(str(exc)) from exc


def _service_setup(log_level: str, *, heartbeat_interval: float, stalled_after: float) -> tuple[Settings, QueueConfig]:
    """What `serve` and `worker` share: JSON logs, a migrated database, the queue's liveness settings."""
    from api.logs import configure_logging
    from api.worker import QueueConfig

    configure_logging(log_level)
    settings = Settings()
    dsn = prepare_database(settings)
    config = dataclasses.replace(
        QueueConfig.with_liveness(heartbeat_interval_s=heartbeat_interval, stalled_after_s=stalled_after),
        retrain_cron=settings.retrain_cron,
        retention_days=settings.retention_days,
    )
    return settings.model_copy(update={"database_url": dsn}), config


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    concurrency: Annotated[int, typer.Option(help="reviews the worker runs at once")] = 2,
    with_worker: Annotated[
        bool, typer.Option("--worker/--no-worker", help="run a worker (a child process) beside the API")
    ] = True,
    heartbeat_interval: Annotated[float, typer.Option(help="seconds between worker heartbeats")] = 10.0,
    stalled_after: Annotated[
        float, typer.Option(help="seconds without a heartbeat after which a worker's reviews are retried elsewhere")
    ] = 30.0,
    log_level: Annotated[str, typer.Option(help="debug|info|warning|error")] = "info",
) -> None:
    """Serve the webhook, feedback and read API, with a worker beside it."""
    from api.http_server import event_loop_factory
    from api.worker_process import WorkerChild, worker_command

    with clear_errors():
        settings, config = _service_setup(log_level, heartbeat_interval=heartbeat_interval, stalled_after=stalled_after)
        assert settings.database_url is not None
        child = None
        if with_worker:
            command = worker_command(
                concurrency=concurrency,
                heartbeat_interval=heartbeat_interval,
                stalled_after=stalled_after,
                log_level=log_level,
            )
            # the resolved URL: the child uses the server this process started, never one of its own
            child = WorkerChild(command, env={**os.environ, "REVIEWLOOP_DATABASE_URL": settings.database_url})
            child.start()
        try:
            with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
                runner.run(
                    serve_async(settings, host=host, port=port, worker=child, config=config, log_level=log_level)
                )
        finally:
            if child is not None:
                child.stop()


async def serve_async(
    settings: Settings,
    *,
    host: str,
    port: int,
    worker: WorkerChild | None,
    config: QueueConfig,
    log_level: str,
) -> None:
    """The API on this event loop; SIGTERM/SIGINT stop it, and `serve` then stops the worker (see
    api/worker_process.py for why the worker is a child process)."""
    import uvicorn

    from api.app import create_app
    from api.db import make_pool
    from api.http_server import raise_open_files_limit, uvicorn_config
    from api.worker import create_queue_app

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # signals are ours (below): uvicorn would re-raise them after its shutdown and kill the
            # process before the worker has finished its running reviews
            yield

    assert settings.database_url is not None
    raise_open_files_limit()  # idle connections hold a descriptor each until their deadline
    pool = make_pool(settings.database_url, max_size=settings.db_pool_size)
    await pool.open(wait=True)
    queue = create_queue_app(config)
    await queue.open_async(pool)
    api = create_app(settings, pool=pool, queue=queue, require_worker=worker is not None, queue_config=config)
    server = Server(uvicorn_config(api, settings, host=host, port=port, log_level=log_level))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    supervisor = asyncio.create_task(worker.supervise()) if worker is not None else None
    if supervisor is not None:
        # a worker that cannot start (bad settings) stops the service, with its error
        supervisor.add_done_callback(lambda _: setattr(server, "should_exit", True))
    try:
        await server.serve()
    finally:
        if supervisor is not None:
            supervisor.cancel()  # no restart once we are stopping
            await asyncio.gather(supervisor, return_exceptions=True)
        await queue.close_async()
        await pool.close()
    failure = supervisor.exception() if supervisor is not None and not supervisor.cancelled() else None
    if failure is not None:
        raise failure


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(help="reviews this worker runs at once")] = 2,
    name: Annotated[str | None, typer.Option(help="worker name in logs")] = None,
    heartbeat_interval: Annotated[float, typer.Option(help="seconds between worker heartbeats")] = 10.0,
    stalled_after: Annotated[
        float, typer.Option(help="seconds without a heartbeat after which a worker's reviews are retried elsewhere")
    ] = 30.0,
    log_level: Annotated[str, typer.Option(help="debug|info|warning|error")] = "info",
) -> None:
    """Run a worker; start as many as you like, on any host that reaches the database."""
    from api.worker_process import exit_with_parent

    exit_with_parent()  # when `serve` started this worker: stop with it
    with clear_errors():
        settings, config = _service_setup(log_level, heartbeat_interval=heartbeat_interval, stalled_after=stalled_after)
        assert settings.database_url is not None
        runtime, session = worker_runtime(settings, config)
        try:
            asyncio.run(
                worker_async(
                    settings.database_url, runtime, concurrency=concurrency, name=name, pool_size=settings.db_pool_size
                )
            )
        finally:
            session.close()


async def worker_async(dsn: str, runtime: WorkerRuntime, *, concurrency: int, name: str | None, pool_size: int) -> None:
    from api.db import make_pool
    from api.worker import create_queue_app, run_worker

    pool = make_pool(dsn, max_size=pool_size)
    await pool.open(wait=True)
    await runtime.pool.open(wait=True)
    queue = create_queue_app(runtime.config)
    await queue.open_async(pool)
    try:
        # procrastinate's handlers: SIGTERM/SIGINT stop fetching, running reviews finish
        await run_worker(queue, runtime, concurrency=concurrency, name=name, install_signal_handlers=True)
    finally:
        await queue.close_async()
        await runtime.pool.close()
        await pool.close()


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply reviewloop's migrations and create the job queue's schema (idempotent)."""
    with clear_errors():
        dsn = prepare_database(Settings())
    from agent.store.db import describe_dsn

    typer.echo(f"database {describe_dsn(dsn)} is up to date")


@db_app.command("status")
def db_status() -> None:
    """Say which database reviewloop uses and whether the embedded Postgres is running (starts nothing)."""
    from agent.store.db import describe_dsn
    from agent.store.embedded import embedded_status

    settings = Settings()
    if settings.database_url:
        typer.echo(f"database: {describe_dsn(settings.database_url)} (REVIEWLOOP_DATABASE_URL; not embedded)")
        return
    status = embedded_status(settings.data_dir)
    if status.running:
        where = f"port {status.port}" if status.port else "its socket"
        typer.echo(f"embedded Postgres: running (pid {status.pid}, {where}) in {status.pgdata}")
        typer.echo("stop it with: reviewloop db stop")
    elif status.initialised:
        typer.echo(f"embedded Postgres: stopped; its data is kept in {status.pgdata}")
    else:
        typer.echo(f"embedded Postgres: not created yet (it starts in {status.pgdata} on first use)")


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded Postgres (data is kept; the next command that needs it starts it again)."""
    from agent.store.embedded import stop_embedded

    settings = Settings()
    if settings.database_url:
        raise fail("REVIEWLOOP_DATABASE_URL is set: reviewloop does not run that server, so it does not stop it")
    with clear_errors():
        before = stop_embedded(settings.data_dir)
    if before.running:
        typer.echo(f"embedded Postgres stopped (was pid {before.pid}); data kept in {before.pgdata}")
    else:
        typer.echo("embedded Postgres was not running")


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Argument(help="who or what the token is for")],
    project: Annotated[
        list[str] | None,
        typer.Option(
            "--project",
            help="numeric GitLab project id the token is limited to (repeatable); without it: every project",
        ),
    ] = None,
) -> None:
    """Create an API token and print it once; only its hash is stored. With --project the token reads
    and votes on those projects' reviews only; without it, it is an admin token (every project)."""
    from api.auth import create_api_token

    with clear_errors():
        dsn = prepare_database(Settings())
        token = create_api_token(dsn, name, projects=project or ())
    typer.echo(token)
    reach = f"projects {', '.join(project)}" if project else "every project (an admin token)"
    err.print(f"token {name!r} created for {reach}; it is shown only now", markup=False, highlight=False)


@tokens_app.command("revoke")
def tokens_revoke(name: Annotated[str, typer.Argument(help="the name the token was created under")]) -> None:
    """Revoke a stored API token: the API refuses it at once, and its dashboard sessions end."""
    from api.auth import revoke_api_token

    with clear_errors():
        dsn = prepare_database(Settings())
        revoke_api_token(dsn, name)
    err.print(f"token {name!r} revoked", markup=False, highlight=False)
