"""bench/RESULTS.md leads with the latest figure of each benchmark; the log goes to HISTORY.md."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from bench.results_file import load_latest, record_run


def test_results_lead_with_the_latest_run_of_each_benchmark(tmp_path: Path) -> None:
    def run(name: str, headline: str, hour: int) -> None:
        record_run(
            name=name,
            title=f"{name} bench",
            headline=headline,
            section=f"## a run of {name}\n\n| x |\n|---|\n| {headline} |\n",
            commit="abc123",
            machine="2-core test box",
            when=datetime(2026, 11, 25, hour, 0, tzinfo=UTC),
            bench_dir=tmp_path,
        )

    run("noise", "0.45 per 1,000 lines", 10)
    run("suite", "TPR-FPR 0.80", 11)
    run("noise", "0.30 per 1,000 lines", 12)  # a newer noise run replaces the older one on top

    results = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    top = results.split("## Latest figures", 1)[1].split("\n## ", 1)[0]
    assert "0.30 per 1,000 lines" in top and "0.45 per 1,000 lines" not in results
    assert top.index("noise bench") < top.index("suite bench")  # newest first
    assert "2026-11-25 12:00 UTC" in top and "2-core test box" in top and "abc123" in top
    assert "### a run of noise" in results  # each latest section in full, under its benchmark's title

    history = (tmp_path / "HISTORY.md").read_text(encoding="utf-8")
    assert history.index("0.45 per 1,000 lines") < history.index("TPR-FPR 0.80") < history.index("0.30 per")
    assert set(load_latest(tmp_path / "latest.json")) == {"noise", "suite"}
