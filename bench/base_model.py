"""The real base model reviewing in this process: tokens, model calls and wall time per review, N = 1
against N = 3 diverse strategies.

The other benchmarks answer with a fake server; this one loads SmolLM2-135M-Instruct (`reviewloop dev
base-model`) into `TransformersLLM`, xgrammar-constrained like production, and runs `run_review` on
the demo merge request (agent/demo) as a replay, with `[agreement] strategies = N` in its files.
Tokens and calls are read from the GenAI spans every model call already writes (`agent.llm.spans`,
`gen_ai.usage.*`, the tokenizer's own counts), collected in memory through the backend's `tracer`
seam; nothing is re-tokenised. A span's latency includes the wait for the backend's lock (one
generation at a time), so their sum exceeds the wall time when reviewers queue for the model.

    python -m bench.base_model                 # N = 1 and 3 on the demo MR, one run each
    python -m bench.base_model --repeats 3     # medians of three
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from agent.context import ReviewRequest
from agent.llm import spans as genai
from bench.report import fmt, table

NS = (1, 3)
REPEATS = 1  # a review takes minutes on 2 shared cores; medians when more are asked for
# Reviewers take no step after this (Runtime.review_deadline_s), so a slow machine ends the bench;
# the earlier N = 3 run took about 6 minutes at load 2, so this leaves it room.
REVIEW_DEADLINE_S = 600.0
DEADLINE_NOTE = "review deadline reached"
MERGE_REQUEST = "demo"


@dataclass(frozen=True)
class ModelCall:
    """One model call as its span recorded it."""

    purpose: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    failed: bool


@dataclass(frozen=True)
class ReviewRun:
    merge_request: str
    n: int
    wall_s: float
    calls: list[ModelCall]
    executions: int
    posted: int  # findings the verifier judged REAL
    cut_by_deadline: int  # reviewers that stopped at the deadline, over all executions
    load_1min: float


@dataclass
class BaseModelResult:
    """The rows, or why there are none (`skipped`: one line)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    failures: list[str] = field(default_factory=list)  # reviews that raised, one line each
    model: str = ""
    cpu_threads: int | None = None
    max_output_tokens: int = 0


def calls_from_spans(spans: Iterable[Any]) -> list[ModelCall]:
    """The model calls among finished spans: those with a GenAI operation name."""
    out: list[ModelCall] = []
    for span in spans:
        attrs = dict(span.attributes or {})
        if attrs.get(genai.OPERATION_NAME) != "chat":
            continue
        out.append(
            ModelCall(
                purpose=str(attrs.get(genai.PURPOSE, "")),
                input_tokens=int(_number(attrs.get(genai.USAGE_INPUT_TOKENS))),
                output_tokens=int(_number(attrs.get(genai.USAGE_OUTPUT_TOKENS))),
                latency_s=_number(attrs.get(genai.LATENCY_MS)) / 1000.0,
                failed=genai.ERROR_TYPE in attrs,
            )
        )
    return out


def _number(value: object) -> float:
    """A numeric span attribute; 0 when the call ended before it was known (a failed call)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def purpose_group(purpose: str) -> str:
    """ "reviewer.security" → "reviewer": the stage a call belongs to."""
    return purpose.split(".", 1)[0] or "other"


def summarize(runs: Sequence[ReviewRun]) -> list[dict[str, Any]]:
    """One row per (merge request, N), in first-seen order: medians over the runs, plus each run's wall."""
    groups: dict[tuple[str, int], list[ReviewRun]] = {}
    for r in runs:
        groups.setdefault((r.merge_request, r.n), []).append(r)
    rows: list[dict[str, Any]] = []
    for (mr, n), group in groups.items():
        stages = sorted({purpose_group(c.purpose) for r in group for c in r.calls})
        # A stage a run did not call counts 0 for that run.
        by_stage = {s: [sum(purpose_group(c.purpose) == s for c in r.calls) for r in group] for s in stages}
        rows.append(
            {
                "merge_request": mr,
                "n": n,
                "runs": len(group),
                "executions": statistics.median(r.executions for r in group),
                "calls": statistics.median(len(r.calls) for r in group),
                "calls_by_stage": {stage: statistics.median(counts) for stage, counts in by_stage.items()},
                "failed_calls": statistics.median(sum(c.failed for c in r.calls) for r in group),
                "input_tokens": statistics.median(sum(c.input_tokens for c in r.calls) for r in group),
                "output_tokens": statistics.median(sum(c.output_tokens for c in r.calls) for r in group),
                "model_s": statistics.median(sum(c.latency_s for c in r.calls) for r in group),
                "wall_s": statistics.median(r.wall_s for r in group),
                "wall_runs_s": [r.wall_s for r in group],
                "posted": statistics.median(r.posted for r in group),
                "cut_by_deadline": max(r.cut_by_deadline for r in group),
                "load_1min": statistics.median(r.load_1min for r in group),
            }
        )
    return rows


def render(result: BaseModelResult) -> str:
    heading = "### The base model in process (SmolLM2-135M-Instruct, CPU)"
    if result.skipped is not None:
        return f"{heading}\n\nSkipped: {result.skipped}."
    threads = "torch's default (one per core)" if result.cpu_threads is None else str(result.cpu_threads)
    runs = sorted({r["runs"] for r in result.rows})
    lines = [
        heading,
        "",
        f"bench/base_model.py: `run_review` on the {MERGE_REQUEST} merge request (agent/demo, as a replay) with "
        f"`{result.model}` loaded by `TransformersLLM` (xgrammar-constrained decoding, at most "
        f"{result.max_output_tokens} output tokens a call, torch threads: {threads}), N diverse strategies, "
        f"a review deadline of {REVIEW_DEADLINE_S:g} s. Calls and tokens come from the GenAI spans of the "
        "model calls (the tokenizer's counts). Summed call latency adds up those spans, which include the wait "
        "for the backend's one-generation lock: above the wall time, calls queued behind each other. "
        f"{'/'.join(str(r) for r in runs)} run(s) per row; figures are medians.",
        "",
        table(
            [
                "N",
                "executions",
                "model calls",
                "calls by stage",
                "failed calls",
                "input tokens",
                "output tokens",
                "summed call latency (s)",
                "wall (s)",
                "wall runs (s)",
                "posted (REAL)",
                "reviewers cut by deadline",
                "load (1 min)",
            ],
            [
                (
                    r["n"],
                    fmt(r["executions"]),
                    fmt(r["calls"]),
                    ", ".join(f"{k} {fmt(v)}" for k, v in r["calls_by_stage"].items()),
                    fmt(r["failed_calls"]),
                    f"{r['input_tokens']:,.0f}",
                    f"{r['output_tokens']:,.0f}",
                    r["model_s"],
                    r["wall_s"],
                    ", ".join(fmt(x) for x in r["wall_runs_s"]),
                    fmt(r["posted"]),
                    r["cut_by_deadline"],
                    f"{r['load_1min']:.2f}",
                )
                for r in result.rows
            ],
        ),
    ]
    if result.failures:
        lines += ["", "Reviews that failed (not in the table):", "", *(f"- {f}" for f in result.failures)]
    by_n = {r["n"]: r for r in result.rows}
    if 1 in by_n and 3 in by_n and by_n[1]["wall_s"] > 0 and by_n[1]["input_tokens"] > 0:
        one, three = by_n[1], by_n[3]
        lines += [
            "",
            f"N = 3 against N = 1: {three['wall_s'] / one['wall_s']:.2f}× the wall time, "
            f"{three['input_tokens'] / one['input_tokens']:.2f}× the input tokens, "
            f"{three['calls'] / max(one['calls'], 1):.2f}× the calls.",
        ]
    return "\n".join(lines)


# --- the run ---------------------------------------------------------------------------------------


def unified_diff(base: dict[str, str], head: dict[str, str]) -> str:
    """`diff -u` of every file that changed, `a/` and `b/` prefixed (what `parse_unified_diff` reads)."""
    out: list[str] = []
    for path in sorted(base.keys() | head.keys()):
        before, after = base.get(path), head.get(path)
        if before == after:
            continue
        old = f"a/{path}" if before is not None else "/dev/null"
        new = f"b/{path}" if after is not None else "/dev/null"
        out += difflib.unified_diff(_lines(before or ""), _lines(after or ""), fromfile=old, tofile=new, lineterm="\n")
    return "".join(out)


def _lines(text: str) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in text.splitlines(keepends=True)]


def demo_request(n: int) -> ReviewRequest:
    doc = json.loads(resources.files("agent.demo").joinpath("demo_mr.json").read_text(encoding="utf-8"))
    head = {**doc["base_files"], **doc["head_files"]}
    return ReviewRequest(
        source="replay",
        title=doc["title"],
        description=doc["description"],
        diff_text=unified_diff(doc["base_files"], doc["head_files"]),
        files={**head, ".reviewloop.toml": f"[agreement]\nstrategies = {n}\n"},
    )


def build_model() -> Path:
    """The base model's directory, built once (`reviewloop dev base-model`); ReviewloopError when it cannot be."""
    from agent.service_settings import Settings
    from learning.base_model import ensure_base_model

    return ensure_base_model(Settings().data_dir)


def run(
    *,
    ns: Sequence[int] = NS,
    repeats: int = REPEATS,
    model_path: Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> BaseModelResult:
    """Each N `repeats` times on the demo MR; `skipped` says why when the model cannot be loaded."""
    from reviewers.kernel.errors import ReviewloopError

    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from agent.llm.transformers_local import TransformersLLM
        from agent.pipeline import run_review
        from agent.runtime import Runtime
        from agent.service_settings import Settings

        settings = Settings()
        path = model_path or build_model()
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        llm = TransformersLLM(
            path,
            max_output_tokens=settings.llm_max_output_tokens,
            cpu_threads=settings.llm_cpu_threads,
            tracer=provider.get_tracer(__name__),
        )
    except (ReviewloopError, ImportError, OSError) as exc:
        reason = f"the base model could not be built or loaded ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        return BaseModelResult(skipped=reason)
    runs: list[ReviewRun] = []
    failures: list[str] = []
    for repeat in range(repeats):
        for n in ns:
            progress(f"base model: N = {n}, run {repeat + 1} of {repeats}")
            exporter.clear()
            runtime = Runtime(pool=None, llm=llm, review_deadline_s=REVIEW_DEADLINE_S)
            started = time.perf_counter()
            try:
                outcome = run_review(runtime, demo_request(n), dsn=None)
            except ReviewloopError as exc:  # one failed review is a finding of the bench, not its end
                failures.append(f"N = {n}, run {repeat + 1}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                continue
            wall = time.perf_counter() - started
            provider.force_flush()
            results = [*outcome.reviewer_results, *(r for _, r in outcome.other_executions)]
            runs.append(
                ReviewRun(
                    merge_request=MERGE_REQUEST,
                    n=n,
                    wall_s=wall,
                    calls=calls_from_spans(exporter.get_finished_spans()),
                    executions=1 + len({i for i, _ in outcome.other_executions}),
                    posted=sum(1 for v in outcome.verified if v.verdict == "REAL"),
                    cut_by_deadline=sum(1 for r in results if DEADLINE_NOTE in (r.error or "")),
                    load_1min=os.getloadavg()[0],
                )
            )
            done = runs[-1]
            progress(
                f"base model: N = {n} took {wall:.0f} s, {len(done.calls)} model calls, "
                f"{sum(c.input_tokens for c in done.calls):,} in / {sum(c.output_tokens for c in done.calls):,} "
                f"out tokens, {sum(c.latency_s for c in done.calls):.0f} s summed call latency"
            )
    provider.shutdown()
    return BaseModelResult(
        rows=summarize(runs),
        failures=failures,
        model=llm.model_name,
        cpu_threads=settings.llm_cpu_threads,
        max_output_tokens=settings.llm_max_output_tokens,
    )


def main(argv: list[str] | None = None) -> int:
    """This benchmark alone, with its provenance; `--append` adds the section to a results file."""
    from datetime import UTC, datetime

    from bench.report import provenance, render_provenance

    parser = argparse.ArgumentParser(description="Tokens, calls and wall time of reviews by the base model.")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--n", type=int, action="append", default=None, help=f"N to run (repeatable; default {NS})")
    parser.add_argument("--model-path", type=Path, default=None, help="a model directory (default: build one)")
    parser.add_argument("--append", type=Path, default=None, help="a results file to append the section to")
    args = parser.parse_args(argv)
    load_before, started_at, started = os.getloadavg(), datetime.now(UTC), time.perf_counter()
    result = run(
        ns=tuple(args.n or NS),
        repeats=args.repeats,
        model_path=args.model_path,
        progress=lambda m: print(m, flush=True),
    )
    prov = provenance(
        started=started_at,
        duration_s=time.perf_counter() - started,
        command="python -m bench.base_model" + (f" --repeats {args.repeats}" if args.repeats != REPEATS else ""),
        repo=Path(__file__).resolve().parent.parent,
        database="none (`run_review` without a store)",
        load_before=load_before,
    )
    heading, _, rest = render_provenance(prov).partition("\n")
    section = f"{heading} · base-model benchmark alone\n{rest}\n\n{render(result)}"
    print(section)
    if args.append is not None:
        existing = args.append.read_text(encoding="utf-8") if args.append.exists() else ""
        args.append.write_text(existing.rstrip("\n") + "\n\n" + section + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
