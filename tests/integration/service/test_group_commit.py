"""Group commit of the webhook's reviewable deliveries (api/intake_batch.py): deliveries that wait
together share one statement and one commit, and each still gets exactly the answer it got alone.
A real Postgres with the job queue's schema; the HTTP case runs the service on loopback (issue 40,
Done-when 4: the intake's cost per event)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import FakeGitLab
from service_harness import BASE, HEAD, PID, SECRET, LiveServer, scalar

from api.db import make_pool
from api.intake_batch import ReviewIntake, delivery_params


def params(iid: int, *, key: str, head: str | None = None, title: str = "change") -> dict[str, Any]:
    return delivery_params(
        kind="merge_request",
        key=key,
        uuid=None,
        project_id=PID,
        path="group/project",
        iid=iid,
        head=head or f"{iid:040x}",
        action="open",
        payload={"object_kind": "merge_request", "object_attributes": {"iid": iid, "title": title}},
        lock=f"mr:{PID}:{iid}",
        queue="reviews",
        task="review_merge_request",
        priority=0,
        args={"project": str(PID), "mr_iid": iid},
    )


async def write_all(
    dsn: str, deliveries: list[dict[str, Any]], **intake_options: Any
) -> tuple[list[Any], ReviewIntake]:
    """Hand every delivery to one intake at once; each one's row, or the exception it got."""
    pool = make_pool(dsn, max_size=4)
    await pool.open(wait=True)
    try:
        intake = ReviewIntake(pool, **intake_options)
        answers = await asyncio.gather(*(intake.enqueue(d) for d in deliveries), return_exceptions=True)
        await intake.drain()
        return list(answers), intake
    finally:
        await pool.close()


def test_deliveries_waiting_together_share_one_commit_and_keep_their_answers(service_dsn: str) -> None:
    distinct = [params(iid, key=f"key-{iid}") for iid in range(1, 21)]
    # three deliveries of one head of MR 99 under different keys: the first queues, the others must
    # see its committed row, so they wait for later batches instead of sharing its statement
    same_mr = [params(99, key=f"again-{n}", head="ab" * 20) for n in range(3)]
    answers, intake = asyncio.run(write_all(service_dsn, [*distinct, *same_mr]))

    assert intake.batches == 3, "21 deliveries for 21 MRs in one statement, then one per repeat"
    assert intake.largest_batch == 21
    statuses = [a["status"] for a in answers]
    assert statuses == ["queued"] * 21 + ["duplicate", "duplicate"]
    assert all("already queued by event" in a["reason"] for a in answers[21:])
    assert len({a["event_id"] for a in answers}) == 23
    assert scalar(service_dsn, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'") == 21
    assert (
        scalar(service_dsn, "SELECT count(*) FROM webhook_events WHERE status = 'queued' AND job_id IS NOT NULL") == 21
    )
    assert scalar(service_dsn, "SELECT count(*) FROM webhook_events WHERE status = 'duplicate'") == 2


def test_a_delivery_postgres_cannot_keep_does_not_refuse_its_neighbours(service_dsn: str) -> None:
    deliveries = [params(iid, key=f"key-{iid}") for iid in range(1, 6)]
    deliveries[2] = params(3, key="key-3", title="nul \x00 in a title")  # jsonb cannot hold \u0000
    answers, intake = asyncio.run(write_all(service_dsn, deliveries))

    assert isinstance(answers[2], psycopg.DataError)
    assert [a["status"] for i, a in enumerate(answers) if i != 2] == ["queued"] * 4
    assert intake.batches == 1  # the batch was refused as a whole, then written one by one
    assert scalar(service_dsn, "SELECT count(*) FROM procrastinate_jobs") == 4
    assert scalar(service_dsn, "SELECT count(*) FROM webhook_events") == 4


def test_two_api_processes_writing_the_same_mrs_in_opposite_orders_do_not_deadlock(service_dsn: str) -> None:
    iids = list(range(1, 31))

    async def both() -> list[list[Any]]:
        first = write_all(service_dsn, [params(i, key=f"a-{i}", head=f"{i:040x}") for i in iids])
        second = write_all(service_dsn, [params(i, key=f"b-{i}", head=f"{i + 1000:040x}") for i in reversed(iids)])
        results = await asyncio.gather(first, second)
        return [answers for answers, _ in results]

    for answers in asyncio.run(both()):
        errors = [a for a in answers if isinstance(a, BaseException)]
        assert errors == []
        assert {a["status"] for a in answers} == {"queued"}
    # per MR the later push superseded the earlier pending job: one job to do per MR
    assert scalar(service_dsn, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'") == len(iids)


def test_a_database_that_is_down_fails_every_waiting_delivery(service_dsn: str) -> None:
    dead = "postgresql://postgres@127.0.0.1:9/postgres?connect_timeout=1"

    async def run() -> list[Any]:
        pool = make_pool(dead, max_size=1)
        pool.timeout = 1.5  # type: ignore[attr-defined]
        await pool.open(wait=False)
        try:
            intake = ReviewIntake(pool)
            return list(
                await asyncio.gather(
                    *(intake.enqueue(params(i, key=f"k{i}")) for i in range(3)), return_exceptions=True
                )
            )
        finally:
            await pool.close()

    answers = asyncio.run(run())
    assert len(answers) == 3
    assert all(isinstance(a, Exception) for a in answers), answers


@pytest.mark.parametrize("bad_title", ["nul \x00 in a title"])
def test_over_http_a_burst_with_one_bad_hook_answers_each_on_its_own(
    serve: Callable[..., LiveServer], service_dsn: str, fake: FakeGitLab, bad_title: str
) -> None:
    live = serve()
    bodies = []
    for iid in range(200, 230):
        fake.add_merge_request(PID, iid, files_base=BASE, files_head=HEAD, title=f"change {iid}")
        hook = merge_request_hook(fake, PID, iid)
        if iid == 215:
            hook["object_attributes"]["title"] = bad_title
        bodies.append(json.dumps(hook).encode())

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=len(bodies))) as client:
            answers = await asyncio.gather(
                *(
                    client.post(
                        f"{live.url}/webhooks/gitlab",
                        content=body,
                        headers=hook_headers("Merge Request Hook", token=SECRET),
                    )
                    for body in bodies
                )
            )
        return [a.status_code for a in answers]

    statuses = asyncio.run(burst())
    assert statuses[15] == 400
    assert statuses[:15] + statuses[16:] == [202] * 29
    assert scalar(service_dsn, "SELECT count(*) FROM procrastinate_jobs") == 29
