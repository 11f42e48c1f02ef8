"""Synthetic merge requests of a chosen size, for the pipeline benchmark.

Each file is ordinary Python with a few functions; a small share of added lines carry patterns the
reviewers report (so the verifier and reporter do real work), the rest is plain code.
"""

from __future__ import annotations

import random


def _function(rng: random.Random, name: str, lines: int, *, risky: bool) -> list[str]:
    body = [f"def {name}(value: int, items: list[int]) -> int:", '    """Sum and scale."""', "    total = 0"]
    for i in range(max(0, lines - 5)):
        body.append(f"    total += items[{i % 7}] * value + {rng.randint(0, 99)}")
    if risky:
        body.append('    query = f"SELECT * FROM t WHERE id = {value}"')
        body.append("    return len(conn.execute(query).fetchall())")
    else:
        body.append("    return total")
    return body


def synthetic_diff(*, changed_lines: int, files: int, seed: int = 0) -> tuple[str, dict[str, str]]:
    """A `git diff` adding about `changed_lines` lines over `files` new files, and the files at head."""
    rng = random.Random(seed)
    per_file = max(8, changed_lines // max(1, files))
    out: list[str] = []
    head: dict[str, str] = {}
    for f in range(files):
        path = f"pkg{f % 20}/module_{f}.py"
        lines = ["import sqlite3", "", "conn = sqlite3.connect(':memory:')", ""]
        fn = 0
        while len(lines) < per_file:
            lines += _function(rng, f"compute_{f}_{fn}", min(40, per_file - len(lines) + 5), risky=fn % 5 == 0)
            lines.append("")
            fn += 1
        text = "\n".join(lines) + "\n"
        head[path] = text
        out.append(f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}")
        out.append(f"@@ -0,0 +1,{len(lines)} @@")
        out.extend("+" + ln for ln in lines)
    return "\n".join(out) + "\n", head
