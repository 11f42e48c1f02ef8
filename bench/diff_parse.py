"""How fast the unified-diff parser reads a very large change: 50,000 changed lines over 500 files.

The parser runs on every review before anything else, so its cost bounds the smallest review time.
CPU time (`process_time`) is reported beside wall time: on a shared machine the CPU figure is the
parser's own work. The correctness of the same diff is a test (tests/unit/test_diff.py); its speed
lives here, not in a timed test.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from agent.diff import parse_unified_diff

FILES = 500
HUNKS_PER_FILE = 5
LINES_PER_SIDE = 10  # per hunk: ten removed and ten added, so 50,000 changed lines in all
TARGET_CPU_S = 1.0
REPEATS = 5


def large_diff(files: int = FILES) -> str:
    """`files` modified files, each with five hunks of 3 context, 10 removed and 10 added lines."""
    parts: list[str] = []
    for i in range(files):
        parts.append(
            f"diff --git a/src/m{i}.py b/src/m{i}.py\nindex 1..2 100644\n--- a/src/m{i}.py\n+++ b/src/m{i}.py\n"
        )
        for h in range(HUNKS_PER_FILE):
            start = 1 + h * 40
            parts.append(f"@@ -{start},13 +{start},13 @@ def f{h}():\n")
            parts.append("".join(f" ctx {k}\n" for k in range(3)))
            parts.append("".join(f"-old {k}\n" for k in range(LINES_PER_SIDE)))
            parts.append("".join(f"+new value {k} = compute({k})\n" for k in range(LINES_PER_SIDE)))
    return "".join(parts)


def run(repeats: int = REPEATS) -> dict[str, Any]:
    text = large_diff()
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(repeats):
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        files = parse_unified_diff(text)
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started_wall)
        changed = sum(f.additions + f.deletions for f in files)
    return {
        "files": FILES,
        "changed_lines": changed,
        "megabytes": len(text.encode()) / 1e6,
        "cpu_s": statistics.median(cpu),
        "wall_s": statistics.median(wall),
        "repeats": repeats,
    }


if __name__ == "__main__":
    print(run())
