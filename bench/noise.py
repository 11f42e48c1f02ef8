"""How much a review without a model says about good code: posted findings per 1,000 changed lines.

Released code from well-known packages installed in this virtualenv stands in for "good code": it
is not bug-free, but it is code that careful maintainers shipped, so a review that comments on it
every few hundred lines is noise a team would mute. Two kinds of merge request are synthesized,
with a fixed seed:

- *new files*: a few modules of one package, each presented as an added file;
- *modified files*: modules that get a realistic small benign edit (a renamed local variable, an
  added docstring, an added logging line, two imports swapped).

Each merge request is reviewed through the real pipeline (`agent.pipeline.run_review`, no model,
no database) with the package's other modules at head — except, in a new-file MR, the modules that
import one of the new files: they could not have been there unchanged before it. A finding is *posted* when the verifier
labels it REAL. The report gives the rate overall and per kind, the ten rules that post most, every
high or critical finding, and a sample for a person to judge.

    python -m bench.noise                  # print the report
    python -m bench.noise --record   # also record it in bench/RESULTS.md (bench.results_file)
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import os
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from agent.context import ReviewRequest
from agent.pipeline import run_review
from agent.runtime import Runtime
from agent.verdicts.posting import listed_by_tier
from bench.report import provenance, render_provenance
from reviewers.analyzers.imports import ModuleIndex, imports_of
from reviewers.kernel.contracts import SEVERITY_RANK, Finding

PACKAGES = (
    "requests", "click", "jinja2", "httpx", "starlette", "rich", "urllib3", "packaging", "anyio", "h11", "idna",
    "markupsafe", "typer", "fastapi", "dateutil", "tenacity", "pluggy", "uvicorn", "markdown_it", "platformdirs",
)  # fmt: skip
SEED = 13
NEW_FILES_PER_MR = 3
MODIFIED_FILES_PER_MR = 2
MIN_FILE_LINES = 40  # a module of a few lines says nothing about noise
MAX_FILE_LINES = 900  # one huge module would dominate the line count
MAX_WORKSPACE_FILES = 200  # the package's other modules at head, bounded for the biggest packages
TARGET_PER_1000 = 1.0
SAMPLE = 12
LOGGING_LINE = 'logging.getLogger(__name__).debug("%s called", "{name}")'


@dataclass
class MergeRequest:
    kind: str  # "new files" or "modified files"
    package: str
    diff: str
    files: dict[str, str]
    changed_lines: int
    edits: list[str] = field(default_factory=list)


@dataclass
class Posted:
    kind: str
    finding: Finding


def package_sources(package: str) -> dict[str, str]:
    """Path (as `package/sub/module.py`) → text of the package's modules, tests left out."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return {}
    root = Path(next(iter(spec.submodule_search_locations)))
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent).as_posix()
        if "/tests/" in f"/{relative}" or "/test/" in f"/{relative}" or path.name.startswith("test_"):
            continue
        try:
            out[relative] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return out


def unified_diff(base: dict[str, str], head: dict[str, str]) -> str:
    """`git diff` text for the files that differ between two trees."""
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
            n=3,
        )
        out.extend(line.rstrip("\n") for line in lines)
    return "\n".join(out) + "\n"


# --- benign edits ----------------------------------------------------------------------------------


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def rename_local(text: str, tree: ast.Module, rng: random.Random) -> str | None:
    """A local variable of one function renamed (`result` → `result_value`) everywhere in it."""
    candidates: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]] = []
    for func in _functions(tree):
        params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
        stored = {
            n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and len(n.id) > 2
        }
        candidates += [(func, name) for name in sorted(stored - params)]
    if not candidates:
        return None
    func, name = rng.choice(candidates)
    lines = text.splitlines(keepends=True)
    word = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
    for i in range(func.lineno - 1, func.end_lineno or func.lineno):
        lines[i] = word.sub(f"{name}_value", lines[i])
    return "".join(lines)


def add_docstring_line(text: str, tree: ast.Module, rng: random.Random) -> str | None:
    """A one-line docstring added to a function that has none."""
    bare = [
        f
        for f in _functions(tree)
        if f.body
        and f.body[0].lineno > f.lineno
        and not (isinstance(f.body[0], ast.Expr) and isinstance(f.body[0].value, ast.Constant))
    ]
    if not bare:
        return None
    func = rng.choice(bare)
    first = func.body[0]
    lines = text.splitlines(keepends=True)
    indent = " " * first.col_offset
    words = func.name.strip("_").replace("_", " ") or "helper"
    lines.insert(first.lineno - 1, f'{indent}"""{words.capitalize()}."""\n')
    return "".join(lines)


def add_logging_line(text: str, tree: ast.Module, rng: random.Random) -> str | None:
    """`import logging` and a debug line at the start of one function's body."""
    funcs = [f for f in _functions(tree) if f.body and f.body[0].lineno > f.lineno]
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom) and n.col_offset == 0]
    if not funcs or not imports:
        return None
    func = rng.choice(funcs)
    body = func.body
    first = (
        body[1]
        if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        else body[0]
    )
    lines = text.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + LOGGING_LINE.format(name=func.name) + "\n")
    if not any(isinstance(n, ast.Import) and any(a.name == "logging" for a in n.names) for n in tree.body):
        last = imports[-1].end_lineno or imports[-1].lineno
        lines.insert(last, "import logging\n")
    return "".join(lines)


def swap_imports(text: str, tree: ast.Module, rng: random.Random) -> str | None:
    """Two adjacent one-line top-level imports swapped."""
    simple = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom) and n.lineno == n.end_lineno]
    pairs = [(a, b) for a, b in zip(simple, simple[1:], strict=False) if b.lineno == a.lineno + 1]
    if not pairs:
        return None
    a, b = rng.choice(pairs)
    lines = text.splitlines(keepends=True)
    lines[a.lineno - 1], lines[b.lineno - 1] = lines[b.lineno - 1], lines[a.lineno - 1]
    return "".join(lines)


EDITS = {
    "renamed a local variable": rename_local,
    "added a docstring line": add_docstring_line,
    "added a logging line": add_logging_line,
    "reordered imports": swap_imports,
}


def benign_edit(text: str, rng: random.Random) -> tuple[str, list[str]] | None:
    """One or two small benign edits that keep the module parsing, or None when none applies."""
    done: list[str] = []
    for name in rng.sample(sorted(EDITS), k=rng.choice((1, 2))):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return None
        edited = EDITS[name](text, tree, rng)
        if edited is None:
            continue
        try:
            ast.parse(edited)
        except SyntaxError:
            continue
        text, done = edited, [*done, name]
    return (text, done) if done else None


# --- merge requests and the review -------------------------------------------------------------------


def merge_requests(packages: tuple[str, ...] = PACKAGES, *, seed: int = SEED) -> list[MergeRequest]:
    """Per installed package: one MR of new files and one of modified files."""
    rng = random.Random(seed)
    out: list[MergeRequest] = []
    for package in packages:
        sources = package_sources(package)
        sized = [p for p, t in sources.items() if MIN_FILE_LINES <= len(t.splitlines()) <= MAX_FILE_LINES]
        if not sized:
            continue
        chosen = rng.sample(sized, k=min(len(sized), NEW_FILES_PER_MR + MODIFIED_FILES_PER_MR))
        new, modified = chosen[:NEW_FILES_PER_MR], chosen[NEW_FILES_PER_MR:]
        others = [p for p in sorted(sources) if p not in chosen][: MAX_WORKSPACE_FILES - len(chosen)]
        head = {p: sources[p] for p in [*others, *chosen]}
        # A module that imports a new one could not have been there, unchanged, before it: leave
        # such modules out of the new-file MR so that it is one a real repository could have.
        index = ModuleIndex(head)
        consistent = {
            p: t
            for p, t in head.items()
            if p in new or not any(set(index.resolve(p, ref)) & set(new) for ref in imports_of(t, p))
        }
        base = {p: t for p, t in consistent.items() if p not in new}
        diff = unified_diff(base, consistent)
        lines = sum(len(sources[p].splitlines()) for p in new)
        out.append(MergeRequest("new files", package, diff, consistent, lines))
        edited = dict(head)
        edits: list[str] = []
        for path in modified:
            result = benign_edit(sources[path], rng)
            if result is not None:
                edited[path], names = result
                edits += [f"{path}: {n}" for n in names]
        diff = unified_diff(head, edited)
        added = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
        if added:
            out.append(MergeRequest("modified files", package, diff, edited, added, edits))
    return out


def review(mr: MergeRequest) -> tuple[list[Finding], list[Finding]]:
    """(what the review posts by default, what the posting tier listed for a person instead: what
    posting="all" would post besides; `agent.verdicts.posting`)."""
    request = ReviewRequest(source="replay", title=f"{mr.package}: {mr.kind}", diff_text=mr.diff, files=mr.files)
    outcome = run_review(Runtime(pool=None, llm=None), request, dsn=None, review_id=0)
    posted = [v.finding for v in outcome.verified if v.verdict == "REAL"]
    tier = [v.finding for v in outcome.verified if v.verdict == "NEEDS_HUMAN_REVIEW" and listed_by_tier(v.reason)]
    return posted, tier


@dataclass
class NoiseResult:
    lines: Counter[str] = field(default_factory=Counter)  # changed lines per kind
    mrs: Counter[str] = field(default_factory=Counter)
    posted: list[Posted] = field(default_factory=list)
    tier_listed: list[Posted] = field(default_factory=list)  # posted too under posting="all"
    packages: list[str] = field(default_factory=list)

    @property
    def total_lines(self) -> int:
        return sum(self.lines.values())

    def per_1000(self, count: int, lines: int | None = None) -> float:
        lines = self.total_lines if lines is None else lines
        return 1000.0 * count / lines if lines else float("nan")

    @property
    def high_or_critical(self) -> list[Posted]:
        return [p for p in self.posted if SEVERITY_RANK[p.finding.severity] >= SEVERITY_RANK["high"]]


def run(packages: tuple[str, ...] = PACKAGES, *, seed: int = SEED, progress: bool = True) -> NoiseResult:
    result = NoiseResult()
    for mr in merge_requests(packages, seed=seed):
        if mr.package not in result.packages:
            result.packages.append(mr.package)
        found, tier = review(mr)
        result.lines[mr.kind] += mr.changed_lines
        result.mrs[mr.kind] += 1
        result.posted += [Posted(mr.kind, f) for f in found]
        result.tier_listed += [Posted(mr.kind, f) for f in tier]
        if progress:
            print(
                f"[noise] {mr.package:12} {mr.kind:15} {mr.changed_lines:6} lines  {len(found)} posted", file=sys.stderr
            )
    return result


def render(result: NoiseResult, *, seed: int = SEED) -> str:
    by_rule = Counter(p.finding.rule for p in result.posted)
    by_severity = Counter(p.finding.severity for p in result.posted)
    kinds = sorted(result.lines)
    parts = [
        "### Noise on released code (no model)",
        "",
        f"Packages ({len(result.packages)}, seed {seed}): {', '.join(result.packages)}. Per package one merge "
        f"request of {NEW_FILES_PER_MR} modules as new files and one of {MODIFIED_FILES_PER_MR} modules with a small "
        "benign edit (renamed local, docstring line, logging line, swapped imports); the package's other modules "
        'at head. Posted = labelled REAL by the verifier (posting="proven", the default); with posting="all" the '
        "findings the posting tier listed for a person would post too.",
        "",
        '| merge requests | changed lines | posted | per 1,000 lines | posted with posting="all" | per 1,000 (all) |',
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in kinds:
        count = sum(1 for p in result.posted if p.kind == kind)
        every = count + sum(1 for p in result.tier_listed if p.kind == kind)
        lines = result.lines[kind]
        parts.append(
            f"| {result.mrs[kind]} × {kind} | {lines:,} | {count} | {result.per_1000(count, lines):.2f} | "
            f"{every} | {result.per_1000(every, lines):.2f} |"
        )
    every = len(result.posted) + len(result.tier_listed)
    parts.append(
        f"| all | {result.total_lines:,} | {len(result.posted)} | **{result.per_1000(len(result.posted)):.2f}** "
        f"(target ≤ {TARGET_PER_1000:g}) | {every} | {result.per_1000(every):.2f} |"
    )
    listed = Counter(p.finding.rule for p in result.tier_listed)
    parts += ["", "Listed by the posting tier instead of posted: " + (
        ", ".join(f"{rule} {n}" for rule, n in listed.most_common()) or "none") + "."]  # fmt: skip
    severities = ", ".join(f"{s} {by_severity[s]}" for s in sorted(by_severity, key=SEVERITY_RANK.__getitem__))
    parts += ["", f"By severity: {severities or 'none'}.", "", "Rules that post most:", ""]
    parts += ["| rule | posted | per 1,000 lines |", "|---|---:|---:|"]
    parts += [f"| {rule} | {n} | {result.per_1000(n):.2f} |" for rule, n in by_rule.most_common(10)]
    if not by_rule:
        parts.append("| (none) | 0 | 0 |")
    high = result.high_or_critical
    parts += ["", f"High or critical posted: {len(high)}."]
    parts += [_line(p) for p in high]
    rng = random.Random(seed)
    sample = rng.sample(result.posted, k=min(SAMPLE, len(result.posted)))
    parts += ["", f"A sample of what was posted ({len(sample)} of {len(result.posted)}), for a person to judge:", ""]
    parts += [_line(p) for p in sorted(sample, key=lambda p: (p.finding.path, p.finding.line))] or ["(nothing)"]
    return "\n".join(parts)


def _line(p: Posted) -> str:
    f = p.finding
    evidence = f.evidence.strip().splitlines()[0][:100] if f.evidence.strip() else ""
    return f"- `{f.path}:{f.line}` {f.severity} {f.rule} ({p.kind}): {f.title} — `{evidence}`"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Posted findings per 1,000 lines of released code, no model.")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--record", action="store_true", help="record the run in bench/RESULTS.md (bench.results_file)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    started_at, started = datetime.now(UTC), time.perf_counter()
    result = run(seed=args.seed)
    prov = provenance(
        started=started_at,
        duration_s=time.perf_counter() - started,
        command="python -m bench.noise",
        repo=Path(__file__).resolve().parent.parent,
        database="none (no database)",
        load_before=load_before,
    )
    section = render_provenance(prov) + "\n\n" + render(result, seed=args.seed)
    print(section)
    if args.record:
        from bench.results_file import record_run

        posted, high = len(result.posted), len(result.high_or_critical)
        rate = f"{result.per_1000(posted):.2f} posted per 1,000 lines ({posted} of {result.total_lines:,})"
        record_run(name="noise", title="Noise on released code (bench.noise)", section=section,
                   headline=f"{rate}, {high} high or critical (target ≤ {TARGET_PER_1000:g})")  # fmt: skip
    return 0 if result.per_1000(len(result.posted)) <= TARGET_PER_1000 else 1


if __name__ == "__main__":
    raise SystemExit(main())
