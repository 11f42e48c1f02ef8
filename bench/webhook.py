"""The webhook path under load: `reviewloop serve --no-worker` in one process, the load generator
(`bench.webhook_load`) in another, both on loopback, the database wherever the benchmark's is.

No worker runs, so the queue only fills: what is measured is GitLab's side of the contract (time
to 202) and durability. After each rate, every 202 must have its `webhook_events` row (status
queued) and its `procrastinate_jobs` row, counted in the database.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.webhook_load import PROJECT_ID, SECRET_ENV

RATES = (50, 200, 400)  # below, at and twice the target rate: where the knee is
# the same API while another process reviews (what `serve` runs: api/worker_process.py)
RATES_BESIDE_REVIEW = (50, 200)
REVIEW_WARMUP_S = 5.0
SECONDS = 10.0
# Runs per rate. One stall of ~100 ms (a checkpoint, another process) in a 10 s run is the p99 of
# 2,000 events; the median of three runs says what the path does, and every run's p99 is shown.
REPEATS = 3
CONNECTIONS = 64
START_TIMEOUT_S = 90
LOAD_GRACE_S = 120  # the generator's requests give up 30 s after they were due; this bounds the process
SERVE_LOG_LEVEL = "info"  # what a deployment runs with: every accepted webhook writes one log line
SERVER_COMMAND = ("-c", "from api.cli import main; main()", "serve", "--no-worker")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(base_url: str, server: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"reviewloop serve exited with {server.returncode}:\n{tail}")
        try:
            if httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"reviewloop serve was not ready within {START_TIMEOUT_S} s")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    # fields after the command name, which may itself hold spaces and parentheses
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def postmaster_pid(dsn: str) -> int | None:
    """The local Postgres server's postmaster (the parent of our backend), or None when it is remote."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        # read while the backend lives: it exits when the connection closes (this read came after the
        # close until 2026-11-29, so every "Postgres CPU" column of the webhook benches since was empty)
        try:
            return int(_stat_fields(int(row[0]))[1]) if row else None
        except OSError:
            return None


def postgres_cpu_s(postmaster: int) -> float:
    """CPU seconds of a local Postgres server: the postmaster, its exited children, its live ones."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = _stat_fields(postmaster)
    total = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = _stat_fields(int(entry.name))
        except OSError:
            continue  # exited while we looked
        if int(child[1]) == postmaster:
            total += int(child[11]) + int(child[12])
    return total / tick


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU ticks of the whole machine since boot (/proc/stat); idle and iowait are not busy."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return float(sum(ticks) - ticks[3] - ticks[4]), float(sum(ticks))


def next_free_iid(dsn: str) -> int:
    """An MR iid above every one the benchmark project has used: each run reviews only new MRs.

    Re-using iids of an earlier run on the same database would measure a different path (each
    delivery superseding that run's pending job, no worker having drained the queue).
    """
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT coalesce(max(mr_iid), 0) + 1 FROM webhook_events WHERE project_id = %s", (PROJECT_ID,)
        ).fetchone()
    return int(row[0]) if row else 1


def durable_counts(dsn: str, tag: str, accepted_keys: list[str]) -> dict[str, int]:
    """Rows of this run: every event stored, and of the events answered 202, how many have their
    row (status queued) and their job."""
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM webhook_events WHERE idempotency_key LIKE %s", (f"{tag}-%",)
        ).fetchone()
        durable = conn.execute(
            """
            SELECT count(*) FILTER (WHERE e.status = 'queued'), count(j.id)
              FROM webhook_events e LEFT JOIN procrastinate_jobs j ON j.id = e.job_id
             WHERE e.idempotency_key = ANY(%s)
            """,
            (accepted_keys,),
        ).fetchone()
    assert stored is not None and durable is not None
    return {"events_stored": int(stored[0]), "events_queued": int(durable[0]), "jobs_stored": int(durable[1])}


def measure_rate(
    dsn: str, *, base_url: str, server_pid: int, postmaster: int | None, rate: int, seconds: float, secret: str
) -> dict[str, Any]:
    """One open-loop run of the load generator at `rate`, with CPU shares and durability counted."""
    tag = f"bench-{uuid.uuid4().hex[:8]}"
    first_iid = next_free_iid(dsn)
    server_cpu, (busy, total) = process_cpu_s(server_pid), machine_cpu()
    load_cpu = children_cpu_s()
    pg_cpu = postgres_cpu_s(postmaster) if postmaster else float("nan")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.webhook_load",
            f"{base_url}/webhooks/gitlab",
            str(rate),
            str(seconds),
            tag,
            "--connections",
            str(CONNECTIONS),
            "--first-iid",
            str(first_iid),
        ],
        env={**os.environ, SECRET_ENV: secret},
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + LOAD_GRACE_S,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    busy_after, total_after = machine_cpu()
    # CPU figures hold when other work shares the cores and the wall-clock latency does not
    per_event = 1000 / result["sent"]
    result["server_cpu_ms_per_event"] = (process_cpu_s(server_pid) - server_cpu) * per_event
    result["postgres_cpu_ms_per_event"] = (
        (postgres_cpu_s(postmaster) - pg_cpu) * per_event if postmaster else float("nan")
    )
    result["load_generator_cpu_ms_per_event"] = (children_cpu_s() - load_cpu) * per_event
    result["machine_busy_share"] = (busy_after - busy) / max(1.0, total_after - total)
    keys = result.pop("accepted_keys")
    result.update(durable_counts(dsn, tag, keys))
    # durable: every event answered 202 has its row, queued, and its job
    result["all_durable"] = result["accepted"] == result["events_queued"] == result["jobs_stored"]
    return result


SUMMED = ("sent", "accepted", "events_stored", "events_queued", "jobs_stored")


def repeated(measure: Callable[..., dict[str, Any]], rate: int, repeats: int) -> dict[str, Any]:
    """`repeats` runs at one rate as one row: medians of the rates, latencies and CPU shares, the worst
    max, the counts summed (every 202 of every run must be durable), and each run's p99."""
    runs = [measure(rate=rate) for _ in range(repeats)]
    row: dict[str, Any] = {key: statistics.median(r[key] for r in runs) for key in MEDIAN_KEYS}
    row |= {key: sum(r[key] for r in runs) for key in SUMMED}
    row["rate"] = runs[0]["rate"]
    row["max_ms"] = max(r["max_ms"] for r in runs)
    row["all_durable"] = all(r["all_durable"] for r in runs)
    row["p99_runs_ms"] = [r["p99_ms"] for r in runs]
    row["runs"] = repeats
    row["seconds"] = runs[0]["seconds"]
    return row


MEDIAN_KEYS = (
    "sustained_per_s", "p50_ms", "p99_ms", "service_p50_ms", "service_p99_ms", "server_cpu_ms_per_event",
    "postgres_cpu_ms_per_event", "load_generator_cpu_ms_per_event", "machine_busy_share",
)  # fmt: skip


@contextlib.contextmanager
def review_beside() -> Iterator[None]:
    """A process reviewing a 10,000-line MR over and over, as `serve`'s worker child does under load."""
    reviewer = subprocess.Popen(
        [sys.executable, "-m", "bench.review_loop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(REVIEW_WARMUP_S)  # past its imports: reviewing when the load starts
        if reviewer.poll() is not None:
            raise RuntimeError(f"the review process exited with {reviewer.returncode}")
        yield
    finally:
        reviewer.kill()
        reviewer.wait()  # after the measurements: its CPU is not counted as the load generator's


def run(
    dsn: str,
    *,
    rates: tuple[int, ...] = RATES,
    seconds: float = SECONDS,
    rates_beside_review: tuple[int, ...] = RATES_BESIDE_REVIEW,
    repeats: int = REPEATS,
) -> list[dict[str, Any]]:
    secret = secrets.token_urlsafe(24)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "REVIEWLOOP_DATABASE_URL": dsn,
        "REVIEWLOOP_WEBHOOK_SECRET": secret,
        "REVIEWLOOP_GITLAB_PROJECTS": "",
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="reviewloop-bench-serve-") as tmp:
        log_path = Path(tmp) / "serve.log"
        env["REVIEWLOOP_DATA_DIR"] = tmp
        command = [sys.executable, *SERVER_COMMAND, "--port", str(port), "--log-level", SERVE_LOG_LEVEL]
        with open(log_path, "wb") as log:
            server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(base_url, server, log_path)
            at = functools.partial(
                measure_rate, dsn, base_url=base_url, server_pid=server.pid, postmaster=postmaster_pid(dsn),
                seconds=seconds, secret=secret,
            )  # fmt: skip
            rows += [{**repeated(at, rate, repeats), "review_beside": False} for rate in rates]
            if rates_beside_review:
                with review_beside():
                    rows += [{**repeated(at, rate, repeats), "review_beside": True} for rate in rates_beside_review]
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return rows
