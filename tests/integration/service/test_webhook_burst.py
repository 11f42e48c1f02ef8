"""A burst of ordinary hooks is not shed for the body-read cap (issue 40: at 600 events/s half the
deliveries were answered 503). The cap bounds slow senders; a hook whose body comes right behind its
headers is not one, though under load many such requests wait between headers and body at once.
The running service on loopback, httpx clients (which write a request's head and body apart, as
GitLab's does), a real Postgres."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import FakeGitLab
from service_harness import BASE, HEAD, PID, SECRET, LiveServer, scalar

BURST = 40


def test_a_burst_of_whole_hooks_is_not_refused_for_the_body_cap(
    serve: Callable[..., LiveServer], service_dsn: str, fake: FakeGitLab
) -> None:
    live = serve(webhook_body_reads=1)  # the smallest cap: one slow body at a time
    bodies = []
    for iid in range(100, 100 + BURST):
        fake.add_merge_request(PID, iid, files_base=BASE, files_head=HEAD, title=f"change {iid}")
        bodies.append(json.dumps(merge_request_hook(fake, PID, iid)).encode())

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=BURST)) as client:
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
    assert statuses.count(503) == 0, statuses
    assert statuses == [202] * BURST
    assert scalar(service_dsn, "SELECT count(*) FROM procrastinate_jobs") == BURST
