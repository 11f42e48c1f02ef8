"""The project's own labeled security suite: per sink class, true-positive rate minus false-positive rate.

Cases live in `tests/fixtures/security/python/<class>/`: `vuln_NN.py` is vulnerable, `safe_NN.py`
a near miss (a guard, a sanitiser, a constant, a safe parser default, a flow through a helper or a
container that stays clean). A case may be a folder: its `app.py` is the changed file, the other
modules are the repository at head that it imports. A case counts as *flagged* when the security
analyzer reports, on the added file, an issue of the class's CWE that is not low-confidence (one
the verifier could post as REAL); a low-confidence note on a safe case does not count against it.

    python -m bench.security_suite            # print the table
    python -m bench.security_suite --record   # also record it in bench/RESULTS.md (bench.results_file)
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.python_security import analyse_security, project_for, python_security_issues
from reviewers.kernel.contracts import DiffLine, FileChange, Hunk

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "tests" / "fixtures" / "security" / "python"
ENTRY = "app.py"
# class folder → the CWEs a finding of that class carries
CLASS_CWES: dict[str, frozenset[str]] = {
    "sql": frozenset({"CWE-89"}),
    "command": frozenset({"CWE-78"}),
    "code": frozenset({"CWE-94"}),
    "deserialization": frozenset({"CWE-502"}),
    "path": frozenset({"CWE-22"}),
    "redirect": frozenset({"CWE-601"}),
    "xxe": frozenset({"CWE-611"}),
    "xpath": frozenset({"CWE-643"}),
    "ldap": frozenset({"CWE-90"}),
    "xss": frozenset({"CWE-79"}),
    "trust_boundary": frozenset({"CWE-501"}),
    "cookie": frozenset({"CWE-614", "CWE-1004"}),
    "weak_random": frozenset({"CWE-330"}),
    "weak_hash": frozenset({"CWE-328"}),
    "hardcoded_credentials": frozenset({"CWE-798"}),
    "ssrf": frozenset({"CWE-918"}),
    "header": frozenset({"CWE-113"}),
}
MIN_SCORE = 0.7
MAX_FPR = 0.1


@dataclass(frozen=True)
class Case:
    cls: str
    name: str
    vulnerable: bool
    entry: str  # the changed file, relative to `root`
    root: Path


@dataclass(frozen=True)
class ClassScore:
    cls: str
    vulnerable: int
    safe: int
    true_positives: int
    false_positives: int
    missed: tuple[str, ...]
    false_alarms: tuple[str, ...]

    @property
    def tpr(self) -> float:
        return self.true_positives / self.vulnerable if self.vulnerable else 0.0

    @property
    def fpr(self) -> float:
        return self.false_positives / self.safe if self.safe else 0.0

    @property
    def score(self) -> float:
        return self.tpr - self.fpr


def cases(suite: Path = SUITE) -> list[Case]:
    out: list[Case] = []
    for class_dir in sorted(p for p in suite.iterdir() if p.is_dir()):
        for entry in sorted(class_dir.iterdir()):
            label = entry.name.split("_")[0]
            if label not in ("vuln", "safe"):
                continue
            if entry.is_dir():
                out.append(Case(class_dir.name, entry.name, label == "vuln", ENTRY, entry))
            elif entry.suffix == ".py":
                out.append(Case(class_dir.name, entry.stem, label == "vuln", entry.name, class_dir))
    return out


def added(path: str, text: str) -> ChangedFile:
    lines = text.splitlines()
    hunk = Hunk(0, 0, 1, len(lines), "", tuple(DiffLine("add", t, None, n) for n, t in enumerate(lines, 1)))
    return ChangedFile(FileChange(path=path, old_path=path, status="added", hunks=(hunk,)), text)


def flagged(case: Case) -> bool:
    """Whether the analyzer reports a postable finding of the case's class on its changed file."""

    def read(path: str) -> str | None:
        target = case.root / path
        if case.root.name == case.cls:  # a single-file case: only its own file is the repository
            return target.read_text() if path == case.entry else None
        return target.read_text() if target.is_file() else None

    text = (case.root / case.entry).read_text()
    issues = python_security_issues(added(case.entry, text), project_for(read)) or []
    wanted = CLASS_CWES[case.cls]
    return any(i.cwe in wanted and i.confidence != "low" for i in issues)


def score(all_cases: list[Case]) -> list[ClassScore]:
    out: list[ClassScore] = []
    for cls in sorted({c.cls for c in all_cases}):
        mine = [c for c in all_cases if c.cls == cls]
        results = {c.name: flagged(c) for c in mine}
        vulnerable = [c for c in mine if c.vulnerable]
        safe = [c for c in mine if not c.vulnerable]
        out.append(
            ClassScore(
                cls,
                len(vulnerable),
                len(safe),
                sum(results[c.name] for c in vulnerable),
                sum(results[c.name] for c in safe),
                tuple(c.name for c in vulnerable if not results[c.name]),
                tuple(c.name for c in safe if results[c.name]),
            )
        )
    return out


# Released code of well-known packages in this virtualenv: what the analyzer says about good code.
RELEASED_PACKAGES = ("fastapi", "starlette", "httpx", "requests", "jinja2", "click", "uvicorn", "gitlab", "psycopg",
                     "procrastinate", "typer", "rich")  # fmt: skip


@dataclass(frozen=True)
class ReleasedNoise:
    packages: tuple[str, ...]
    files: int
    lines: int
    seconds: float
    postable: tuple[str, ...]  # "pkg/mod.py:12 python:rule (CWE-…)": what would be posted as REAL
    low: int  # low-confidence notes (a person's look, not a thread)
    cut_short: tuple[str, ...]

    @property
    def per_kloc(self) -> float:
        return 1000 * len(self.postable) / self.lines if self.lines else 0.0


def released_code_noise(packages: tuple[str, ...] = RELEASED_PACKAGES) -> ReleasedNoise:
    """Every module of each package reviewed as an added file, with the package's other modules as
    the repository at head (so summaries cross its modules), timed."""
    import importlib.util

    postable: list[str] = []
    low = files = lines = 0
    cut: list[str] = []
    seconds = 0.0
    found: list[str] = []
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        found.append(package)
        root = Path(spec.origin).parent.parent

        def read(path: str, root: Path = root) -> str | None:
            target = root / path
            return target.read_text(errors="replace") if target.is_file() and target.suffix == ".py" else None

        project = project_for(read)
        for module in sorted((root / package).rglob("*.py")):
            relative = module.relative_to(root).as_posix()
            text = module.read_text(errors="replace")
            files += 1
            lines += len(text.splitlines())
            started = time.perf_counter()
            analysis = analyse_security(added(relative, text), project)
            seconds += time.perf_counter() - started
            if analysis is None:
                continue
            for issue in analysis.issues:
                if issue.confidence == "low":
                    low += 1
                else:
                    postable.append(f"{relative}:{issue.line} {issue.rule} ({issue.cwe})")
            if analysis.cut_short:
                cut.append(f"{relative}: {analysis.cut_short}")
    return ReleasedNoise(tuple(found), files, lines, seconds, tuple(postable), low, tuple(cut))


TIMING_LINES = 10_000
TIMING_FILES = 100
TIMING_REPEATS = 3


def ten_thousand_line_timing() -> tuple[list[float], list[float]]:
    """(the taint analyzer alone, the whole review without a model) in seconds, for a synthetic
    10,000-line merge request of 100 files, TIMING_REPEATS times each."""
    from bench.pipeline import review_once
    from bench.synthetic import synthetic_diff

    diff, files = synthetic_diff(changed_lines=TIMING_LINES, files=TIMING_FILES)
    python = {p: t for p, t in files.items() if p.endswith(".py")}
    analyzer: list[float] = []
    for _ in range(TIMING_REPEATS):
        project = project_for(files.get)
        started = time.perf_counter()
        for path, text in python.items():
            analyse_security(added(path, text), project)
        analyzer.append(time.perf_counter() - started)
    whole = [review_once(diff, files) for _ in range(TIMING_REPEATS)]
    return analyzer, whole


def render_timing(analyzer: list[float], whole: list[float]) -> str:
    median = sorted(whole)[len(whole) // 2]
    return (
        f"A {TIMING_LINES:,}-line merge request ({TIMING_FILES} files, `bench.synthetic`), no model: whole review "
        f"median **{median:.2f} s** (runs {', '.join(f'{w:.2f}' for w in whole)}; target < 3 s), of which the "
        f"Python security analyzer with its summaries {', '.join(f'{a:.2f}' for a in analyzer)} s when run alone "
        "(reviewers run in threads, and bandit/ruff answers are cached after the first run).\n"
    )


def render(scores: list[ClassScore], *, seconds: float, commit: str, machine: str) -> str:
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    mean = sum(s.score for s in scores) / len(scores) if scores else 0.0
    lines = [
        f"## Security suite (Python), {today} · commit {commit} · {machine}",
        "",
        f"Own labeled suite (`tests/fixtures/security/python`, `python -m bench.security_suite`), "
        f"no model: mean TPR − FPR **{mean:+.2f}** over {len(scores)} classes; target per class "
        f"≥ {MIN_SCORE} with FPR ≤ {MAX_FPR}. Analyzer time for all {sum(s.vulnerable + s.safe for s in scores)} "
        f"cases: {seconds:.2f} s.",
        "",
        "| class | CWE | vulnerable | safe | TPR | FPR | TPR − FPR | missed | false alarms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in scores:
        lines.append(
            f"| {s.cls} | {', '.join(sorted(CLASS_CWES[s.cls]))} | {s.vulnerable} | {s.safe} | {s.tpr:.2f} | "
            f"{s.fpr:.2f} | {s.score:+.2f} | {', '.join(s.missed) or '—'} | {', '.join(s.false_alarms) or '—'} |"
        )
    return "\n".join(lines) + "\n"


def render_noise(noise: ReleasedNoise) -> str:
    lines = [
        f"Released code ({', '.join(noise.packages)}; {noise.files} modules, {noise.lines:,} lines, each reviewed "
        f"as an added file with its package as the repository): **{len(noise.postable)} postable findings, "
        f"{noise.per_kloc:.2f} per 1,000 lines** (target ≤ 1), {noise.low} low-confidence notes; analyzer time "
        f"{noise.seconds:.1f} s ({1e6 * noise.seconds / max(noise.lines, 1):.0f} ms per 1,000 lines). "
        f"{len(noise.cut_short)} modules had summaries cut by a bound (the step budget, call depth or module "
        "count), and say so.",
        "",
    ]
    lines += [f"- {p}" for p in noise.postable]
    lines += [f"- cut short, e.g.: {c[:200]}" for c in noise.cut_short[:2]]
    return "\n".join(lines) + "\n"


def headline(scores: list[ClassScore]) -> str:
    """One line for RESULTS.md's table: classes, cases, and the classes under a perfect score."""
    cases = sum(c.vulnerable + c.safe for c in scores)
    perfect = [c for c in scores if c.score >= 1.0]
    rest = ", ".join(f"{c.cls} {c.score:+.2f} (FPR {c.fpr:.2f})" for c in scores if c.score < 1.0)
    head = f"{len(scores)} classes, {cases} cases: {len(perfect)} classes TPR − FPR +1.00"
    return f"{head}, {rest}" if rest else head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record the run in bench/RESULTS.md (bench.results_file)")
    parser.add_argument("--machine", default="2-core CPU box")
    parser.add_argument("--released", action="store_true", help="also review released packages (precision)")
    args = parser.parse_args(argv)
    from bench.report import git_commit

    started = time.perf_counter()
    scores = score(cases())
    seconds = time.perf_counter() - started
    section = render(scores, seconds=seconds, commit=git_commit(REPO), machine=args.machine)
    if args.released:
        section += "\n" + render_noise(released_code_noise())
        section += "\n" + render_timing(*ten_thousand_line_timing())
    print(section)
    if args.record:
        from bench.results_file import record_run

        record_run(name="security-python", title="Security suite, Python (bench.security_suite)",
                   headline=headline(scores), section=section, machine=args.machine)  # fmt: skip
    failing = [s.cls for s in scores if s.score < MIN_SCORE or s.fpr > MAX_FPR]
    if failing:
        print(f"below target: {', '.join(failing)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
