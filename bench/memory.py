"""Peak memory of one review, measured in a fresh interpreter (`python -m bench.memory LINES FILES SEED`).

It also times that review (cold: analyzers run) and the same review again (cached), so the
process gives the pipeline benchmark one of its samples instead of costing an extra cold run.

Two figures, because each alone misleads: tracemalloc's peak counts only the Python heap (not the
interpreter, C extensions or freed-but-kept arenas), and the process's resident set counts
everything the process holds, including what the imports cost before the review starts. So this
prints the process's peak RSS (`ru_maxrss`), its RSS just before the review (after imports and a
warm-up review), their difference, and the tracemalloc peak of a second run of the same review.
The analyzer subprocesses (ruff with its two rule sets, semgrep's engine) are separate processes and
not counted.
It runs as its own process so one size's allocations do not inflate the next size's high-water mark.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tracemalloc

from bench.pipeline import review_once
from bench.synthetic import synthetic_diff

WARM_UP = (40, 1)  # a tiny review first, so lazily imported modules are not counted as the review's


def current_rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(lines: int, files: int, seed: int) -> dict[str, float]:
    warm_diff, warm_files = synthetic_diff(changed_lines=WARM_UP[0], files=WARM_UP[1], seed=10_000 + seed)
    review_once(warm_diff, warm_files)
    diff, head = synthetic_diff(changed_lines=lines, files=files, seed=seed)
    before = current_rss_bytes()
    cpu_before = os.times()
    cold_s = review_once(diff, head)  # cold: analyzers run
    cpu_after = os.times()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    cached_s = review_once(diff, head)
    tracemalloc.start()
    try:
        review_once(diff, head)  # the same review again: analyzer answers cached, Python work identical
        _, heap_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    mib = 2**20
    return {
        "cold_s": cold_s,
        "cold_cpu_s": sum(cpu_after[:4]) - sum(cpu_before[:4]),  # self and children, user and system
        "cached_s": cached_s,
        "rss_before_mib": before / mib,
        "peak_rss_mib": peak / mib,
        "rss_delta_mib": max(0, peak - before) / mib,
        "python_heap_peak_mib": heap_peak / mib,
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)))
