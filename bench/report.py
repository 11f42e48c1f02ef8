"""The benchmark's section of bench/RESULTS.md: the run's provenance, each target and whether it is
met (and by how much it is missed), and one table per benchmark.

Pure rendering over the figures `bench.run` collects, so the target arithmetic is tested by hand.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

Comparison = Literal["below", "at_least", "at_most"]


@dataclass(frozen=True)
class Target:
    name: str
    measured: float
    limit: float
    comparison: Comparison  # below: measured < limit; at_least: measured >= limit; at_most: measured <= limit
    unit: str
    detail: str = ""  # what the figure is (which column, which condition)

    @property
    def met(self) -> bool:
        if math.isnan(self.measured):
            return False
        if self.comparison == "below":
            return self.measured < self.limit
        if self.comparison == "at_least":
            return self.measured >= self.limit
        return self.measured <= self.limit

    def verdict(self) -> str:
        """ "met" with the margin, or "missed by" the gap and the factor."""
        if math.isnan(self.measured):
            return "not measured"
        gap = abs(self.measured - self.limit)
        if self.met:
            return f"met (margin {fmt(gap)} {self.unit})"
        if self.comparison == "at_least":
            factor = self.limit / self.measured if self.measured > 0 else math.inf
        else:
            factor = self.measured / self.limit if self.limit > 0 else math.inf
        return f"**missed** by {fmt(gap)} {self.unit} ({fmt(factor)}×)"


def fmt(value: float) -> str:
    """Three significant figures, thousands separated; integers above 1000 without decimals."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if float(value).is_integer():
        return f"{value:.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return fmt(v) if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# --- provenance ------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def git_commit(repo: Path) -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{sha} (with uncommitted changes)" if dirty else sha


@dataclass(frozen=True)
class Provenance:
    started: datetime
    duration_s: float
    command: str
    commit: str
    cpu: str
    cores: int
    ram_gib: float
    system: str
    python: str
    database: str
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]


def provenance(
    *, started: datetime, duration_s: float, command: str, repo: Path, database: str, load_before: tuple[float, ...]
) -> Provenance:
    after = os.getloadavg()
    return Provenance(
        started=started,
        duration_s=duration_s,
        command=command,
        commit=git_commit(repo),
        cpu=cpu_model(),
        cores=os.cpu_count() or 0,
        ram_gib=memory_gib(),
        system=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        database=database,
        load_before=(load_before[0], load_before[1], load_before[2]),
        load_after=(after[0], after[1], after[2]),
    )


def render_provenance(p: Provenance) -> str:
    minutes, seconds = divmod(round(p.duration_s), 60)
    return "\n".join(
        [
            f"## {p.started:%Y-%m-%d %H:%M} UTC · commit {p.commit}",
            "",
            f"- Command: `{p.command}` ({minutes} min {seconds} s)",
            f"- Machine: {p.cpu}, {p.cores} cores, {p.ram_gib:.1f} GiB RAM; {p.system}; Python {p.python}",
            f"- Postgres: {p.database}",
            f"- Load average (1/5/15 min) before: {' / '.join(f'{x:.2f}' for x in p.load_before)}, "
            f"after: {' / '.join(f'{x:.2f}' for x in p.load_after)}"
            + (
                " — other work shared the machine, so times are upper bounds"
                if max(p.load_before[0], p.load_after[0]) > 0.5 * max(p.cores, 1)
                else ""
            ),
        ]
    )


def render_targets(targets: Sequence[Target]) -> str:
    rows = [
        (t.name, f"{fmt(t.measured)} {t.unit}".strip() + (f" ({t.detail})" if t.detail else ""), t.verdict())
        for t in targets
    ]
    return table(["target", "measured", "verdict"], rows).replace("|---:|---:|---:|", "|---|---|---|")
