"""Build bench.bugs' cases from BugsInPy and local git mirrors (run once).

    python -m bench.bugs.build --bugsinpy /work/.mirror/soarsmu+BugsInPy/repo --mirrors /work/.mirror

BugsInPy (https://github.com/soarsmu/BugsInPy) names, for each of its bugs, a project's repository
and the buggy and fixed commits (`projects/P/bugs/N/bug.info`). Each bug becomes a case exactly as a
security fix does in bench.advisories (`bench.advisories.build.build_case`): the fix reverted as a
merge request (base = the fixed commit, head = the buggy content of the changed Python files), the
buggy lines recorded from the fix's diff before any tool runs, the licence read at the fixed commit.
Projects named in `../shared/RESERVED_PROJECTS.txt` are left out and never opened (cookiecutter and
tornado among BugsInPy's); so is a repository whose snapshot is too large to fetch here (pandas,
matplotlib). Writes `bench/bugs/cases.jsonl.gz` and `bench/bugs/SOURCES.md`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.advisories.build import RESERVED, build_case, mirror_dir, reserved_names
from bench.advisories.cases import Case, write_cases

CASES_FILE = Path(__file__).with_name("cases.jsonl.gz")
SOURCES_FILE = Path(__file__).with_name("SOURCES.md")
_FIELD = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def _show(gitdir: Path, path: str) -> str:
    done = subprocess.run(["git", "--git-dir", str(gitdir), "show", f"HEAD:{path}"], capture_output=True, check=True)
    return done.stdout.decode("utf-8", errors="replace")


def info_fields(text: str) -> dict[str, str]:
    """`key="value"` lines of a BugsInPy .info file (values may run on without a newline)."""
    return {m.group(1): m.group(2) for m in _FIELD.finditer(text)}


def repo_of(url: str) -> str:
    m = re.match(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?$", url.strip())
    if not m:
        raise ValueError(f"not a GitHub repository URL: {url!r}")
    return f"{m.group(1)}/{m.group(2)}"


RENAMED = {"jakubroztocil/httpie": "httpie/httpie", "tiangolo/fastapi": "tiangolo/fastapi"}


def build(bugsinpy: Path, mirrors: Path, reserved: set[str]) -> tuple[list[Case], Counter[str]]:
    cases: list[Case] = []
    skipped: Counter[str] = Counter()
    listing = subprocess.run(
        ["git", "--git-dir", str(bugsinpy), "ls-tree", "-r", "--name-only", "HEAD", "projects"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    bug_files = sorted(
        (p for p in listing.splitlines() if p.endswith("/bug.info")),
        key=lambda p: (p.split("/")[1], int(p.split("/")[3]) if p.split("/")[3].isdigit() else 0),
    )
    for path in bug_files:
        project = path.split("/")[1]
        repo = repo_of(info_fields(_show(bugsinpy, f"projects/{project}/project.info"))["github_url"])
        if repo.split("/", 1)[1].lower() in reserved or project.lower() in reserved:
            skipped["reserved project"] += 1
            continue
        gitdir = mirror_dir(mirrors, RENAMED.get(repo, repo))
        if gitdir is None:
            skipped[f"no mirror ({repo})"] += 1
            continue
        fields = info_fields(_show(bugsinpy, path))
        number = path.split("/")[3]
        fixed, buggy = fields.get("fixed_commit_id", ""), fields.get("buggy_commit_id", "")
        if not fixed or not buggy:
            skipped["bug.info without commits"] += 1
            continue
        record = {
            "id": f"BugsInPy-{project}-{number}",
            "details": f"BugsInPy {project} bug {number}",
            "aliases": [],
            "affected": [{"package": {"name": project}}],
            "_family": ("bug", "CWE-710"),
        }
        url = f"https://github.com/{repo}/commit/{fixed}"
        try:
            made = build_case(record, repo, fixed, url, gitdir, before=buggy)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            made = f"git failed ({type(exc).__name__})"
        if isinstance(made, Case):
            made.project = project.lower()
            cases.append(made)
            print(f"[bugs] {made.id:28} {repo:30} {made.shape}", file=sys.stderr)
        else:
            skipped[made] += 1
    return cases, skipped


def sources_markdown(cases: list[Case], commit: str) -> str:
    lines = [
        "# bench.bugs: sources",
        "",
        f"Every case is a bug of BugsInPy (https://github.com/soarsmu/BugsInPy, commit {commit}), its fix "
        "reverted. The code stored for a case is the changed Python files of the fix, before and after, and a "
        "few unchanged neighbours, under the licence of its repository read at the fixed commit (below). "
        "Built by `python -m bench.bugs.build`.",
        "",
        "| bug | repository | fixed commit | buggy commit | licence (file) | part | shape |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in sorted(cases, key=lambda c: (c.project, c.id)):
        lines.append(
            f"| {c.id} | https://github.com/{c.repo} | {c.fix_commit} | {c.parent_commit} "
            f"| {c.license} ({c.license_file}) | {c.part} | {c.shape} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bugs.build", description=__doc__.split("\n")[0])
    parser.add_argument("--bugsinpy", type=Path, required=True, help="BugsInPy's git directory")
    parser.add_argument("--mirrors", type=Path, required=True, help="folder of OWNER+NAME/repo git mirrors")
    parser.add_argument("--reserved", type=Path, default=RESERVED)
    parser.add_argument("--out", type=Path, default=CASES_FILE)
    args = parser.parse_args(argv)
    cases, skipped = build(args.bugsinpy, args.mirrors, reserved_names(args.reserved))
    write_cases(cases, args.out)
    commit = subprocess.run(
        ["git", "--git-dir", str(args.bugsinpy), "rev-parse", "HEAD"], capture_output=True, check=True
    ).stdout.decode()
    SOURCES_FILE.write_text(sources_markdown(cases, commit.strip()), encoding="utf-8")
    projects = {c.project for c in cases}
    print(f"[bugs] {len(cases)} cases from {len(projects)} projects; skipped: {dict(skipped)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
