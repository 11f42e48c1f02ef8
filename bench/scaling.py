"""Review pipeline cost against merge request size: no model (cold and cached analyzers), peak memory,
and a model server on loopback that answers after a fixed delay.

Every timed run reviews text no analyzer has seen (a new seed per run), because ruff's answers (its
code-quality rules and bandit's checks) are cached by file text (`reviewers.analyzers.*`: the
replay environment reviews one snapshot many times) and a second run of the same diff would time
only the cache. The "cached"
column re-runs the same diff right after: the pipeline's own work without the analyzer
subprocesses, which is what changes when the analyzers become cheaper.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from agent.context import ReviewRequest
from agent.pipeline import run_review
from agent.runtime import Runtime
from bench.pipeline import SIZES, review_once
from bench.synthetic import synthetic_diff
from reviewers.kernel.contracts import LLMPort

REPEATS = 3
MODEL_DELAY_S = 0.2
MODEL_STEP_BUDGET = 4  # per reviewer: three analyzer runs chosen by the model, then finish
MODEL_ANALYZER_STEPS = 3
MAX_PARALLEL_JUDGMENTS = 8  # agent.verifier's pool: judgments go in rounds of this many
MEMORY_TIMEOUT_S = 600

Row = dict[str, Any]


def seed_for(lines: int, repeat: int, salt: int = 0) -> int:
    """A distinct seed per size, repeat and series: no run sees text an earlier run analyzed."""
    return 1 + salt * 1_000_003 + repeat * 100_003 + lines


def growth_exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(seconds) over log(changed lines), from 1,000 lines up (fixed costs
    dominate below). 1.0 is linear growth."""
    pts = [(math.log(size), math.log(secs)) for size, secs in points if size >= 1000 and secs > 0]
    if len(pts) < 2:
        return float("nan")
    mx = statistics.mean(x for x, _ in pts)
    my = statistics.mean(y for _, y in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (the analyzer subprocesses)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def no_model(
    repeats: int = REPEATS, sizes: tuple[tuple[int, int], ...] = SIZES, *, fresh_process: Sequence[Row] = ()
) -> list[Row]:
    """Median wall time of `run_review` with no model: cold analyzers, then the same diff cached.
    A size's row from `memory()` (a review in a fresh process) counts as one of its samples."""
    measured = {row["changed_lines"]: row for row in fresh_process}
    rows = []
    for lines, files in sizes:
        cold: list[float] = []
        cached: list[float] = []
        if lines in measured:
            cold.append(measured[lines]["cold_s"])
            cached.append(measured[lines]["cached_s"])
        cold_cpu: list[float] = [measured[lines]["cold_cpu_s"]] if lines in measured else []
        for r in range(repeats - len(cold)):
            diff, head = synthetic_diff(changed_lines=lines, files=files, seed=seed_for(lines, r))
            before = cpu_s()
            cold.append(review_once(diff, head))
            cold_cpu.append(cpu_s() - before)
            cached.append(review_once(diff, head))
        rows.append(
            {
                "changed_lines": lines,
                "files": files,
                "cold_s": statistics.median(cold),
                "cold_runs_s": cold,
                "cached_s": statistics.median(cached),
                "cold_cpu_s": statistics.median(cold_cpu),
            }
        )
    return rows


def memory(sizes: tuple[tuple[int, int], ...] = SIZES) -> list[Row]:
    """Peak memory per size, each in a fresh interpreter (see bench.memory), with that review's times."""
    rows = []
    for lines, files in sizes:
        done = subprocess.run(
            [sys.executable, "-m", "bench.memory", str(lines), str(files), str(seed_for(lines, 0, salt=7))],
            capture_output=True,
            text=True,
            check=True,
            timeout=MEMORY_TIMEOUT_S,
        )
        rows.append({"changed_lines": lines, "files": files, **json.loads(done.stdout.strip().splitlines()[-1])})
    return rows


def _model_llm(base_url: str) -> LLMPort | None:
    from agent.llm.factory import make_llm

    return make_llm(
        base_url=base_url,
        model="bench",
        api_key=None,
        model_path=None,
        timeout_s=60,
        max_retries=0,
        max_output_tokens=128,
    )


def model_critical_path_s(calls_by_kind: dict[str, int], *, reviewer_steps: int, delay_s: float) -> float:
    """The model time a run cannot avoid: the strategy call, one reviewer's steps (reviewers run side
    by side), and the verifier's judgments in rounds of MAX_PARALLEL_JUDGMENTS."""
    judgments = calls_by_kind.get("ModelJudgment", 0)
    sequential = calls_by_kind.get("Strategy", 0) + reviewer_steps + math.ceil(judgments / MAX_PARALLEL_JUDGMENTS)
    return sequential * delay_s


def with_model(
    delay_s: float = MODEL_DELAY_S, repeats: int = REPEATS, sizes: tuple[tuple[int, int], ...] = SIZES
) -> list[Row]:
    """Median wall time with a model that answers every call after `delay_s`: a four-reviewer plan,
    each reviewer running the analyzer on its first files, then every surviving finding judged."""
    from agent.strategy import Strategy
    from bench.fake_llm_server import DelayedLLMServer

    strategy = Strategy.model_validate(
        {
            "change_type": "feature",
            "plan": [
                {"reviewer": r, "focus_paths": [], "checks": "everything", "step_budget": MODEL_STEP_BUDGET}
                for r in ("security", "code_quality", "test_impact", "architecture")
            ],
        }
    )
    rows = []
    with DelayedLLMServer(delay_s=delay_s, strategy=strategy, analyzer_steps=MODEL_ANALYZER_STEPS) as server:
        llm = _model_llm(server.base_url)
        for lines, files in sizes:
            walls, floors, calls = [], [], []
            for r in range(repeats):
                diff, head = synthetic_diff(changed_lines=lines, files=files, seed=seed_for(lines, r, salt=3))
                before = dict(server.calls_by_kind)
                # one execution, as in the earlier runs of this table (bench.agreement measures N)
                head = {**head, ".reviewloop.toml": "[agreement]\nstrategies = 1\n"}
                request = ReviewRequest(source="replay", title="bench", diff_text=diff, files=head)
                started = time.perf_counter()
                outcome = run_review(Runtime(pool=None, llm=llm), request, dsn=None, review_id=0)
                walls.append(time.perf_counter() - started)
                made = {k: v - before.get(k, 0) for k, v in server.calls_by_kind.items()}
                steps = max((len(res.steps) for res in outcome.reviewer_results), default=0)
                floors.append(model_critical_path_s(made, reviewer_steps=steps, delay_s=delay_s))
                calls.append(sum(made.values()))
            wall, floor = statistics.median(walls), statistics.median(floors)
            rows.append(
                {
                    "changed_lines": lines,
                    "files": files,
                    "wall_s": wall,
                    "model_calls": statistics.median(calls),
                    "model_critical_path_s": floor,
                    "overhead_s": wall - floor,
                }
            )
    return rows


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started
