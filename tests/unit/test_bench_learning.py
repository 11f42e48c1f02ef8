"""The learning benchmark's statistics and report: bootstrap intervals with hand-checkable values,
the collapse watch's flags, and `--report-only` re-rendering RESULTS.md and the plot from saved JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.learning import collapse_watch, main
from bench.learning_report import (
    SECTION_TITLE,
    bootstrap_ci,
    bootstrap_ratio_ci,
    paired_difference,
    per_mr_mean,
    render_markdown,
)


def test_bootstrap_of_a_constant_is_a_point() -> None:
    assert bootstrap_ci([0.25] * 7) == (0.25, 0.25, 0.25)


def test_bootstrap_interval_brackets_the_mean_and_is_seeded() -> None:
    values = [0.0, 1.0] * 10
    mean, low, high = bootstrap_ci(values, seed=3)
    assert mean == 0.5
    assert 0.2 < low < 0.5 < high < 0.8
    assert bootstrap_ci(values, seed=3) == (mean, low, high)
    assert bootstrap_ci(values, seed=4) != (mean, low, high)


def test_ratio_weighs_items_by_their_denominator() -> None:
    # 3 of 4 found on the first MR, 0 of 1 on the second, an MR without defects weighs nothing.
    point, low, high = bootstrap_ratio_ci([3, 0, 0], [4, 1, 0])
    assert point == 0.6
    assert 0.0 <= low <= point <= high <= 1.0
    nan_point, nan_low, _ = bootstrap_ratio_ci([0, 0], [0, 0])
    assert math.isnan(nan_point) and math.isnan(nan_low)


def test_seeds_average_per_merge_request_and_differences_pair_them() -> None:
    seed_a = [{"reward": 1.0}, {"reward": 0.0}]
    seed_b = [{"reward": 0.0}, {"reward": 0.0}]
    assert per_mr_mean([seed_a, seed_b], "reward") == [0.5, 0.0]
    diff = paired_difference([seed_a], [seed_b])
    assert diff[0] == 0.5


def _outcome(reward: float, found: int = 0) -> dict[str, float]:
    return {"reward": reward, "found": found, "defects": 1, "decoy_posts": 0, "votes": found,
            "accepted_votes": found, "valid": 1.0}  # fmt: skip


def _results() -> dict[str, object]:
    base = [_outcome(0.0), _outcome(0.5, 1)]
    rl = [_outcome(0.25), _outcome(0.75, 1)]
    return {
        "machine": "test box", "date": "2026-01-01 00:00 UTC", "duration_s": 120.0,
        "stages": {"base": {"greedy": [base], "sampled": [base]}, "rl": {"greedy": [rl, rl], "sampled": []}},
        "ablations": {"no_fps": {"greedy": [base]}, "plain_mean": {"greedy": [], "note": "identical by construction"}},
        "curves": {"full seed 0": [[0, 0.25], [2, 0.5]]},
        "collapse": {"steps": 6, "summary": "no spikes"},
        "notes": ["a note"],
    }  # fmt: skip


def test_markdown_has_every_stage_ablation_and_note() -> None:
    text = render_markdown(_results())
    assert text.startswith(SECTION_TITLE)
    assert "| base | greedy | 1 | 0.250 [0.000, 0.500] |" in text
    assert "| rl | greedy | 2 | 0.500 [0.250, 0.750] |" in text
    assert "| no_fps | 0.250 [0.000, 0.500] | -0.250 [-0.250, -0.250] | -0.250 [-0.250, -0.250] |" in text
    assert "| plain_mean | not run | | | identical by construction |" in text
    assert "per seed (0, 1, …): 0.500, 0.500." in text
    assert "test box" in text and "2.0 min" in text and "a note" in text


def test_report_only_records_the_run_paired_with_the_headroom(tmp_path: Path) -> None:
    results = _results() | {"held_out_case_ids": ["e0", "e1"]}
    results["decoding"] = {
        "token by token": {"plans": 2, "tokens_per_plan": 200.0, "forward_passes_per_plan": 200.0,
                           "seconds_per_plan": 4.0, "valid": 2},
        "jump-forward": {"plans": 2, "tokens_per_plan": 150.0, "forward_passes_per_plan": 12.0,
                         "seconds_per_plan": 0.5, "valid": 2},
        "same_plan": 1, "load": "1.0",
    }  # fmt: skip
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps(results), encoding="utf-8")
    rows = [{"case_id": f"e{i}", "split": "eval", "rule": {"reward": -0.5}, "oracle": {"reward": 1.5}} for i in (0, 1)]
    headroom = tmp_path / "headroom.json"
    headroom.write_text(json.dumps({"rows": rows}), encoding="utf-8")
    png = tmp_path / "plot.png"
    bench = tmp_path / "bench"
    bench.mkdir()
    main(["--report-only", str(saved), "--bench-dir", str(bench), "--headroom", str(headroom), "--png", str(png)])
    text = (bench / "RESULTS.md").read_text(encoding="utf-8")
    assert SECTION_TITLE.removeprefix("## ") in text and "| rl | greedy | 2 |" in text
    # RL (0.25, 0.75 per MR) against rule −0.5 and oracle 1.5: half the gap, its paired interval above 0
    assert "| rl | +0.500 | +1.000 [+0.750, +1.250], p = 0.5000 |" in text and "| 50% |" in text
    assert "RL captured 50% of the oracle − rule gap" in text and ": met.**" in text
    assert "| jump-forward | 150 | 12.0 | 0.50 | 2 of 2 |" in text
    latest = json.loads((bench / "latest.json").read_text(encoding="utf-8"))
    assert "captured 50%" in latest["learning"]["headline"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_collapse_watch_flags_spikes_entropy_and_flat_steps() -> None:
    steps = [
        {"step": 1, "reward_std": 0.3, "entropy": 1.0, "grad_norm": 1.0},
        {"step": 2, "reward_std": 0.2, "entropy": 0.9, "grad_norm": 1.2},
        {"step": 3, "reward_std": 0.0, "skipped": True},
        {"step": 4, "reward_std": 0.1, "entropy": 0.4, "grad_norm": 9.0},
    ]
    watch = collapse_watch(steps)
    assert watch["spikes"] == [4]
    assert watch["low_entropy"] == [4]
    assert watch["flat"] == [3]
    # the skipped step trained nothing: no entropy or gradient norm, not a zero that reads as collapse
    assert watch["series"]["entropy"] == [1.0, 0.9, None, 0.4]
    assert "entropy [1.0, 0.9, –, 0.4]" in watch["summary"]


def _scheduled_bench(tmp_path: Path, *, budget: float, clock: list[float]) -> tuple[Any, list[str]]:
    """A Bench whose RL runs take 17 minutes of a fake clock each and record only their names."""
    from bench.learning import Bench, BenchConfig

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    config = BenchConfig(budget_minutes=budget, seeds=3, ablations=("no_fps",), rl_steps=30)
    bench = Bench(config, out=tmp_path, base_model=model)
    ran: list[str] = []

    def rl(adapter: Path, *, variant: str, **_: Any) -> None:
        ran.append(variant)
        clock[0] += 17.0
        step = {"step": 1, "reward_mean": 0.0, "reward_std": 0.5, "entropy": 0.5, "grad_norm": 0.3}
        bench.results["rl_logs"][variant] = [step]

    bench.minutes = lambda: clock[0]  # type: ignore[method-assign]
    bench.rl = rl  # type: ignore[method-assign, assignment]
    bench.results["dpo_greedy_mean"] = 0.0
    return bench, ran


def test_rl_runs_go_on_while_the_mean_full_seed_fits_the_budget(tmp_path: Path) -> None:
    clock = [20.0]
    bench, ran = _scheduled_bench(tmp_path, budget=60.0, clock=clock)
    bench.rl_runs(tmp_path / "dpo")
    # seed 0 ends at 37 (23 left, a run needs 1.05 × 17 = 17.85): seed 1 runs, then 6 are left
    assert ran == ["full seed 0 (collapse watch)", "full seed 1"]
    assert bench.results["rl_minutes"] == {"full seed 0 (collapse watch)": 17.0, "full seed 1": 17.0}
    assert any(n.startswith("RL seed 2: not run") for n in bench.results["notes"])
    assert any(n.startswith("ablation no_fps: not run") for n in bench.results["notes"])


def test_resumed_rl_runs_skip_what_ran_and_estimate_from_it(tmp_path: Path) -> None:
    clock = [40.0]
    bench, ran = _scheduled_bench(tmp_path, budget=60.0, clock=clock)
    step = {"step": 1, "reward_mean": 0.0, "reward_std": 0.5, "entropy": 0.5, "grad_norm": 0.3}
    done = {"full seed 0 (collapse watch)", "full seed 1"}
    bench.results["rl_logs"] = {v: [step] for v in done}
    bench.results["rl_minutes"] = dict.fromkeys(done, 17.0)
    bench.rl_runs(tmp_path / "dpo", done=done)
    assert ran == ["full seed 2"]  # 20 left fits 17.85; the ablation's 17.85 does not fit the 3 left then


def test_resume_refuses_a_run_with_other_settings(tmp_path: Path) -> None:
    import pytest

    clock = [0.0]
    bench, _ = _scheduled_bench(tmp_path, budget=60.0, clock=clock)
    (tmp_path / "adapters" / "dpo").mkdir(parents=True)
    saved = {"stages": {"dpo": {}}, "config": {**json.loads(json.dumps(bench.config.__dict__)), "rl_steps": 10}}
    (tmp_path / "results.json").write_text(json.dumps(saved))
    with pytest.raises(SystemExit, match="other settings"):
        bench.resume()
