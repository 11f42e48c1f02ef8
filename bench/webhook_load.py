"""A webhook load generator, run as its own process: `python -m bench.webhook_load URL RATE SECONDS TAG`.

Open loop: request i is due at start + i/RATE whether or not earlier ones were answered (GitLab
does not wait for us either), over at most `--connections` keep-alive connections. Latency is
measured from the moment a request was due, so time spent waiting for a free connection counts
(no coordinated omission); the time from the request actually leaving is reported beside it.
Every event is a Merge Request Hook "open" for its own merge request and head commit with its own
Idempotency-Key, so each one must be stored and queued. The webhook secret comes from the
environment (`BENCH_WEBHOOK_SECRET`), never the command line. Prints one JSON object.

The default client writes prepared HTTP/1.1 requests on asyncio streams: on a 2-core machine the
generator shares the cores with the service, and httpx spends several milliseconds of CPU per
request (as much as the service itself), which would be measured as the service's latency.
`--client httpx` sends the same requests through httpx, to check the figures against a full client.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import time
from collections import Counter
from typing import Any

import httpx

SECRET_ENV = "BENCH_WEBHOOK_SECRET"  # noqa: S105 - the variable's name, not a secret
PROJECT_ID = 4242
PROJECT_PATH = "bench/webhooks"
DEFAULT_CONNECTIONS = 64
REQUEST_TIMEOUT_S = 30.0  # a request unanswered this long after it was due counts as lost


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def merge_request_hook(*, iid: int, tag: str) -> dict[str, Any]:
    """A Merge Request Hook body shaped like GitLab's documented example (about 2.5 kB)."""
    head = hashlib.sha1(f"{tag}:{iid}".encode(), usedforsecurity=False).hexdigest()
    web = f"http://gitlab.example.com/{PROJECT_PATH}"
    project = {
        "id": PROJECT_ID,
        "name": "webhooks",
        "description": "benchmark project",
        "web_url": web,
        "avatar_url": None,
        "git_ssh_url": f"git@gitlab.example.com:{PROJECT_PATH}.git",
        "git_http_url": f"{web}.git",
        "namespace": "bench",
        "visibility_level": 0,
        "path_with_namespace": PROJECT_PATH,
        "default_branch": "main",
        "homepage": web,
        "url": f"git@gitlab.example.com:{PROJECT_PATH}.git",
        "ssh_url": f"git@gitlab.example.com:{PROJECT_PATH}.git",
        "http_url": f"{web}.git",
    }
    user = {"id": 7, "name": "Dev Eloper", "username": "dev", "avatar_url": None, "email": "[REDACTED]"}
    return {
        "object_kind": "merge_request",
        "event_type": "merge_request",
        "user": user,
        "project": project,
        "object_attributes": {
            "id": 900_000 + iid,
            "iid": iid,
            "target_branch": "main",
            "source_branch": f"feature-{iid}",
            "source_project_id": PROJECT_ID,
            "author_id": 7,
            "assignee_ids": [],
            "reviewer_ids": [],
            "title": f"Add feature {iid}",
            "created_at": "2025-01-01 10:00:00 UTC",
            "updated_at": "2025-01-01 10:00:00 UTC",
            "state_id": 1,
            "state": "opened",
            "draft": False,
            "work_in_progress": False,
            "merge_status": "unchecked",
            "target_project_id": PROJECT_ID,
            "description": "Implements the feature and its tests.",
            "url": f"{web}/-/merge_requests/{iid}",
            "source": project,
            "target": project,
            "last_commit": {
                "id": head,
                "message": "Add feature\n",
                "title": "Add feature",
                "timestamp": "2025-01-01T10:00:00+00:00",
                "url": f"{web}/-/commit/{head}",
                "author": {"name": "Dev Eloper", "email": "[REDACTED]"},
            },
            "labels": [],
            "action": "open",
        },
        "labels": [],
        "changes": {},
        "repository": {"name": "webhooks", "url": project["url"], "description": "", "homepage": web},
    }


async def _send(client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], due: float) -> Outcome:
    await asyncio.sleep(max(0.0, due - time.perf_counter()))
    sent = time.perf_counter()
    try:
        # one deadline for the whole request (waiting for a connection included), from when it was due
        response = await asyncio.wait_for(
            client.post(url, content=body, headers=headers), timeout=max(0.1, due + REQUEST_TIMEOUT_S - sent)
        )
        status: int | str = response.status_code
    except TimeoutError:
        status = "timeout"
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    done = time.perf_counter()
    return status, done - due, done - sent


Outcome = tuple[int | str, float, float]  # (HTTP status or failure, seconds since due, seconds since sent)


def raw_request(url: httpx.URL, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {url.raw_path.decode()} HTTP/1.1", f"Host: {url.netloc.decode()}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_status(reader: asyncio.StreamReader) -> int:
    """One HTTP/1.1 response: the status; the body (Content-Length framed, as uvicorn sends it) is read off."""
    status_line = await reader.readuntil(b"\r\n")
    length = 0
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def _raw_connection(
    url: httpx.URL, queue: asyncio.Queue[tuple[int, float, bytes] | None], results: list[Outcome | None]
) -> None:
    """One keep-alive connection taking due requests from the queue until it gets None."""
    streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    while (item := await queue.get()) is not None:
        index, due, payload = item
        sent = time.perf_counter()
        status: int | str
        try:
            if streams is None:
                streams = await asyncio.open_connection(url.host, url.port)
            reader, writer = streams
            writer.write(payload)
            status = await asyncio.wait_for(_read_status(reader), timeout=max(0.1, due + REQUEST_TIMEOUT_S - sent))
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            status = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
            if streams is not None:
                streams[1].close()
            streams = None  # the answer may still come on this connection: never reuse it
        done = time.perf_counter()
        results[index] = (status, done - due, done - sent)
    if streams is not None:
        streams[1].close()


async def _run_raw(
    url: str, requests: list[tuple[bytes, dict[str, str]]], rate: float, connections: int
) -> list[Outcome]:
    target = httpx.URL(url)
    prepared = [raw_request(target, body, headers) for body, headers in requests]
    queue: asyncio.Queue[tuple[int, float, bytes] | None] = asyncio.Queue()
    results: list[Outcome | None] = [None] * len(prepared)
    workers = [asyncio.create_task(_raw_connection(target, queue, results)) for _ in range(connections)]
    start = time.perf_counter() + 0.05
    for i, payload in enumerate(prepared):
        due = start + i / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        queue.put_nowait((i, due, payload))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    return [r if r is not None else ("not sent", 0.0, 0.0) for r in results]


async def _run_httpx(
    url: str, requests: list[tuple[bytes, dict[str, str]]], rate: float, connections: int
) -> list[Outcome]:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT_S) as client:
        start = time.perf_counter() + 0.05
        tasks = [
            asyncio.create_task(_send(client, url, body, headers, start + i / rate))
            for i, (body, headers) in enumerate(requests)
        ]
        return list(await asyncio.gather(*tasks))


async def generate(
    url: str,
    *,
    rate: float,
    seconds: float,
    tag: str,
    secret: str,
    connections: int,
    first_iid: int = 1,
    client: str = "raw",
) -> dict[str, Any]:
    n = max(1, round(rate * seconds))
    requests = []
    for i in range(n):
        iid = first_iid + i
        body = json.dumps(merge_request_hook(iid=iid, tag=tag)).encode()
        headers = {
            "Content-Type": "application/json",
            "X-Gitlab-Event": "Merge Request Hook",
            "X-Gitlab-Token": secret,
            "Idempotency-Key": f"{tag}-{iid}",
            "X-Gitlab-Webhook-UUID": f"{tag}-w-{iid}",
        }
        requests.append((body, headers))
    started = time.perf_counter()
    runner = _run_httpx if client == "httpx" else _run_raw
    results = await runner(url, requests, rate, connections)
    elapsed = time.perf_counter() - started
    statuses = Counter(str(s) for s, _, _ in results)
    accepted = [(lat, svc) for s, lat, svc in results if s == 202]
    accepted_keys = [
        headers["Idempotency-Key"] for (_, headers), (s, _, _) in zip(requests, results, strict=True) if s == 202
    ]
    latencies = [lat for lat, _ in accepted]
    service = [svc for _, svc in accepted]
    return {
        "rate": rate,
        "seconds": seconds,
        "sent": n,
        "statuses": dict(statuses),
        "accepted": len(accepted),
        "elapsed_s": elapsed,
        "sustained_per_s": len(accepted) / elapsed if elapsed > 0 else 0.0,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "max_ms": max(latencies, default=float("nan")) * 1000,
        "mean_ms": statistics.fmean(latencies) * 1000 if latencies else float("nan"),
        "service_p50_ms": percentile(service, 50) * 1000,
        "service_p99_ms": percentile(service, 99) * 1000,
        "connections": connections,
        "client": client,
        "accepted_keys": accepted_keys,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the webhook URL, e.g. http://127.0.0.1:8000/webhooks/gitlab")
    parser.add_argument("rate", type=float, help="events per second")
    parser.add_argument("seconds", type=float, help="how long to send")
    parser.add_argument("tag", help="prefix of the idempotency keys and head commits of this run")
    parser.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS)
    parser.add_argument(
        "--first-iid", type=int, default=1, help="merge request iids count up from here (one MR per event)"
    )
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw", help="how requests are sent")
    args = parser.parse_args()
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        parser.error(f"set {SECRET_ENV} to the service's webhook secret")
    result = asyncio.run(
        generate(
            args.url,
            rate=args.rate,
            seconds=args.seconds,
            tag=args.tag,
            secret=secret,
            connections=args.connections,
            first_iid=args.first_iid,
            client=args.client,
        )
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
