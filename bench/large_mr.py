"""`python -m bench.large_mr`: a 10,000-line merge request reviewed by `reviewloop review`, no model.

Issue 22's done-when 5: a 10,000-line merge request reviews in under 3 s without a model. The
merge request is real code, not generated lines: Python modules of installed web libraries
(starlette, then requests), JavaScript from matplotlib's web backend, and the project's own Go,
Java and TypeScript handler files (`tests/fixtures/security/`), so that every analyzer runs on
what it reads in practice: the taint interpreter with summaries across the added modules, ruff
(the code-quality rules, and bandit's checks in a second run) on the Python, semgrep's engine on the
rest. They are committed to a scratch git
repository as one change and reviewed there.

Each timed run is a fresh `reviewloop review --no-store` process (imports and analyzer processes
started cold). A second, instrumented run in its own process splits the review into stages: wall
time inside the taint analysis (and the summaries within it), the semgrep engine and ruff (each a
subprocess), and the rest. Reviewers run in threads and the analyzer processes beside them,
so stages overlap and their sum may exceed the review's wall time. The load average is read from
/proc/loadavg around every run: on a shared machine, times are upper bounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.report import git_commit
from bench.results_file import record_run, this_machine

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "security"
TARGET_LINES = 10_000
PYTHON_PACKAGES = ("starlette", "requests")  # web code: request objects, redirects, files, subprocesses
JS_FILES = (
    "matplotlib/backends/web_backend/js/mpl.js",
    "matplotlib/backends/web_backend/js/nbagg_mpl.js",
)
OTHER_LANGUAGES = ("go", "java", "typescript")  # the project's own handler files (fixtures)
RUNS = 5
TARGET_S = 3.0
RUN_TIMEOUT_S = 300


@dataclass
class Change:
    root: Path
    base: str
    head: str
    files: dict[str, int] = field(default_factory=dict)  # path → lines added

    def lines(self, suffix: str | None = None) -> int:
        return sum(n for p, n in self.files.items() if suffix is None or p.endswith(suffix))


def _site_file(relative: str) -> Path | None:
    top = relative.split("/", 1)[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).parent / relative
    return path if path.is_file() else None


def _package_files(package: str) -> list[tuple[str, str]]:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    folder = Path(next(iter(spec.submodule_search_locations)))
    return [
        (f"{package}/{p.relative_to(folder).as_posix()}", p.read_text(encoding="utf-8"))
        for p in sorted(folder.rglob("*.py"))
    ]


def _line_count(text: str) -> int:
    return len(text.splitlines())


def change_files(target_lines: int = TARGET_LINES) -> dict[str, str]:
    """The files the change adds: the other languages first, then whole Python modules (in a fixed
    order) while they fit in what is left of `target_lines`."""
    out: dict[str, str] = {}
    for relative in JS_FILES:
        if (found := _site_file(relative)) is not None:
            out[f"web/static/{found.name}"] = found.read_text(encoding="utf-8")
    for language in OTHER_LANGUAGES:
        for path in sorted((FIXTURES / language).iterdir()):
            out[f"services/{language}/{path.name}"] = path.read_text(encoding="utf-8")
    left = target_lines - sum(_line_count(t) for t in out.values())
    for package in PYTHON_PACKAGES:
        for path, text in _package_files(package):
            if 0 < _line_count(text) <= left:
                out[path] = text
                left -= _line_count(text)
    return out


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    done = subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "-c", "commit.gpgsign=false", *args],
        cwd=root, capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return done.stdout.strip()


def build_change(root: Path, target_lines: int = TARGET_LINES) -> Change:
    """A git repository at `root` with a base commit (a README) and a head commit adding the files."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# service\n", encoding="utf-8")
    _git(root, "add", "README.md")
    _git(root, "commit", "-q", "-m", "base")
    base = _git(root, "rev-parse", "HEAD")
    files = change_files(target_lines)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "add the web service")
    head = _git(root, "rev-parse", "HEAD")
    return Change(root, base, head, {p: _line_count(t) for p, t in files.items()})


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3]
    return float(one), float(five), float(fifteen)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _environment(code: Path) -> dict[str, str]:
    """`code`'s packages first on the path; no model and no database: the review timed is the
    analyzers' alone."""
    drop = ("REVIEWLOOP_LLM", "REVIEWLOOP_MODEL", "REVIEWLOOP_OPENAI", "REVIEWLOOP_DATABASE_URL", "OPENAI_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(code)
    return env


def _cli() -> list[str]:
    found = shutil.which("reviewloop", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "api"]


@dataclass(frozen=True)
class Timing:
    seconds: float
    cpu_s: float  # the process and every process it started (semgrep, ruff, git)
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    findings: tuple[tuple[str, int, str], ...]
    not_reviewed: tuple[tuple[str, str, str], ...]


def time_review(change: Change, code: Path = REPO) -> Timing:
    """One cold review: a fresh `reviewloop review --no-store` process over the change."""
    command = [*_cli(), "review", str(change.root), "--base", change.base, "--head", change.head]
    command += ["--no-store", "--format", "json"]
    before, cpu = loadavg(), _children_cpu_s()
    started = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=_environment(code), check=False
    )
    seconds = time.perf_counter() - started
    cpu_s, after = _children_cpu_s() - cpu, loadavg()
    if done.returncode not in (0, 1):
        raise SystemExit(f"reviewloop review failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    report = json.loads(done.stdout)
    findings = tuple(sorted((f["path"], f["line"], f["rule"]) for f in report["findings"]))
    missed = tuple(sorted((n["path"], n["reason"], n["detail"]) for n in report["not_reviewed"]))
    return Timing(seconds, cpu_s, before, after, findings, missed)


# --- the stages of one review, measured inside a fresh process -----------------------------------

PROCESS_STAGES = ("semgrep-core", "ruff", "git")
STAGE_WORDS = {"ruff": "ruff (the code-quality rules; bandit's checks)"}


def _command_kind(command: Any) -> str:
    words = " ".join(str(c) for c in command[:4]) if isinstance(command, list | tuple) else str(command)
    return next((kind for kind in PROCESS_STAGES if kind.split("-")[0] in words), "other")


def _span(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of intervals (processes of one kind run side by side)."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


def stages_in_process(root: str, base: str, head: str) -> dict[str, Any]:
    """Review the change with the CLI's own entry point and split its CPU time: the taint analysis
    (and the summaries inside it) by the security reviewer thread's own clock, each analyzer
    process by what the kernel counted for it when it was reaped, the rest of this process (the
    other reviewers, the strategy, the report) by difference. Wall seconds go with each: a
    process kind's from its first start to its last end. Run in a fresh process (`--stages-of`)."""
    import contextlib
    import io
    import threading

    cpu_began = time.process_time()
    import agent.pipeline  # noqa: F401 - the runtime the command imports once its analyzers started
    import reviewers.security as security
    from api.cli import app
    from reviewers.analyzers.flow import engine

    imports_cpu = time.process_time() - cpu_began
    lock = threading.Lock()
    cpu: dict[str, float] = {}
    wall: dict[str, float] = {}
    intervals: dict[str, list[tuple[float, float]]] = {}
    started: dict[int, tuple[str, float]] = {}  # pid → (kind, when)
    depth = threading.local()
    projects: list[Any] = []

    def add(stage: str, cpu_s: float, wall_s: float) -> None:
        with lock:
            cpu[stage] = cpu.get(stage, 0.0) + cpu_s
            wall[stage] = wall.get(stage, 0.0) + wall_s

    class TimedPopen(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
            super().__init__(args, *rest, **kwargs)
            with lock:
                started[self.pid] = (_command_kind(args), time.perf_counter())

    real_waitpid = os.waitpid

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        if pid not in started:
            return real_waitpid(pid, options)
        reaped, status, usage = os.wait4(pid, options)
        if reaped:
            kind, began = started.pop(pid)
            with lock:
                cpu[kind] = cpu.get(kind, 0.0) + usage.ru_utime + usage.ru_stime
                intervals.setdefault(kind, []).append((began, time.perf_counter()))
        return reaped, status

    def timed(stage: str, real: Any, *, outermost: bool = False) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            level = getattr(depth, stage, 0)
            setattr(depth, stage, level + 1)
            cpu_began, wall_began = time.thread_time(), time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                setattr(depth, stage, level)
                if level == 0 or not outermost:
                    add(stage, time.thread_time() - cpu_began, time.perf_counter() - wall_began)

        return wrapper

    def project_for(*args: Any, **kwargs: Any) -> Any:
        project = real_project_for(*args, **kwargs)
        projects.append(project)
        return project

    real_project_for = security.project_for
    subprocess.Popen = TimedPopen  # type: ignore[misc]
    os.waitpid = waitpid
    security.analyse_security = timed("taint analysis", security.analyse_security)
    engine.summarize = timed("summaries", engine.summarize, outermost=True)
    security.project_for = project_for
    own_began, wall_began = time.process_time(), time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        app(["review", root, "--base", base, "--head", head, "--no-store", "--format", "json"], standalone_mode=False)
    review_wall = time.perf_counter() - wall_began
    review_cpu = time.process_time() - own_began
    for kind, spans in intervals.items():
        wall[kind] = _span(spans)
    return {
        "imports_cpu_s": imports_cpu,
        "review_wall_s": review_wall,
        "review_cpu_s": review_cpu,
        "cpu_s": cpu,
        "wall_s": wall,
        "summary_steps": sum(p.steps for p in projects),
        "summaries": sum(len(p.summaries) for p in projects),
    }


def measure_stages(change: Change, code: Path = REPO) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.large_mr", "--stages-of", str(change.root), change.base, change.head],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=_environment(code), check=True, cwd=code,
    )  # fmt: skip
    stages: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return stages


# --- the run, and its section of bench/RESULTS.md -------------------------------------------------


@dataclass
class Result:
    change: Change
    timings: dict[str, list[Timing]]  # code label → runs, in the order they ran
    stages: dict[str, Any]


def measure(change: Change, *, runs: int, codes: dict[str, Path]) -> Result:
    """`runs` cold reviews per code, alternating (first, second, first, ...) so that both see the
    same load; then one instrumented review of the last code."""
    timings: dict[str, list[Timing]] = {label: [] for label in codes}
    for _ in range(runs):
        for label, code in codes.items():
            timings[label].append(time_review(change, code))
    last = list(codes.values())[-1]
    return Result(change, timings, measure_stages(change, last))


def _load_words(runs: list[Timing]) -> str:
    ones = [t.load_before[0] for t in runs] + [t.load_after[0] for t in runs]
    return f"{min(ones):.2f}–{max(ones):.2f}"


def render(result: Result, *, commit: str, labels: dict[str, str]) -> tuple[str, str]:
    """(the headline, the markdown section)."""
    change = result.change
    current = list(result.timings)[-1]
    runs = result.timings[current]
    median = statistics.median(t.seconds for t in runs)
    verdict = "met" if median < TARGET_S else "**not met** here"
    python, js = change.lines(".py"), change.lines(".js")
    other = change.lines() - python - js
    stages = result.stages
    lines = [
        f"### {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} · commit {commit} · a 10,000-line merge request, cold",
        "",
        f"- Command: `python -m bench.large_mr --runs {len(runs)}` (each run a fresh `reviewloop review --no-store "
        "--format json` process over a scratch git repository; no model, no database)",
        f"- Change: {len(change.files)} new files, {change.lines():,} added lines: {python:,} Python "
        f"({', '.join(PYTHON_PACKAGES)} as installed), {js:,} JavaScript (matplotlib's web backend), {other:,} Go, "
        "Java and TypeScript (the project's handler fixtures)",
        f"- Machine: {this_machine()}; load average (1 min, before and after each run) {_load_words(runs)}; "
        "above 1, other work shared the two cores, so times are upper bounds",
        "",
        "| code | median s | range s | CPU s (median, all processes) | runs s |",
        "|---|---:|---:|---:|---|",
    ]
    for label, timings in result.timings.items():
        seconds = [t.seconds for t in timings]
        cpu = statistics.median(t.cpu_s for t in timings)
        lines.append(
            f"| {labels.get(label, label)} | {statistics.median(seconds):.2f} | {min(seconds):.2f}–{max(seconds):.2f} "
            f"| {cpu:.2f} | {', '.join(f'{s:.2f}' for s in seconds)} |"
        )
    same = len({(t.findings, t.not_reviewed) for t in runs}) == 1
    cpu, wall = stages["cpu_s"], stages["wall_s"]
    in_process = ("taint analysis", *PROCESS_STAGES)
    rest = stages["review_cpu_s"] - cpu.get("taint analysis", 0.0)
    total = stages["imports_cpu_s"] + stages["review_cpu_s"] + sum(cpu.get(k, 0.0) for k in PROCESS_STAGES)
    lines += [
        "",
        f"Target < {TARGET_S:.0f} s: {verdict} (median {median:.2f} s at load {_load_words(runs)}). Every run "
        f"{'gave the same' if same else 'did **not** give the same'} {len(runs[-1].findings)} findings and "
        f"not-reviewed list ({len(runs[-1].not_reviewed)} entries).",
        "",
        f"Where the time goes: one more cold review, instrumented in its own process ({stages['review_wall_s']:.2f} s "
        "of review after the imports). CPU seconds add up to the whole; wall seconds overlap, since the four "
        "reviewers run in threads and the analyzer processes beside them (a process kind's wall is from its first "
        "start to its last end).",
        "",
        "| stage | CPU s | wall s |",
        "|---|---:|---:|",
        f"| imports (the CLI and the review runtime) | {stages['imports_cpu_s']:.2f} | — |",
    ]
    for stage in in_process:
        lines.append(f"| {STAGE_WORDS.get(stage, stage)} | {cpu.get(stage, 0.0):.2f} | {wall.get(stage, 0.0):.2f} |")
        if stage == "taint analysis":
            lines.append(
                f"| … of which function summaries ({stages['summaries']} computed, {stages['summary_steps']:,} "
                f"steps of the 500,000 budget) | {cpu.get('summaries', 0.0):.2f} | {wall.get('summaries', 0.0):.2f} |"
            )
    lines += [
        f"| the rest (the other reviewers, strategy, verifier, report) | {rest:.2f} | — |",
        f"| **total** | **{total:.2f}** | {stages['review_wall_s']:.2f} (review) |",
    ]
    headline = (
        f"{change.lines():,} added lines ({len(change.files)} files, Python, JS, Go, Java, TS), no model, cold: median "
        f"{median:.2f} s (range {min(t.seconds for t in runs):.2f}–{max(t.seconds for t in runs):.2f}) at load "
        f"{_load_words(runs)}; target < {TARGET_S:.0f} s {verdict.replace('**', '')}"
    )
    return headline, "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time a 10,000-line merge request's review, cold, without a model.")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--compare", type=Path, default=None, help="a checkout of older code to time alternately")
    parser.add_argument("--keep", type=Path, default=None, help="build the repository here and keep it")
    parser.add_argument("--record", action="store_true", help="record the run in bench/RESULTS.md")
    parser.add_argument("--stages-of", nargs=3, metavar=("ROOT", "BASE", "HEAD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stages_of:
        print(json.dumps(stages_in_process(*args.stages_of)))
        return 0
    codes = {"current": REPO}
    labels = {"current": f"this commit ({git_commit(REPO)})"}
    if args.compare is not None:
        codes = {"before": args.compare.resolve(), "current": REPO}
        labels["before"] = f"before ({args.compare.name})"
    with tempfile.TemporaryDirectory(prefix="reviewloop-large-mr-") as tmp:
        change = build_change(args.keep or Path(tmp) / "repo")
        result = measure(change, runs=args.runs, codes=codes)
    headline, section = render(result, commit=git_commit(REPO), labels=labels)
    print(section)
    if args.record:
        record_run(
            name="large-mr",
            title="A 10,000-line merge request, cold, without a model (bench.large_mr)",
            headline=headline,
            section=section,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
