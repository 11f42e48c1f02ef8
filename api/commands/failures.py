"""`reviewloop reviews failed|retry`: the failed merge-request reviews the dashboard lists, from a shell."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from agent.service_settings import Settings
from api.commands.app import app
from reviewers.kernel.errors import InputError

# The database layer and the worker are imported inside the commands, so `reviewloop --help` stays light.

reviews_app = typer.Typer(help="Merge-request reviews: the failed ones, and retrying them.", no_args_is_help=True)
app.add_typer(reviews_app, name="reviews")


@reviews_app.command("failed")
def reviews_failed(
    project: Annotated[list[str] | None, typer.Option("--project", help="numeric project id (repeatable)")] = None,
    limit: Annotated[int, typer.Option(help="the newest this many")] = 50,
) -> None:
    """List failed and retrying reviews with their reason and attempts (newest first)."""
    from api.commands.service import clear_errors, prepare_database
    from api.failures import list_failed_reviews

    async def run(dsn: str) -> None:
        from api.db import make_pool

        pool = make_pool(dsn, max_size=1)
        await pool.open(wait=True)
        try:
            failures = await list_failed_reviews(pool, projects=project, limit=limit)
        finally:
            await pool.close()
        if not failures:
            typer.echo("no failed reviews")
        for f in failures:
            typer.echo(
                f"event {f.event_id}\t{f.mr_label}\t{f.state}\tattempts {f.attempts}\t"
                f"{f.received_at:%Y-%m-%d %H:%M}\t{f.reason}"
            )

    with clear_errors():
        asyncio.run(run(prepare_database(Settings())))


@reviews_app.command("retry")
def reviews_retry(event_id: Annotated[int, typer.Argument(help="the event id `reviews failed` shows")]) -> None:
    """Queue a failed review again; a running worker picks it up."""
    from api.commands.service import clear_errors, fail, prepare_database
    from api.failures import retry_review
    from api.worker import create_queue_app

    async def run(dsn: str) -> int:
        from api.db import make_pool

        pool = make_pool(dsn, max_size=2)
        await pool.open(wait=True)
        queue = create_queue_app()
        await queue.open_async(pool)
        try:
            return await retry_review(pool, queue, event_id, by="cli")
        finally:
            await queue.close_async()
            await pool.close()

    with clear_errors():
        try:
            job_id = asyncio.run(run(prepare_database(Settings())))
        except InputError as exc:
            raise fail(str(exc)) from exc
    typer.echo(f"event {event_id} queued again as job {job_id}")
