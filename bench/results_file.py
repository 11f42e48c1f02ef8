"""bench/RESULTS.md leads with today's figures; the full log lives in bench/HISTORY.md.

A reader opens RESULTS.md to find the latest figure of every benchmark in one glance (STYLE.md rule
12). So each benchmark records a run with `record_run`: its section is appended to HISTORY.md (the
log, oldest first, nothing ever rewritten), the run becomes that benchmark's entry in
bench/latest.json, and RESULTS.md is rebuilt from latest.json: one table of the latest run of every
benchmark (date, commit, machine, headline figure), then each benchmark's latest section in full.

`python -m bench.results_file add NAME --title T --headline H --section FILE` records a run made by
hand (a command whose output was judged, say); `python -m bench.results_file render` rebuilds
RESULTS.md from latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.report import cpu_model, git_commit, memory_gib

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "RESULTS.md"
HISTORY = BENCH / "HISTORY.md"
LATEST = BENCH / "latest.json"

RESULTS_INTRO = """# Benchmark results

The latest run of every benchmark, newest first; each section below is that run in full. Every
earlier run, with its machine and date, is in [HISTORY.md](HISTORY.md) (oldest first). This file is
rebuilt by `bench/results_file.py` whenever a benchmark records a run; edit `latest.json` through it.
"""

HISTORY_INTRO = """# Benchmark history

Every recorded benchmark run, oldest first, as it was written at the time. The latest figure of each
benchmark is in [RESULTS.md](RESULTS.md).
"""


@dataclass(frozen=True)
class Run:
    """One benchmark's latest run."""

    name: str  # stable key, e.g. "pipeline", "security-suite"
    title: str  # what the benchmark measures, for the table
    date: str  # "2026-11-25 22:10 UTC"
    commit: str
    machine: str
    headline: str  # the figure a reader wants, with its target when there is one
    section: str  # the run's markdown section, as appended to the history


def this_machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores, {memory_gib():.1f} GiB"


def load_latest(path: Path = LATEST) -> dict[str, Run]:
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {name: Run(**entry) for name, entry in raw.items()}


def render_results(latest: dict[str, Run]) -> str:
    runs = sorted(latest.values(), key=lambda r: r.date, reverse=True)
    lines = [RESULTS_INTRO, "## Latest figures", "", "| benchmark | headline | date | commit | machine |"]
    lines.append("|---|---|---|---|---|")
    for run in runs:
        headline = run.headline.replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| [{run.title}](#{anchor(run.title)}) | {headline} | {run.date} | {run.commit} | {run.machine} |"
        )
    for run in runs:
        body = run.section.strip("\n")
        # the section's own heading is demoted under the benchmark's title, so anchors stay stable
        body = "\n".join(("#" + line) if line.startswith("#") else line for line in body.splitlines())
        lines += ["", f"## {run.title}", "", f"*{run.date} · commit {run.commit} · {run.machine}*", "", body]
    return "\n".join(lines).rstrip("\n") + "\n"


def anchor(title: str) -> str:
    """GitHub/GitLab's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    kept = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def record_run(
    *,
    name: str,
    title: str,
    headline: str,
    section: str,
    commit: str | None = None,
    machine: str | None = None,
    when: datetime | None = None,
    bench_dir: Path = BENCH,
) -> Run:
    """Append `section` to HISTORY.md, make it `name`'s latest run, and rebuild RESULTS.md."""
    run = Run(
        name=name,
        title=title,
        date=(when or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC"),
        commit=commit or git_commit(bench_dir.parent),
        machine=machine or this_machine(),
        headline=headline,
        section=section,
    )
    history = bench_dir / HISTORY.name
    text = history.read_text(encoding="utf-8") if history.is_file() else HISTORY_INTRO
    history.write_text(text.rstrip("\n") + f"\n\n<!-- {name} -->\n" + section.strip("\n") + "\n", encoding="utf-8")
    latest_path = bench_dir / LATEST.name
    latest = load_latest(latest_path)
    latest[name] = run
    latest_path.write_text(
        json.dumps({k: asdict(v) for k, v in sorted(latest.items())}, indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    (bench_dir / RESULTS.name).write_text(render_results(latest), encoding="utf-8")
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record a benchmark run, or rebuild RESULTS.md.")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="record a run made by hand")
    add.add_argument("name")
    add.add_argument("--title", required=True)
    add.add_argument("--headline", required=True)
    add.add_argument("--section", type=Path, required=True, help="markdown file with the run's section")
    add.add_argument("--commit", default=None)
    add.add_argument("--machine", default=None)
    sub.add_parser("render", help="rebuild RESULTS.md from latest.json")
    args = parser.parse_args(argv)
    if args.command == "add":
        section = args.section.read_text(encoding="utf-8")
        record_run(
            name=args.name,
            title=args.title,
            headline=args.headline,
            section=section,
            commit=args.commit,
            machine=args.machine,
        )
    else:
        RESULTS.write_text(render_results(load_latest()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
