"""The webhook's speed and its slow-sender protections, measured in one run, side by side (issue 40,
Build 13): `python -m bench.webhook_both [--compare OLD_CHECKOUT] [--seconds 10]`.

For each checkout, on a fresh database each: `reviewloop serve --no-worker` from that checkout, the
open-loop generator (bench.webhook_load) at 400 and 800 unique Merge Request events per second, then
400/s again with `BACKLOG` events already queued (written through the intake's own SQL function, as
deliveries would), then the 100 slow senders with a wrong secret (bench.webhook_slow_senders) against
a fresh server. Prints one Markdown section (and appends it to `--append FILE`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import webhook, webhook_slow_senders
from bench.webhook_load import PROJECT_ID, PROJECT_PATH

REPO = Path(__file__).resolve().parents[1]
RATES = (400, 800)
BACKLOG = 20_000
BACKLOG_RATE = 400
PREFILL_BATCH = 500

PREFILL_SQL = """
SELECT count(*) FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i,
LATERAL reviewloop_enqueue_review(
    'merge_request', 'backlog-' || i, NULL, %(project)s::bigint, %(path)s::text, i, md5('backlog' || i), 'open',
    '{}'::jsonb, 'mr:' || %(project)s || ':' || i, 'reviews', 'review_merge_request', 0,
    jsonb_build_object('project', %(project)s::text, 'mr_iid', i, 'head_sha', md5('backlog' || i)))
"""


def prefill(dsn: str, events: int) -> float:
    """`events` queued reviews (event row and job each) for MRs above any the load used; seconds taken."""
    started = time.perf_counter()
    first = webhook.next_free_iid(dsn) + 1_000_000
    with psycopg.connect(dsn, autocommit=True) as conn:
        # in batches: each call holds an advisory lock until its statement commits, and 20,000 at once
        # overflow Postgres' lock table
        for start in range(first, first + events, PREFILL_BATCH):
            last = min(start + PREFILL_BATCH, first + events) - 1
            conn.execute(PREFILL_SQL, {"first": start, "last": last, "project": PROJECT_ID, "path": PROJECT_PATH})
        conn.execute("ANALYZE webhook_events")
        conn.execute("ANALYZE procrastinate_jobs")
    return time.perf_counter() - started


def load_rows(dsn: str, repo: Path, seconds: float) -> list[dict[str, Any]]:
    secret = secrets.token_urlsafe(24)
    rows = []
    settings = {"REVIEWLOOP_GITLAB_PROJECTS": ""}
    with webhook_slow_senders.served(dsn, secret=secret, repo=repo, settings=settings) as (host, port, pid):
        at = functools.partial(
            webhook.measure_rate,
            dsn,
            base_url=f"http://{host}:{port}",
            server_pid=pid,
            postmaster=webhook.postmaster_pid(dsn),
            seconds=seconds,
            secret=secret,
        )
        for rate in RATES:
            rows.append({**at(rate=rate), "queued_before": 0})
        filled_s = prefill(dsn, BACKLOG)
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'").fetchone()
        queued = int(row[0]) if row else 0
        rows.append({**at(rate=BACKLOG_RATE), "queued_before": queued})
        rows[-1]["prefill_s"] = filled_s
    return rows


def render(results: list[dict[str, Any]]) -> str:
    lines = [
        "| checkout | rate/s | queued before | sent | 202 | 503 | sustained/s | p50 ms | p99 ms | max ms "
        "| server CPU ms/event | Postgres CPU ms/event | load generator CPU ms/event | machine busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for r in result["load"]:
            statuses = r.get("statuses", {})
            lines.append(
                f"| {result['label']} | {r['rate']:.0f} | {r['queued_before']:,} | {r['sent']:,} | {r['accepted']:,} "
                f"| {statuses.get('503', 0):,} | {r['sustained_per_s']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
                f"| {r['max_ms']:.0f} | {r['server_cpu_ms_per_event']:.2f} | {r['postgres_cpu_ms_per_event']:.2f} "
                f"| {r['load_generator_cpu_ms_per_event']:.2f} | {r['machine_busy_share']:.2f} |"
            )
    lines += [
        "",
        "| checkout | slow senders | answered 401 | unanswered | left open | slowest answer s | RSS before MB "
        "| RSS peak MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        s = result["slow"]
        lines.append(
            f"| {result['label']} | {s['senders']} | {s['statuses'].get('401', 0)} | {s['unanswered']} "
            f"| {s['left_open']} | {s['answer_max_s']:.2f} | {s['rss_before_mb']:.0f} | {s['rss_peak_mb']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.database import bench_database
    from bench.report import git_commit

    parser = argparse.ArgumentParser(description="Webhook load and slow senders, side by side.")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout measured the same way")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--append", type=Path, default=None)
    args = parser.parse_args(argv)
    checkouts = [(f"{git_commit(REPO)} (this)", REPO)]
    if args.compare is not None:
        checkouts.append((f"{git_commit(args.compare)}", args.compare.resolve()))
    started = datetime.now(UTC)
    load_before = os.getloadavg()
    results = []
    for label, repo in checkouts:
        with bench_database() as db:
            load = load_rows(db.dsn, repo, args.seconds)
        with bench_database() as db:
            slow = webhook_slow_senders.run(db.dsn, repo=repo)
        results.append({"label": label, "load": load, "slow": slow})
        print(json.dumps(results[-1], default=str), file=sys.stderr)
    text = (
        f"### {started:%Y-%m-%d %H:%M} UTC · webhook load and slow senders, one run\n\n"
        f"- Command: `python -m bench.webhook_both{' --compare ' + str(args.compare) if args.compare else ''}"
        f" --seconds {args.seconds:g}`; load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}\n\n"
        + render(results)
        + "\n"
    )
    print(text)
    if args.append is not None:
        with args.append.open("a", encoding="utf-8") as out:
            out.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
