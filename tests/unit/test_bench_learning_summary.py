"""`python -m bench.learning --summary`: one JSON line from the headroom run and a training run's results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.learning import main
from bench.learning_summary import summary
from reviewers.kernel.errors import InputError


def _headroom(rule: list[float], oracle: list[float]) -> dict[str, object]:
    rows = [{"case_id": "t0", "split": "train", "rule": {"reward": 9.0}, "oracle": {"reward": 9.0}}]
    rows += [
        {"case_id": f"e{i}", "split": "eval", "rule": {"reward": r}, "oracle": {"reward": o}}
        for i, (r, o) in enumerate(zip(rule, oracle, strict=True))
    ]
    return {"rows": rows}


def _results(stages: dict[str, list[float]], ids: list[str]) -> dict[str, object]:
    return {
        "held_out_case_ids": ids,
        "stages": {s: {"greedy": [[{"reward": r} for r in rewards]]} for s, rewards in stages.items()},
    }


def test_summary_pairs_every_stage_by_hand() -> None:
    headroom = _headroom(rule=[0.0, 0.0, 0.0], oracle=[1.0, 1.0, 1.0])
    results = _results({"base": [0.0, 0.0, 0.0], "sft": [0.5, 0.5, 0.5], "rl": [1.0, 0.5, 0.0]}, ["e0", "e1", "e2"])
    out = summary(headroom, results)
    assert out["heldout_mrs"] == 3 and out["gap_oracle_minus_rule"] == 1.0
    sft, rl = out["stages"]["sft"], out["stages"]["rl"]
    assert sft["mean"] == 0.5 and sft["captured_share"] == 0.5
    assert sft["paired_vs_rule"] == {"mean": 0.5, "lo": 0.5, "hi": 0.5, "p": 0.25}  # 3 equal diffs: 2 of 8
    assert sft["paired_vs_previous"] == sft["paired_vs_base"]  # base precedes sft
    # rl − sft per MR: +0.5, 0, −0.5: mean 0, every sign pattern at least as far: p = 1
    assert rl["paired_vs_previous"]["mean"] == 0.0 and rl["paired_vs_previous"]["p"] == 1.0
    assert out["missing_stages"] == ["dpo"] and "dpo" not in out["stages"]


def test_summary_refuses_results_over_other_merge_requests_and_prints_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "headroom.json").write_text(json.dumps(_headroom([0.0, 0.1], [0.5, 0.2])))
    (tmp_path / "results.json").write_text(json.dumps(_results({"base": [0.0, 0.0]}, ["x", "y"])))
    with pytest.raises(SystemExit, match="evaluated on other merge requests"):
        main(["--summary", "--out", str(tmp_path), "--headroom", str(tmp_path / "headroom.json")])
    (tmp_path / "results.json").unlink()  # no training run yet: the references alone
    main(["--summary", "--results", str(tmp_path / "results.json"), "--headroom", str(tmp_path / "headroom.json")])
    line = capsys.readouterr().out.strip()
    assert "\n" not in line
    data = json.loads(line)
    assert data["heldout_mrs"] == 2 and data["gap_oracle_minus_rule"] == 0.3 and data["stages"] == {}


def test_each_stage_is_paired_with_the_best_fixed_rule_too() -> None:
    headroom = _headroom(rule=[0.0, 0.0], oracle=[1.0, 1.0])
    chosen = "largest order, then nothing"
    headroom["summary"] = {"best_fixed_rule": chosen}
    for row, value in zip(headroom["rows"][1:], (0.5, 0.25), strict=True):  # type: ignore[index]
        row["fixed"] = {chosen: {"reward": value}}
    headroom["rows"][0]["fixed"] = {chosen: {"reward": 9.0}}  # type: ignore[index]
    out = summary(headroom, _results({"sft": [0.5, 0.75]}, ["e0", "e1"]))
    assert out["best_fixed_rule"] == chosen and out["best_fixed_mean"] == 0.375
    assert out["stages"]["sft"]["paired_vs_best_fixed"]["mean"] == 0.25


def test_same_ids_over_other_merge_requests_are_refused_by_fingerprint(tmp_path: Path) -> None:
    """Ids are positional (envgen-0007 on any package set): the content fingerprint tells them apart."""
    from learning.fingerprint import environment_fingerprint
    from learning.replay import ReplayCase

    here = [ReplayCase(case_id=f"e{i}", diff=f"--- a/x{i}.py\n+++ b/x{i}.py\n", split="eval") for i in range(2)]
    there = [ReplayCase(case_id=f"e{i}", diff=f"--- a/y{i}.py\n+++ b/y{i}.py\n", split="eval") for i in range(2)]
    assert [c.case_id for c in here] == [c.case_id for c in there]
    assert environment_fingerprint(here) != environment_fingerprint(there)
    assert environment_fingerprint(here) == environment_fingerprint([c.model_copy() for c in here])
    headroom = {**_headroom([0.0, 0.1], [0.5, 0.2]), "heldout_fingerprint": environment_fingerprint(here)}
    results = {**_results({"sft": [0.2, 0.1]}, ["e0", "e1"]), "heldout_fingerprint": environment_fingerprint(there)}
    with pytest.raises(InputError, match="environments differ"):
        summary(headroom, results)
    results["heldout_fingerprint"] = environment_fingerprint(here)
    out = summary(headroom, results)
    assert out["fingerprint"] == out["results_fingerprint"] == environment_fingerprint(here)
    assert out["stages"]["sft"]["captured_share_interval"] is not None


def test_summary_on_a_clean_checkout_prints_the_recorded_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No .data/ work directory: the recorded bench/learning_results.json is what is summarised."""
    main(["--summary", "--out", str(tmp_path / "never-run")])
    data = json.loads(capsys.readouterr().out)
    assert data["heldout_mrs"] >= 72 and set(data["stages"]) >= {"base", "sft", "dpo", "rl"}
    assert "fingerprint" in data
    for stage in data["stages"].values():
        lo, hi = stage["captured_share_interval"]
        assert lo <= stage["captured_share"] <= hi


def test_captured_share_interval_by_hand() -> None:
    from learning.paired_stats import captured_share_interval

    # every MR captures exactly half its gap: every resample's share is 0.5
    assert captured_share_interval([0.5, 1.0, 0.25], [0.0, 0.0, 0.0], [1.0, 2.0, 0.5]) == (0.5, 0.5)
    assert captured_share_interval([0.0], [0.0], [0.0]) is None  # no headroom
