"""The demo merge request as a replay review, clean or with instructions to AI reviewers planted in
its code, and the problems the scripted reviewers (`fakes.scripted_reviewer_model`) report in it."""

from __future__ import annotations

import difflib
import json
from importlib import resources

from agent.context import ReviewRequest
from fakes.scripted_reviewer_model import INJECTED_LINES

DEMO = json.loads(resources.files("agent.demo").joinpath("demo_mr.json").read_text(encoding="utf-8"))
# What the scripted reviewers report after reading the file (each on a changed line of the demo).
REPORTS = {
    "security": ("inventory/db.py", 18, "    return conn.execute(query).fetchall()", "Query built from input"),
    "code_quality": ("inventory/export.py", 21, "        pass", "Export failure hidden"),
}


def unified_diff(base: dict[str, str], head: dict[str, str]) -> str:
    out: list[str] = []
    for path in sorted(set(base) | set(head)):
        old, new = base.get(path), head.get(path)
        if old == new:
            continue
        out.append(f"diff --git a/{path} b/{path}")
        if old is None:
            out.append("new file mode 100644")
        lines = difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            "/dev/null" if old is None else f"a/{path}",
            f"b/{path}",
        )
        out.extend(line.rstrip("\n") for line in lines)
    return "\n".join(out) + "\n"


def demo_request(*, injected: bool) -> ReviewRequest:
    head = dict(DEMO["head_files"])
    if injected:  # appended, so every other line keeps its number
        for path in ("inventory/db.py", "inventory/export.py"):
            head[path] = head[path].rstrip("\n") + "\n\n" + "\n".join(INJECTED_LINES) + "\n"
    return ReviewRequest(
        source="replay",
        title=DEMO["title"],
        description=DEMO["description"],
        diff_text=unified_diff(DEMO["base_files"], head),
        files=head,
    )
