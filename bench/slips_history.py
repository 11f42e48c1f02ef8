"""`python -m bench.slips_history REPO [--commits N]`: the change-introduced bug rules on a real
repository's recent history, for judging by hand.

Each of the last N non-merge commits that touch Python is reviewed as a merge request of its own
(parent → commit) by the rules of issue 39 only, without the rest of the review: the slips
(`reviewers.analyzers.slips`) and the ReDoS check (`reviewers.analyzers.redos`) on each changed
product file, and the callers left broken (`reviewers.analyzers.callers`) across the repository at
the commit. It prints JSON: the commits, the changed product lines read, the regular expressions
not checked, and every hit with its commit, path, line, rule, the code and the body, for a person to
judge (results in bench/RESULTS.md, "Bugs a change introduces, on real history"). Nothing is run
from the repository; it is read through git.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

from agent.gitrepo import open_repository
from reviewers.analyzers.callers import find_broken_callers
from reviewers.analyzers.changed_file import ChangedFile, unanalyzable
from reviewers.analyzers.redos import redos_issues
from reviewers.analyzers.slips import slip_issues
from reviewers.kernel.contracts import ReviewContext
from reviewers.paths import is_test_path


def scan(root: Path, commits: int) -> dict[str, Any]:
    repo = open_repository(root)
    listed = subprocess.run(
        ["git", "-C", str(root), "log", "--no-merges", "--format=%H %P", "-n", str(commits), "--", "*.py"],
        capture_output=True,
        text=True,
        check=True,
    )
    shas = [line.split()[0] for line in listed.stdout.splitlines() if len(line.split()) == 2]  # not a root commit
    hits: list[dict[str, Any]] = []
    lines = unchecked = 0
    started = time.process_time()
    for sha in shas:
        files = repo.diff_files(f"{sha}^", sha)
        workspace = repo.workspace(sha)
        context = ReviewContext(title="", description="", files=files, workspace=workspace)
        for change in files:
            if not change.path.endswith(".py") or change.status == "deleted" or is_test_path(change.path):
                continue
            text = workspace.read_file(change.path)
            if text is None or unanalyzable(change.path, text):
                continue
            file = ChangedFile(change, text)
            lines += len(file.changed_lines)
            redos = redos_issues(file)
            unchecked += len(redos.unchecked)
            for issue in slip_issues(file) + redos.issues:
                end = issue.end_line or issue.line
                code = "\n".join(file.line_text(n) for n in range(issue.line, end + 1))
                hits.append({"commit": sha[:12], "path": change.path, "line": issue.line, "rule": issue.rule,
                             "code": code[:400], "body": issue.body[:600]})  # fmt: skip
        in_scope = frozenset(c.path for c in files if not is_test_path(c.path))
        for path, issues in find_broken_callers(context, in_scope=in_scope).issues.items():
            hits += [
                {"commit": sha[:12], "path": path, "line": i.line, "rule": i.rule, "code": "", "body": i.body[:800]}
                for i in issues
            ]
    cpu = round(time.process_time() - started, 1)
    return {"commits": len(shas), "changed_lines": lines, "cpu_s": cpu, "regexes_unchecked": unchecked, "hits": hits}


def main() -> None:
    parser = argparse.ArgumentParser(description="Issue 39's rules on a repository's recent history.")
    parser.add_argument("repo", type=Path, help="a git repository (a bare mirror is fine)")
    parser.add_argument("--commits", type=int, default=300)
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # the reviewed code's own `is` with a literal
        print(json.dumps(scan(args.repo, args.commits), indent=1))


if __name__ == "__main__":
    main()
