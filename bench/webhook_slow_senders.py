"""Slow webhook senders without the secret, against a real `reviewloop serve`: what they cost the API.

Issue 21: the webhook read its body (up to 5 MiB) before it checked `X-Gitlab-Token`, with no
deadline. 100 senders with a wrong secret took the API from 128 to 634 MB of RSS (its Kubernetes
limit is 512 Mi), one whose body never came got no answer, and one sending a byte every 10 s held
its connection past 150 s.

Here `senders` connections open at once. Each sends a Merge Request Hook's headers with a wrong
secret and `Content-Length: 5 MiB`, then its body one of three ways, in turn: never (*silent*), a
byte every half second (*trickle*), or 64 KiB every 10 ms (*stream*: the whole 5 MiB in about a
second, what made the RSS grow). The server's RSS is sampled throughout (psutil); each sender
records the time from its headers to the status line, and whether the server then closed the
connection. `python -m bench.webhook_slow_senders` runs it alone and prints a RESULTS.md section;
`make bench` runs it with everything else.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import psutil

from bench.report import Target, fmt, provenance, render_provenance, render_targets, table
from bench.webhook import SERVER_COMMAND, free_port, wait_ready
from bench.webhook_load import percentile

REPO = Path(__file__).resolve().parent.parent
SENDERS = 100
DECLARED_BYTES = 5 * 1024 * 1024  # the largest body the webhook accepts by default
RSS_TARGET_MB = 256.0  # half the Kubernetes limit (512 Mi): room for the requests that are real
ANSWER_TARGET_S = 1.0  # a wrong secret is a 401 within a second, whatever the body does
# How long a sender waits for its status line, and then for the server to close: past these it
# counts as unanswered / left open. Generous, so that a slow machine measures rather than gives up.
ANSWER_WAIT_S = 30.0
CLOSE_WAIT_S = 10.0
TRICKLE_EVERY_S = 0.5
STREAM_CHUNK = 64 * 1024
STREAM_EVERY_S = 0.01
RSS_SAMPLE_EVERY_S = 0.01
SETTLE_S = 1.0  # after the last sender finished: what the server still holds

Mode = Literal["silent", "trickle", "stream"]
MODES: tuple[Mode, ...] = ("silent", "trickle", "stream")


@dataclass(frozen=True)
class SenderResult:
    mode: Mode
    status: int | None  # None: no status line within ANSWER_WAIT_S (or the connection was cut first)
    answer_s: float  # from the end of the headers to the status line (ANSWER_WAIT_S when unanswered)
    closed_by_server: bool  # the server closed the connection after answering, within CLOSE_WAIT_S
    body_bytes_sent: int
    failure: str = ""  # why there is no status: "timeout", or the error that ended the connection


def request_head(*, host: str, port: int, secret: str, declared: int) -> bytes:
    lines = [
        "POST /webhooks/gitlab HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        "User-Agent: GitLab/17.6.0",
        "X-Gitlab-Event: Merge Request Hook",
        f"X-Gitlab-Token: {secret}",
        f"Content-Length: {declared}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def send_body(writer: asyncio.StreamWriter, mode: Mode, declared: int, sent: list[int]) -> None:
    """Send the body the `mode`'s way until it is all sent or the server stops taking it."""
    if mode == "silent":
        return
    chunk, every = (b"{", TRICKLE_EVERY_S) if mode == "trickle" else (b" " * STREAM_CHUNK, STREAM_EVERY_S)
    try:
        while sent[0] < declared:
            part = chunk[: declared - sent[0]]
            writer.write(part)
            await writer.drain()
            sent[0] += len(part)
            await asyncio.sleep(every)
    except (ConnectionError, OSError):
        return  # the server answered and closed: the rest is never read


async def server_closed(reader: asyncio.StreamReader, within_s: float) -> bool:
    """Whether the server ends the connection (EOF or reset) within `within_s`, reading what it sends."""
    try:
        async with asyncio.timeout(within_s):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except (ConnectionError, OSError):
        return True
    return True


async def slow_sender(host: str, port: int, *, head: bytes, mode: Mode, declared: int) -> SenderResult:
    reader, writer = await asyncio.open_connection(host, port)
    sent = [0]
    feeder: asyncio.Task[None] | None = None
    try:
        writer.write(head)
        await writer.drain()
        headers_sent = time.perf_counter()
        feeder = asyncio.create_task(send_body(writer, mode, declared, sent))
        try:
            async with asyncio.timeout(ANSWER_WAIT_S):
                status_line = await reader.readuntil(b"\r\n")
            answer_s = time.perf_counter() - headers_sent
            status: int | None = int(status_line.split(b" ", 2)[1])
        except TimeoutError:
            return SenderResult(mode, None, ANSWER_WAIT_S, False, sent[0], "timeout")
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            return SenderResult(mode, None, ANSWER_WAIT_S, False, sent[0], f"{type(exc).__name__}: {exc}")
        closed = await server_closed(reader, CLOSE_WAIT_S)
        return SenderResult(mode, status, answer_s, closed, sent[0])
    finally:
        if feeder is not None:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def slow_senders(
    host: str, port: int, *, secret: str, senders: int = SENDERS, declared: int = DECLARED_BYTES
) -> list[SenderResult]:
    """`senders` connections at once, the modes in turn; every result, in the senders' order."""
    head = request_head(host=host, port=port, secret=secret, declared=declared)
    return list(
        await asyncio.gather(
            *(slow_sender(host, port, head=head, mode=MODES[i % len(MODES)], declared=declared) for i in range(senders))
        )
    )


class RssSampler:
    """The peak resident set size of a process, sampled in a thread while the block runs."""

    def __init__(self, pid: int, every_s: float = RSS_SAMPLE_EVERY_S) -> None:
        self.process = psutil.Process(pid)
        self.every_s = every_s
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.process.memory_info().rss)
            self._stop.wait(self.every_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def summarize(results: list[SenderResult], *, rss_before: int, rss_peak: int, rss_after: int) -> dict[str, Any]:
    answered = [r.answer_s for r in results if r.status is not None]
    return {
        "senders": len(results),
        "statuses": dict(Counter(str(r.status) for r in results)),
        "unanswered": sum(r.status is None for r in results),
        "failures": dict(Counter(f"{r.mode}: {r.failure}" for r in results if r.failure)),
        "left_open": sum(r.status is not None and not r.closed_by_server for r in results),
        "answer_p50_s": percentile(answered, 50),
        "answer_p99_s": percentile(answered, 99),
        "answer_max_s": max((r.answer_s for r in results), default=float("nan")),
        "body_mib_sent": sum(r.body_bytes_sent for r in results) / 2**20,
        "rss_before_mb": rss_before / 1e6,
        "rss_peak_mb": rss_peak / 1e6,
        "rss_after_mb": rss_after / 1e6,
    }


@contextlib.contextmanager
def served(
    dsn: str, *, secret: str, repo: Path = REPO, settings: dict[str, str] | None = None
) -> Iterator[tuple[str, int, int]]:
    """`reviewloop serve --no-worker` from `repo` on a free loopback port: (host, port, pid).
    `settings`: more environment (`REVIEWLOOP_...`) for the server."""
    port = free_port()
    env = {
        **os.environ,
        **(settings or {}),
        "REVIEWLOOP_DATABASE_URL": dsn,
        "REVIEWLOOP_WEBHOOK_SECRET": secret,
        "PYTHONPATH": str(repo),
    }
    with tempfile.TemporaryDirectory(prefix="reviewloop-bench-slow-") as tmp:
        env["REVIEWLOOP_DATA_DIR"] = tmp
        log_path = Path(tmp) / "serve.log"
        command = [sys.executable, *SERVER_COMMAND, "--port", str(port), "--log-level", "warning"]
        with open(log_path, "wb") as log:
            server = subprocess.Popen(command, env=env, cwd=repo, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(f"http://127.0.0.1:{port}", server, log_path)
            yield "127.0.0.1", port, server.pid
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def run(dsn: str, *, senders: int = SENDERS, repo: Path = REPO) -> dict[str, Any]:
    """One attack on a fresh server: the senders' answers and the server's RSS before, at peak, after."""
    secret = secrets.token_urlsafe(24)
    with served(dsn, secret=secret, repo=repo) as (host, port, pid):
        before = rss(pid)
        with RssSampler(pid) as sampler:
            results = asyncio.run(slow_senders(host, port, secret=f"not-{secret}", senders=senders))
            time.sleep(SETTLE_S)
        row = summarize(results, rss_before=before, rss_peak=sampler.peak, rss_after=rss(pid))
    return {**row, "repo": str(repo)}


def targets(row: dict[str, Any]) -> list[Target]:
    return [
        Target(
            f"API RSS with {row['senders']} slow senders without the secret < {RSS_TARGET_MB:g} MB",
            row["rss_peak_mb"],
            RSS_TARGET_MB,
            "below",
            "MB",
            f"peak; {fmt(row['rss_before_mb'])} MB before",
        ),
        Target(
            f"a wrong secret is answered within {ANSWER_TARGET_S:g} s, whatever the body does",
            row["answer_max_s"],
            ANSWER_TARGET_S,
            "at_most",
            "s",
            f"slowest of {row['senders']}; {row['unanswered']} unanswered",
        ),
    ]


def render(rows: list[dict[str, Any]]) -> str:
    return "\n".join(
        [
            "### Slow webhook senders without the secret",
            "",
            "`reviewloop serve --no-worker` in one process; bench/webhook_slow_senders.py opens every "
            "connection at once, each with a Merge Request Hook's headers, a wrong `X-Gitlab-Token` and "
            f"`Content-Length: {DECLARED_BYTES // 2**20} MiB`, then sends its body one of three ways in turn: "
            f"never, a byte every {TRICKLE_EVERY_S:g} s, or {STREAM_CHUNK // 1024} KiB every "
            f"{STREAM_EVERY_S * 1000:g} ms. RSS of the server process (psutil, sampled every "
            f"{RSS_SAMPLE_EVERY_S * 1000:g} ms); *after*: {SETTLE_S:g} s after the last sender. Answer time: "
            f"from the end of a sender's headers to its status line; unanswered after {ANSWER_WAIT_S:g} s "
            f"counts as {ANSWER_WAIT_S:g} s. *left open*: answered, but the connection still open "
            f"{CLOSE_WAIT_S:g} s later.",
            "",
            table(
                [
                    "server",
                    "senders",
                    "answers",
                    "unanswered (why)",
                    "left open",
                    "answer p50 / p99 / max (s)",
                    "body sent (MiB)",
                    "RSS before / peak / after (MB)",
                ],
                [
                    (
                        row.get("label", "this commit"),
                        row["senders"],
                        ", ".join(f"{n}× {s}" for s, n in sorted(row["statuses"].items())),
                        f"{row['unanswered']}"
                        + (
                            f" ({', '.join(f'{n}× {k}' for k, n in sorted(row['failures'].items()))})"
                            if row["failures"]
                            else ""
                        ),
                        row["left_open"],
                        " / ".join(fmt(row[k]) for k in ("answer_p50_s", "answer_p99_s", "answer_max_s")),
                        row["body_mib_sent"],
                        " / ".join(fmt(row[k]) for k in ("rss_before_mb", "rss_peak_mb", "rss_after_mb")),
                    )
                    for row in rows
                ],
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    from bench.database import bench_database
    from bench.report import git_commit

    parser = argparse.ArgumentParser(description="Slow webhook senders without the secret, against `serve`.")
    parser.add_argument("--senders", type=int, default=SENDERS)
    parser.add_argument(
        "--compare", type=Path, default=None, help="another checkout (e.g. an older commit) measured the same way"
    )
    parser.add_argument("--append", type=Path, default=None, help="append the section to this results file")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    checkouts = [("this commit", REPO)]
    if args.compare is not None:
        checkouts.append((f"{git_commit(args.compare)} (--compare)", args.compare.resolve()))
    rows = []
    for label, repo in checkouts:
        with bench_database() as db:  # a database each: one checkout's migrations never meet the other's
            rows.append({**run(db.dsn, senders=args.senders, repo=repo), "label": label})
            database = f"{db.server_version} ({db.server}), a scratch database dropped afterwards"
    prov = provenance(
        started=started_at,
        duration_s=time.perf_counter() - started,
        command="python -m bench.webhook_slow_senders" + (f" --compare {args.compare}" if args.compare else ""),
        repo=REPO,
        database=database,
        load_before=load_before,
    )
    heading, _, rest = render_provenance(prov).partition("\n")
    section = "\n\n".join(
        [f"{heading} · slow webhook senders alone\n{rest}", render_targets(targets(rows[0])), render(rows)]
    )
    print(section)
    if args.append is not None:
        existing = args.append.read_text(encoding="utf-8")
        args.append.write_text(existing.rstrip("\n") + "\n\n" + section + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
