"""`make bench`: every benchmark, judged against the targets, appended to bench/RESULTS.md.

    python -m bench.run             # the full run (about 8 minutes on 2 cores, then the base model's
                                    # reviews: about 10 more), appends its section
    python -m bench.run --quick     # small sizes, one repeat, no base model: a smoke test, printed, not appended

Postgres comes from `bench.database` (the server the environment names, else an embedded one in
a temporary directory). Figures are medians of REPEATS runs; ratios compare runs of the same
invocation. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from bench import agreement as agreement_bench
from bench import base_model as base_model_bench
from bench import dataset_build, noise, scaling, security_suite, webhook
from bench import diff_parse as diff_parse_bench
from bench import pipeline as pipeline_bench
from bench import spans as spans_bench
from bench import webhook_slow_senders as slow_senders_bench
from bench.database import bench_database
from bench.report import Target, fmt, provenance, render_provenance, render_targets, table
from bench.results_file import record_run

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "RESULTS.md"
SPANS = 20_000
SPAN_REPEATS = 3
CONCURRENCY_DELAY_S = 0.5
TARGET_LINES = 10_000
MEMORY_LINES = 50_000
WEBHOOK_TARGET_RATE = 200

T = TypeVar("T")


@dataclass
class Config:
    sizes: tuple[tuple[int, int], ...] = pipeline_bench.SIZES
    repeats: int = scaling.REPEATS
    findings: int = dataset_build.FINDINGS
    spans: int = SPANS
    webhook_rates: tuple[int, ...] = webhook.RATES
    webhook_rates_beside_review: tuple[int, ...] = webhook.RATES_BESIDE_REVIEW
    webhook_seconds: float = webhook.SECONDS
    webhook_repeats: int = webhook.REPEATS
    noise_packages: tuple[str, ...] = noise.PACKAGES
    agreement_ns: tuple[int, ...] = agreement_bench.NS
    agreement_ks: tuple[int, ...] = agreement_bench.KS
    agreement_seeds: int = agreement_bench.SEEDS
    base_model_ns: tuple[int, ...] = base_model_bench.NS  # empty: the base model is not loaded
    base_model_repeats: int = base_model_bench.REPEATS
    base_model_path: Path | None = None  # None: `reviewloop dev base-model`'s directory, built if missing


QUICK = Config(
    sizes=((100, 5), (1_000, 20)),
    repeats=1,
    findings=5_000,
    spans=2_000,
    webhook_rates=(50,),
    webhook_rates_beside_review=(),
    webhook_seconds=2.0,
    webhook_repeats=1,
    noise_packages=noise.PACKAGES[:4],
    agreement_ns=(1, 3),
    agreement_ks=(1, 2),
    agreement_seeds=1,
    base_model_ns=(),
)


@dataclass
class Results:
    no_model: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    with_model: list[dict[str, Any]] = field(default_factory=list)
    concurrency: dict[str, Any] = field(default_factory=dict)
    spans: dict[str, Any] = field(default_factory=dict)
    datasets: dict[str, Any] = field(default_factory=dict)
    webhook: list[dict[str, Any]] = field(default_factory=list)
    slow_senders: dict[str, Any] = field(default_factory=dict)
    noise: noise.NoiseResult | None = None
    security_suite: list[security_suite.ClassScore] = field(default_factory=list)
    security_suite_s: float = 0.0
    agreement: list[dict[str, Any]] = field(default_factory=list)
    agreement_seeds: int = agreement_bench.SEEDS
    base_model: base_model_bench.BaseModelResult | None = None
    diff_parse: dict[str, Any] = field(default_factory=dict)


def progress(message: str) -> None:
    print(f"[bench {datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def step(name: str, fn: Callable[[], T]) -> T:
    progress(f"{name} ...")
    started = time.perf_counter()
    result = fn()
    progress(f"{name} done in {time.perf_counter() - started:.0f} s")
    return result


def span_figures(dsn: str, n: int, repeats: int) -> dict[str, Any]:
    runs = [spans_bench.run(dsn, n) for _ in range(repeats)]
    ingest = [float(r["span_ingest_spans_per_s"]) for r in runs]
    cpu = [float(r["span_ingest_client_cpu_us_per_span"]) for r in runs if "span_ingest_client_cpu_us_per_span" in r]
    end_to_end = [float(r["span_end_to_end_spans_per_s"]) for r in runs]
    return {
        "spans": n,
        "repeats": repeats,
        "ingest_per_s": statistics.median(ingest),
        "ingest_runs": ingest,
        "ingest_cpu_us_per_span": statistics.median(cpu) if cpu else float("nan"),
        "end_to_end_per_s": statistics.median(end_to_end),
        "end_to_end_runs": end_to_end,
    }


def collect(dsn: str, config: Config) -> Results:
    r = Results()
    r.memory = step("peak memory and a first cold run (a process per size)", lambda: scaling.memory(config.sizes))
    r.no_model = step(
        "pipeline, no model",
        lambda: scaling.no_model(config.repeats, config.sizes, fresh_process=r.memory),
    )
    r.with_model = step(
        f"pipeline, model answering after {scaling.MODEL_DELAY_S} s",
        lambda: scaling.with_model(scaling.MODEL_DELAY_S, config.repeats, config.sizes),
    )
    r.concurrency = step("reviewer concurrency", lambda: pipeline_bench.concurrency(CONCURRENCY_DELAY_S))
    r.spans = step("span ingestion", lambda: span_figures(dsn, config.spans, config.repeats))
    r.datasets = step(
        f"dataset build at {config.findings:,} findings",
        lambda: dataset_build.run(dsn, findings=config.findings, repeats=config.repeats),
    )
    r.agreement = step(
        "agreement across diverse strategies",
        lambda: agreement_bench.run(ns=config.agreement_ns, ks=config.agreement_ks, seeds=config.agreement_seeds),
    )
    r.agreement_seeds = config.agreement_seeds
    r.webhook = step(
        "webhook load",
        lambda: webhook.run(
            dsn,
            rates=config.webhook_rates,
            seconds=config.webhook_seconds,
            rates_beside_review=config.webhook_rates_beside_review,
            repeats=config.webhook_repeats,
        ),
    )
    r.slow_senders = step(
        f"{slow_senders_bench.SENDERS} slow webhook senders without the secret",
        lambda: slow_senders_bench.run(dsn),
    )
    r.diff_parse = step("diff parse at 50,000 changed lines", lambda: diff_parse_bench.run())
    r.noise = step(
        f"noise on released code ({len(config.noise_packages)} packages)",
        lambda: noise.run(config.noise_packages, progress=False),
    )
    started = time.perf_counter()
    r.security_suite = step("own labeled security suite (Python)", lambda: security_suite.score(security_suite.cases()))
    r.security_suite_s = time.perf_counter() - started
    # Last: loading the model sets torch's threads for the whole process, and would share the
    # machine with the timings above.
    if config.base_model_ns:
        r.base_model = step(
            "the base model reviewing the demo merge request",
            lambda: base_model_bench.run(
                ns=config.base_model_ns,
                repeats=config.base_model_repeats,
                model_path=config.base_model_path,
                progress=progress,
            ),
        )
    else:
        r.base_model = base_model_bench.BaseModelResult(skipped="`--quick` does not load the base model")
    return r


# --- targets and tables ----------------------------------------------------------------------------


def _at(rows: list[dict[str, Any]], lines: int) -> dict[str, Any] | None:
    return next((row for row in rows if row["changed_lines"] == lines), None)


def targets(r: Results) -> list[Target]:
    nan = float("nan")
    at_target = _at(r.no_model, TARGET_LINES)
    cold_exp = scaling.growth_exponent([(row["changed_lines"], row["cold_s"]) for row in r.no_model])
    memory_row = _at(r.memory, MEMORY_LINES)
    hook = next((row for row in r.webhook if row["rate"] == WEBHOOK_TARGET_RATE and not row.get("review_beside")), None)
    lost = sum(row["accepted"] - min(row["events_queued"], row["jobs_stored"]) for row in r.webhook)
    return [
        Target(
            f"pipeline without model at {TARGET_LINES:,} changed lines < 2 s",
            at_target["cold_s"] if at_target else nan,
            2.0,
            "below",
            "s",
            f"analyzers run; with their answers cached {fmt(at_target['cached_s'])} s" if at_target else "",
        ),
        Target("growth no faster than linear (exponent ≤ 1)", cold_exp, 1.0, "at_most", "", "no model, 1k→50k lines"),
        Target(
            f"diff parse, 50,000 changed lines in {diff_parse_bench.FILES} files < {diff_parse_bench.TARGET_CPU_S:g} s",
            r.diff_parse.get("cpu_s", nan),
            diff_parse_bench.TARGET_CPU_S,
            "below",
            "s",
            f"wall {fmt(r.diff_parse['wall_s'])} s, median of {r.diff_parse['repeats']}" if r.diff_parse else "",
        ),
        Target(
            f"peak memory at {MEMORY_LINES:,} lines < 1 GiB",
            memory_row["peak_rss_mib"] if memory_row else nan,
            1024.0,
            "below",
            "MiB",
            "peak RSS of the whole reviewing process" if memory_row else "",
        ),
        Target(
            "span ingestion ≥ 20,000 spans/s",
            r.spans.get("ingest_per_s", nan),
            20_000.0,
            "at_least",
            "spans/s",
            "through PostgresSpanExporter",
        ),
        Target(
            f"webhook p99 time to 202 < 50 ms at {WEBHOOK_TARGET_RATE} events/s",
            hook["p99_ms"] if hook else nan,
            50.0,
            "below",
            "ms",
            f"sustained {fmt(hook['sustained_per_s'])} events/s" if hook else "",
        ),
        Target(
            "every webhook answered 202 is durable (event row queued + job)",
            float(lost) if r.webhook else nan,
            0.0,
            "at_most",
            "lost",
            f"{sum(row['accepted'] for row in r.webhook):,} answered 202" if r.webhook else "",
        ),
        *(slow_senders_bench.targets(r.slow_senders) if r.slow_senders else []),
        Target(
            f"posted findings on released code ≤ {noise.TARGET_PER_1000:g} per 1,000 changed lines",
            r.noise.per_1000(len(r.noise.posted)) if r.noise else nan,
            noise.TARGET_PER_1000,
            "at_most",
            "per 1k lines",
            f"{len(r.noise.posted)} posted over {r.noise.total_lines:,} lines, "
            f"{len(r.noise.high_or_critical)} high or critical"
            if r.noise
            else "",
        ),
        Target(
            f"own security suite: every Python class TPR − FPR ≥ {security_suite.MIN_SCORE:g}",
            min((s.score for s in r.security_suite), default=nan),
            security_suite.MIN_SCORE,
            "at_least",
            "worst class",
            ", ".join(f"{s.cls} {s.score:+.2f}" for s in r.security_suite if s.score < 1.0),
        ),
        Target(
            f"own security suite: every Python class FPR ≤ {security_suite.MAX_FPR:g}",
            max((s.fpr for s in r.security_suite), default=nan),
            security_suite.MAX_FPR,
            "at_most",
            "worst class",
            "",
        ),
    ]


def render_results(r: Results) -> str:
    parts: list[str] = []
    cold_exp = scaling.growth_exponent([(row["changed_lines"], row["cold_s"]) for row in r.no_model])
    cached_exp = scaling.growth_exponent([(row["changed_lines"], row["cached_s"]) for row in r.no_model])
    parts += [
        "### Pipeline cost against merge request size, no model",
        "",
        "`run_review` on synthetic MRs (bench/synthetic.py), no database. *cold*: text no analyzer has "
        "seen (a new seed per run; the first run of each size is the fresh process of the memory table); "
        "*cached*: the same diff again right after, so bandit/ruff answers come from their caches and the "
        "figure is the pipeline's own work. The rule strategy's step budget (at most 20 files per reviewer) "
        "caps the analyzer work; the files past it are named as not reviewed.",
        "",
        table(
            [
                "changed lines",
                "files",
                "cold median (s)",
                "cold runs (s)",
                "cold CPU (s)",
                "cached median (s)",
                "cold / cached",
            ],
            [
                (
                    f"{row['changed_lines']:,}",
                    row["files"],
                    row["cold_s"],
                    ", ".join(fmt(x) for x in row["cold_runs_s"]),
                    row["cold_cpu_s"],
                    row["cached_s"],
                    f"{row['cold_s'] / row['cached_s']:.1f}×",
                )
                for row in r.no_model
            ],
        ),
        "",
        f"Growth exponent (log time over log lines, 1k and up): cold {fmt(cold_exp)}, cached {fmt(cached_exp)}. "
        "Cold CPU is the median CPU time of the process and its analyzer subprocesses: on an idle 2-core "
        "machine the wall time cannot go below half of it.",
        "",
        "### Peak memory of one review (a fresh process per size)",
        "",
        table(
            ["changed lines", "peak RSS (MiB)", "RSS before review (MiB)", "RSS delta (MiB)", "Python heap peak (MiB)"],
            [
                (
                    f"{row['changed_lines']:,}",
                    row["peak_rss_mib"],
                    row["rss_before_mib"],
                    row["rss_delta_mib"],
                    row["python_heap_peak_mib"],
                )
                for row in r.memory
            ],
        ),
        "",
        "RSS from `ru_maxrss` (everything the process held, imports included); the delta is the review's "
        "own growth; the heap peak is tracemalloc's (Python objects only). Analyzer subprocesses are not counted.",
    ]
    model_exp = scaling.growth_exponent([(row["changed_lines"], row["wall_s"]) for row in r.with_model])
    parts += [
        "",
        f"### Pipeline with a model answering every call after {scaling.MODEL_DELAY_S} s",
        "",
        "bench/fake_llm_server.py on loopback through the real OpenAI client: a four-reviewer plan "
        f"(step budget {scaling.MODEL_STEP_BUDGET}; the analyzers run first on the files the budget reaches, "
        f"then the model asks for the analyzer on its first {scaling.MODEL_ANALYZER_STEPS} files — already "
        "analyzed, a step each — and finishes; one execution), every surviving finding judged. The critical "
        "path is the model time no implementation can avoid (strategy, one reviewer's steps, judgments in "
        f"rounds of {scaling.MAX_PARALLEL_JUDGMENTS}).",
        "",
        table(
            ["changed lines", "wall median (s)", "model calls", "model critical path (s)", "wall − critical path (s)"],
            [
                (
                    f"{row['changed_lines']:,}",
                    row["wall_s"],
                    f"{row['model_calls']:.0f}",
                    row["model_critical_path_s"],
                    row["overhead_s"],
                )
                for row in r.with_model
            ],
        ),
        "",
        f"Growth exponent of the wall time: {fmt(model_exp)}.",
    ]
    c = r.concurrency
    if c:
        parts += [
            "",
            f"### Reviewers run concurrently (model delay {c['delay_s']} s)",
            "",
            table(
                ["reviewers", "model calls", "max at once", "reviewer model stage (s)", "stage / delay", "wall (s)"],
                [
                    (
                        c["reviewers"],
                        c["model_calls"],
                        c["max_concurrent_reviewers"],
                        c["reviewer_model_stage_s"],
                        f"{c['reviewer_model_stage_over_delay']:.2f}×",
                        c["wall_s"],
                    )
                ],
            ),
            "",
            f"Four reviewers that each wait one {c['delay_s']} s model call take "
            f"{c['reviewer_model_stage_over_delay']:.2f} delays together, not 4.",
        ]
    s = r.spans
    if s:
        parts += [
            "",
            f"### Span ingestion into Postgres ({s['spans']:,} spans, {s['repeats']} runs)",
            "",
            table(
                ["path", "median (spans/s)", "runs"],
                [
                    ("exporter alone (PostgresSpanExporter)", s["ingest_per_s"], _runs(s["ingest_runs"])),
                    (
                        "exporter's own CPU per span (µs; the rate one core could sustain)",
                        s["ingest_cpu_us_per_span"],
                        f"{fmt(1e6 / s['ingest_cpu_us_per_span'])} spans/s per core",
                    ),
                    (
                        "end to end (SDK spans → batch processor → rows)",
                        s["end_to_end_per_s"],
                        _runs(s["end_to_end_runs"]),
                    ),
                ],
            ),
        ]
    d = r.datasets
    if d:
        parts += [
            "",
            f"### Dataset build at {d['findings']:,} findings",
            "",
            f"{d['reviews']:,} reviews with snapshots (one shadow strategy per {dataset_build.SHADOW_EVERY} posted), "
            f"{d['findings']:,} findings, {d['feedback']:,} votes, written by COPY in {fmt(d['populate_s'])} s "
            f"({fmt(d['copy_rows_per_s'])} rows/s). Then `learning.datasets.build_datasets` (all four kinds):",
            "",
            table(
                ["build median (s)", "runs (s)", "findings/s", "reviews/s", "dataset rows written"],
                [(d["build_s"], _runs(d["build_runs_s"]), d["findings_per_s"], d["reviews_per_s"], d["dataset_rows"])],
            ),
        ]
    if r.webhook:
        parts += [
            "",
            "### Webhook path on loopback",
            "",
            f"`reviewloop serve --no-worker` (log level {webhook.SERVE_LOG_LEVEL}) in one process; "
            f"bench/webhook_load.py in another, open loop, at most {webhook.CONNECTIONS} connections, "
            f"one Merge Request Hook per new MR, {r.webhook[0]['seconds']:g} s per run. Each row is "
            f"{r.webhook[0]['runs']} run(s): sustained rate, p50, p99 and CPU are their medians, max the worst, counts "
            "summed. "
            "Latency counts from when a request was due (waiting for a connection included); a request "
            "unanswered 30 s after it was due counts as not answered. *events stored / queued / jobs*: rows "
            "of the run in `webhook_events`, and of the events answered 202 those queued with their "
            "`procrastinate_jobs` row. CPU per event: each process's CPU time over the run divided by the "
            "events sent (Postgres: the local server's postmaster and backends); their sum against the "
            "2 cores says what rate this machine could carry with nothing else on it. *review beside*: "
            "another process reviews a 10,000-line MR over and over during the run, as `reviewloop serve`'s "
            "worker (a child process) does when reviews are queued.",
            "",
            table(
                [
                    "rate (events/s)",
                    "review beside",
                    "sent",
                    "202",
                    "sustained (events/s)",
                    "p50 (ms)",
                    "p99 (ms)",
                    "p99 of each run (ms)",
                    "max (ms)",
                    "events stored / queued / jobs",
                    "all durable",
                    "CPU per event: API / Postgres / load generator (ms)",
                    "machine CPU busy",
                ],
                [
                    (
                        f"{row['rate']:.0f}",
                        "yes" if row.get("review_beside") else "no",
                        row["sent"],
                        row["accepted"],
                        row["sustained_per_s"],
                        row["p50_ms"],
                        row["p99_ms"],
                        _runs(row["p99_runs_ms"]),
                        row["max_ms"],
                        f"{row['events_stored']} / {row['events_queued']} / {row['jobs_stored']}",
                        "yes" if row["all_durable"] else "**no**",
                        " / ".join(
                            fmt(row[k])
                            for k in (
                                "server_cpu_ms_per_event",
                                "postgres_cpu_ms_per_event",
                                "load_generator_cpu_ms_per_event",
                            )
                        ),
                        f"{row['machine_busy_share']:.0%}",
                    )
                    for row in r.webhook
                ],
            ),
        ]
    if r.slow_senders:
        parts += ["", slow_senders_bench.render([r.slow_senders])]
    if r.noise is not None:
        parts += ["", noise.render(r.noise)]
    if r.security_suite:
        table_lines = security_suite.render(r.security_suite, seconds=r.security_suite_s, commit="", machine="")
        parts += ["", "### Own security suite", "", *table_lines.splitlines()[2:]]
    if r.agreement:
        parts += ["", agreement_bench.render(r.agreement, seeds=r.agreement_seeds)]
    if r.base_model is not None:
        parts += ["", base_model_bench.render(r.base_model)]
    return "\n".join(parts)


def _runs(values: list[float]) -> str:
    return ", ".join(fmt(v) for v in values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run every benchmark and append the results.")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, one repeat, no base model; printed, not appended"
    )
    parser.add_argument(
        "--results", type=Path, default=None, help=f"RESULTS.md to rebuild, beside its HISTORY.md (default {RESULTS})"
    )
    parser.add_argument(
        "--base-model", type=Path, default=None, help="the base model's directory (default: build it once)"
    )
    args = parser.parse_args(argv)
    config = replace(QUICK if args.quick else Config(), base_model_path=args.base_model)
    results_path = args.results or (None if args.quick else RESULTS)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    load_before = os.getloadavg()
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    with bench_database() as db:
        progress(f"Postgres {db.server_version}: {db.server}")
        results = collect(db.dsn, config)
        database = f"{db.server_version} ({db.server}), a scratch database dropped afterwards"
    prov = provenance(
        started=started_at,
        duration_s=time.perf_counter() - started,
        command="make bench" + (" (python -m bench.run --quick)" if args.quick else " (python -m bench.run)"),
        repo=REPO,
        database=database,
        load_before=load_before,
    )
    section = "\n\n".join(
        [render_provenance(prov), "### Targets", render_targets(targets(results)), render_results(results)]
    )
    print(section)
    if results_path is not None:
        judged = targets(results)
        met = sum(1 for t in judged if t.met)
        missed = ", ".join(t.name for t in judged if not t.met) or "none"
        record_run(
            name="make-bench",
            title="make bench: pipeline, diff, spans, datasets, webhook, noise, agreement, base model",
            headline=f"{met} of {len(judged)} targets met; missed: {missed}",
            section=section,
            bench_dir=results_path.parent,
        )
        progress(f"recorded in {results_path} (history: {results_path.parent / 'HISTORY.md'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
