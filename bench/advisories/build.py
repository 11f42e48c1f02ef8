"""Build bench.advisories' cases from the PyPA advisory database and local git mirrors (run once).

    python -m bench.advisories.build --db /work/.mirror/pypa+advisory-database/repo --mirrors /work/.mirror

Reads every advisory YAML at the database's HEAD; keeps those whose references name a GitHub fix
commit (`https://github.com/OWNER/REPO/commit/SHA`) of a repository not named in
`../shared/RESERVED_PROJECTS.txt` (by repository name, case-insensitive, ignoring the owner; such a
repository is never opened); finds the commit in the mirror `MIRRORS/OWNER+REPO/repo` (bare, or with
a `.git` inside); and stores, for the first commit of an advisory that changes a non-test Python file:
the changed Python files at the fix and at its first parent, up to CONTEXT_BYTES of unchanged Python
neighbours in the same folders, the licence read from the repository's licence file at the fix, and
the vulnerable location, shape and class (a commit whose repository has no licence file we can
name at that commit is left out: its code is not copied here) (`bench.advisories.cases`), all decided here, before any
tool runs. A commit seen twice (two advisories of one fix) is one case. Writes
`bench/advisories/cases.jsonl.gz` and `bench/advisories/SOURCES.md` (every source, commit and licence).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from bench.advisories.cases import (
    CASES_FILE,
    Case,
    ChangedPy,
    Hunk,
    classify,
    classify_shape,
    is_test_path,
    parse_hunks,
    vulnerable_lines,
    write_cases,
)

SOURCES_FILE = Path(__file__).with_name("SOURCES.md")
RESERVED = Path(__file__).resolve().parents[2].parent / "shared" / "RESERVED_PROJECTS.txt"
COMMIT_URL = re.compile(r"^https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/commit/([0-9a-fA-F]{7,40})")
MAX_PY_FILES = 12  # a fix changing more Python files is a refactor; its location says little
MAX_CHANGED_LINES = 400  # added + removed lines of the fix's non-test Python files
MAX_FILE_BYTES = 250_000
CONTEXT_BYTES = 60_000
# Repositories renamed or moved since the advisory: the same history under another name.
RENAMED = {"element-hq/synapse": "matrix-org/synapse", "theupdateframework/tuf": "theupdateframework/python-tuf",
           "octoprint/octoprint": "OctoPrint/OctoPrint", "wichert/pyrad": "pyradius/pyrad",
           "jimmo/micropython": "micropython/micropython"}  # fmt: skip


def reserved_names(path: Path = RESERVED) -> set[str]:
    names: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(line.lower())
    return names


def _git(gitdir: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "--git-dir", str(gitdir), *args], capture_output=True, check=False, timeout=120)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done.stdout.decode("utf-8", errors="replace")


def _show(gitdir: Path, rev: str, path: str) -> str | None:
    done = subprocess.run(
        ["git", "--git-dir", str(gitdir), "show", f"{rev}:{path}"], capture_output=True, check=False, timeout=60
    )
    if done.returncode != 0:
        return None
    data = done.stdout
    if len(data) > MAX_FILE_BYTES or b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def mirror_dir(root: Path, repo: str) -> Path | None:
    repo = RENAMED.get(repo, RENAMED.get(repo.lower(), repo))
    owner, name = repo.split("/", 1)
    for candidate in (root / f"{owner}+{name}" / "repo", root / f"{owner}+{name}" / "repo" / ".git"):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    return None


LICENSE_NAMES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENSE.rst", "LICENCE", "COPYING", "COPYING.txt",
                 "LICENSE.TXT", "COPYRIGHT", "COPYING.md", "LICENSE.MIT", "License.txt")  # fmt: skip


def detect_license(text: str) -> str:
    t = " ".join(text.split()).lower()
    checks = (
        ("AGPL-3.0", "gnu affero general public license"),
        ("LGPL", "gnu lesser general public license"),
        ("LGPL", "gnu library general public license"),
        ("GPL-3.0", "version 3, 29 june 2007"),
        ("GPL-2.0", "version 2, june 1991"),
        ("GPL", "gnu general public license"),
        ("Apache-2.0", "apache license"),
        ("MPL-2.0", "mozilla public license"),
        ("ZPL-2.1", "zope public license"),
        ("EPL-2.0", "eclipse public license"),
        ("EFL-2.0", "eiffel forum license"),
        ("PSF-2.0", "python software foundation"),
        ("EUPL-1.2", "european union public licen"),
        ("MIT", "permission is hereby granted, free of charge"),
        ("ISC", "permission to use, copy, modify, and/or distribute this software for any purpose"),
        ("BSD-3-Clause", "neither the name"),
        ("BSD-3-Clause", "names of its contributors may"),
        ("BSD-2-Clause", "redistributions in binary form must reproduce"),
        ("BSD-3-Clause", "under the bsd license"),
        ("Unlicense", "this is free and unencumbered software"),
    )
    for spdx, words in checks:
        if words in t:
            return spdx
    return "unknown"


def read_license(gitdir: Path, rev: str) -> tuple[str, str]:
    names = set(_git(gitdir, "ls-tree", "--name-only", rev, check=False).split("\n"))
    for name in LICENSE_NAMES:
        if name in names:
            text = _show(gitdir, rev, name)
            if text is not None:
                return detect_license(text), name
    for name in sorted(names):
        if name.lower().startswith(("license", "licence", "copying")):
            text = _show(gitdir, rev, name)
            if text is not None:
                return detect_license(text), name
    return "unknown", ""


def load_advisories(db: Path) -> list[dict[str, Any]]:
    paths = [p for p in _git(db, "ls-tree", "-r", "--name-only", "HEAD", "vulns").split("\n") if p.endswith(".yaml")]
    advisories: list[dict[str, Any]] = []
    for path in sorted(paths):
        data = yaml.safe_load(_git(db, "show", f"HEAD:{path}"))
        if not isinstance(data, dict) or data.get("withdrawn"):
            continue
        data["_path"] = path
        advisories.append(data)
    return advisories


def fix_commits(advisory: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(OWNER/REPO, sha, url) of every GitHub commit reference, in the advisory's order."""
    found: list[tuple[str, str, str]] = []
    for ref in advisory.get("references") or []:
        url = str(ref.get("url", ""))
        m = COMMIT_URL.match(url)
        if m:
            repo = f"{m.group(1)}/{m.group(2).removesuffix('.git')}"
            if (repo, m.group(3).lower(), url) not in found:
                found.append((repo, m.group(3).lower(), url))
    return found


def build_case(
    advisory: dict[str, Any], repo: str, sha: str, url: str, gitdir: Path, *, before: str | None = None
) -> Case | str:
    """The case of one fix commit, or why there is none. `before`: the commit the fix is compared
    with (its first parent when None)."""
    try:
        full = _git(gitdir, "rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        return "commit not in the mirror"
    try:
        parent = _git(gitdir, "rev-parse", "--verify", "--quiet", f"{before or full + '^1'}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        return "root commit" if before is None else "commit before the fix not in the mirror"
    names = _git(gitdir, "diff", "--no-renames", "--name-only", parent, full, "--", "*.py").split("\n")
    names = [n for n in names if n.endswith(".py")]
    if not any(not is_test_path(n) for n in names):
        return "no non-test Python file changed"
    if len(names) > MAX_PY_FILES:
        return "too many Python files"
    files: list[ChangedPy] = []
    hunks_by_file: dict[str, list[Hunk]] = {}
    vulnerable: dict[str, list[int]] = {}
    changed_lines = 0
    for name in names:
        fixed = _show(gitdir, full, name)
        before = _show(gitdir, parent, name)
        if fixed is None and before is None:
            continue
        diff = _git(gitdir, "diff", "--no-renames", "-U0", parent, full, "--", name)
        hunks = parse_hunks(diff)
        hunks_by_file[name] = hunks
        files.append(ChangedPy(name, fixed, before))
        if is_test_path(name) or before is None:
            continue
        changed_lines += sum(len(h.removed) + len(h.added) for h in hunks)
        lines = vulnerable_lines(hunks, len(before.splitlines()))
        if lines:
            vulnerable[name] = lines
    if not vulnerable:
        return "no vulnerable line in a non-test file"
    if changed_lines > MAX_CHANGED_LINES:
        return "fix too large"
    # unchanged Python neighbours of the changed non-test files, smallest first, up to CONTEXT_BYTES
    context: list[tuple[str, str]] = []
    budget = CONTEXT_BYTES
    changed = set(names)
    folders = sorted({n.rsplit("/", 1)[0] if "/" in n else "" for n in vulnerable})
    for folder in folders:
        listing = _git(gitdir, "ls-tree", "-l", full, f"{folder}/" if folder else ".", check=False)
        entries: list[tuple[int, str]] = []
        for row in listing.splitlines():
            meta, _, path = row.partition("\t")
            parts = meta.split()
            if len(parts) == 4 and parts[1] == "blob" and path.endswith(".py") and path not in changed:
                if parts[3].isdigit():
                    entries.append((int(parts[3]), path))
        for size, path in sorted(entries):
            if size > budget:
                break
            text = _show(gitdir, full, path)
            if text is not None and not is_test_path(path):
                context.append((path, text))
                budget -= size
    spdx, license_file = read_license(gitdir, full)
    if spdx == "unknown":  # no licence file we can read: its code is not stored
        return "no licence file read at the fix"
    details = str(advisory.get("details", "") or advisory.get("summary", ""))
    family, cwe = advisory.get("_family") or classify(f"{advisory.get('summary', '')} {details}")
    affected = advisory.get("affected") or [{}]
    package = str(((affected[0] or {}).get("package") or {}).get("name", ""))
    return Case(
        id=str(advisory["id"]),
        aliases=[str(a) for a in advisory.get("aliases") or []],
        summary=" ".join(details.split())[:400],
        package=package,
        repo=repo,
        project=repo.split("/", 1)[1].lower(),
        fix_commit=full,
        parent_commit=parent,
        commit_url=url,
        license=spdx,
        license_file=license_file,
        family=family,
        cwe=cwe,
        shape=classify_shape({n: h for n, h in hunks_by_file.items() if n in vulnerable}),
        files=files,
        context=context,
        vulnerable=vulnerable,
    )


# Projects that are one project under two names (a fork kept its own advisory, a rename).
PROJECT_OF = {"synapse": "synapse", "pyrad": "pyrad", "tuf": "python-tuf", "octoprint": "octoprint"}


def build(db: Path, mirrors: Path, reserved: set[str]) -> tuple[list[Case], Counter[str]]:
    cases: list[Case] = []
    skipped: Counter[str] = Counter()
    seen: set[tuple[str, str]] = set()
    for advisory in load_advisories(db):
        commits = fix_commits(advisory)
        if not commits:
            continue
        if any(repo.split("/", 1)[1].lower() in reserved for repo, _, _ in commits):
            skipped["reserved project"] += 1
            continue
        why = "no mirror"
        for repo, sha, url in commits:
            gitdir = mirror_dir(mirrors, repo)
            if gitdir is None:
                continue
            if (repo.split("/", 1)[1].lower(), sha[:7]) in seen:
                why = "same fix as another advisory"
                break
            try:
                made = build_case(advisory, repo, sha, url, gitdir)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                made = f"git failed ({type(exc).__name__})"
            if isinstance(made, Case):
                made.project = PROJECT_OF.get(made.project, made.project)
                seen.add((repo.split("/", 1)[1].lower(), sha[:7]))
                cases.append(made)
                print(f"[build] {made.id:22} {repo:40} {made.family:18} {made.shape}", file=sys.stderr)
                break
            why = made
        else:
            skipped[why] += 1
            continue
        if why == "same fix as another advisory":
            skipped[why] += 1
    return cases, skipped


def sources_markdown(cases: list[Case], db_commit: str) -> str:
    lines = [
        "# bench.advisories: sources",
        "",
        "Every case is a published fix of the PyPA advisory database "
        f"(https://github.com/pypa/advisory-database, commit {db_commit}, CC-BY-4.0), reverted. "
        "The code stored for a case is the changed Python files of the fix commit, before and after, and a "
        "few unchanged neighbours, under the licence of its repository read from its licence file at that "
        "commit (below). Built by `python -m bench.advisories.build`.",
        "",
        "| advisory | repository | fix commit | licence (file) | part | family | shape |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in sorted(cases, key=lambda c: (c.project, c.id)):
        lines.append(
            f"| {c.id} | https://github.com/{c.repo} | {c.fix_commit} | {c.license} ({c.license_file or 'none'}) "
            f"| {c.part} | {c.family} | {c.shape} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.advisories.build", description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="the advisory database's git directory")
    parser.add_argument("--mirrors", type=Path, required=True, help="folder of OWNER+NAME/repo git mirrors")
    parser.add_argument("--reserved", type=Path, default=RESERVED)
    parser.add_argument("--out", type=Path, default=CASES_FILE)
    args = parser.parse_args(argv)
    cases, skipped = build(args.db, args.mirrors, reserved_names(args.reserved))
    write_cases(cases, args.out)
    db_commit = _git(args.db, "rev-parse", "HEAD").strip()
    SOURCES_FILE.write_text(sources_markdown(cases, db_commit), encoding="utf-8")
    projects = {c.project for c in cases}
    print(f"[build] {len(cases)} cases from {len(projects)} projects; skipped: {dict(skipped)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
