"""`python -m bench.types_history REPO [--commits N]`: new type errors (`reviewers.analyzers.types`) on a
real repository's recent history, for judging by hand.

Each of the last N non-merge commits that touch Python is reviewed as a merge request of its own
(parent → commit) by the type check alone: mypy over the changed product files and their callers at
the parent and at the commit, the errors new at the commit kept (`check_types`). It prints JSON: the
commits, the changed product lines, the CPU seconds of this process and its children, the coverage
notes, how many errors of the reported classes mypy gave at head and at the base before the delta,
how many new errors named no changed definition off the diff (`unplaced`), and every hit with
its commit, path, line, rule and body, for a person to judge (bench/RESULTS.md, "New type errors, on
real history"). Nothing is run from the repository: it is read through git, and mypy only reads it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

from agent.gitrepo import open_repository
from reviewers.analyzers.types import check_types
from reviewers.kernel.contracts import ReviewContext
from reviewers.paths import is_test_path


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def scan(root: Path, commits: int, skip: int = 0) -> dict[str, Any]:
    repo = open_repository(root)
    listed = subprocess.run(
        ["git", "-C", str(root), "log", "--no-merges", "--format=%H %P", "-n", str(commits + skip), "--", "*.py"],
        capture_output=True,
        text=True,
        check=True,
    )
    shas = [line.split()[0] for line in listed.stdout.splitlines() if len(line.split()) == 2][skip:]
    hits: list[dict[str, Any]] = []
    notes: list[dict[str, str]] = []
    lines = unplaced = at_head = at_base = 0
    started = _cpu()
    for sha in shas:
        files = repo.diff_files(f"{sha}^", sha)
        workspace = repo.workspace(sha)
        context = ReviewContext(title="", description="", files=files, workspace=workspace)
        in_scope = frozenset(c.path for c in files if c.path.endswith(".py") and not is_test_path(c.path))
        lines += sum(c.additions for c in files if c.path in in_scope)
        report = check_types(context, in_scope=in_scope)
        unplaced += report.unplaced
        at_head, at_base = at_head + report.at_head, at_base + report.at_base
        notes += [{"commit": sha[:12], "path": p, "note": f"{r}: {d}"} for p, ns in report.notes.items() for r, d in ns]
        for path, issues in report.issues.items():
            text = workspace.read_file(path) or ""
            for i in issues:
                code = text.splitlines()[i.line - 1] if 0 < i.line <= len(text.splitlines()) else ""
                hits.append({"commit": sha[:12], "path": path, "line": i.line, "rule": i.rule,
                             "code": code.strip()[:300], "body": i.body[:700]})  # fmt: skip
    cpu = round(_cpu() - started, 1)
    return {"commits": len(shas), "changed_lines": lines, "cpu_s": cpu, "unplaced": unplaced,
            "errors_of_reported_classes": {"at_head": at_head, "at_base": at_base}, "notes": notes,
            "hits": hits}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description="New type errors on a repository's recent history.")
    parser.add_argument("repo", type=Path, help="a git repository (a bare mirror is fine)")
    parser.add_argument("--commits", type=int, default=150)
    parser.add_argument("--skip", type=int, default=0, help="start this many commits back")
    args = parser.parse_args()
    started = time.monotonic()
    result = scan(args.repo, args.commits, args.skip)
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
