"""`python -m bench.learning --summary`: one JSON line from the recorded learning results.

    {"heldout_mrs": N, "gap_oracle_minus_rule": G,
     "stages": {"base"|"sft"|"dpo"|"rl": {"mean": …, "paired_vs_rule": {"mean", "lo", "hi", "p"},
                "paired_vs_base": {…}, "paired_vs_previous": {…}, "captured_share": …}}}

The held-out MRs, the rule plan and the oracle come from the headroom run (`python -m bench.headroom`,
bench/learning_headroom.json): they are measured before any training, so a null is readable. A
stage's per-MR held-out rewards come from a training run's results.json (`held_out_case_ids` and
`stages.<stage>.greedy[k][i].reward`, averaged over the stage's runs k: RL has one per seed); a stage
is paired with the references MR by MR, so a results
file over other merge requests is refused with one line rather than compared. Ids alone do not say
that (they are positional: equal for any package set), so each file carries the held-out MRs'
content fingerprint (`learning.fingerprint`) and a mismatch is refused; a file recorded before
fingerprints existed is paired by id and marked unverified. Each stage's captured share carries a
paired bootstrap interval. Stages with no recorded run are absent, and `missing_stages` says which.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from learning.fingerprint import require_same_environment
from learning.paired_stats import captured_share, captured_share_interval, paired_difference
from reviewers.kernel.errors import InputError

STAGES = ("base", "sft", "dpo", "rl")
UNVERIFIED = "unrecorded (this file predates fingerprints: paired by case id only, unverified)"


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read the {what} {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise InputError(f"the {what} {path} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"the {what} {path} is not a JSON object")
    return data


def _brief(d: dict[str, float]) -> dict[str, float]:
    return {k: round(d[k], 4) for k in ("mean", "lo", "hi", "p")}


def summary(headroom: dict[str, Any], results: dict[str, Any] | None) -> dict[str, Any]:
    """The summary object (see the module docstring) from the headroom file and a training run's results."""
    held = [r for r in headroom["rows"] if r["split"] == "eval"]
    if not held:
        raise InputError("the headroom file has no held-out merge requests")
    ids = [r["case_id"] for r in held]
    rule = [r["rule"]["reward"] for r in held]
    oracle = [r["oracle"]["reward"] for r in held]
    gap = paired_difference(oracle, rule)
    rule_mean, oracle_mean = sum(rule) / len(rule), sum(oracle) / len(oracle)
    # the best MR-independent rule, chosen on the training MRs: what a stage must beat to have learned
    # more than one fixed habit
    chosen = (headroom.get("summary") or {}).get("best_fixed_rule")
    fixed = (
        [r["fixed"][chosen]["reward"] for r in held]
        if chosen and all(chosen in r.get("fixed", {}) for r in held)
        else None
    )
    out: dict[str, Any] = {
        "heldout_mrs": len(held),
        "gap_oracle_minus_rule": round(gap.mean, 4),
        "gap_interval": [round(gap.lo, 4), round(gap.hi, 4)],
        "rule_mean": round(rule_mean, 4),
        "oracle_mean": round(oracle_mean, 4),
        "fingerprint": headroom.get("heldout_fingerprint") or UNVERIFIED,
        "stages": {},
    }
    if fixed is not None:
        out["best_fixed_rule"] = chosen
        out["best_fixed_mean"] = round(sum(fixed) / len(fixed), 4)
    per_stage: dict[str, list[float]] = {}
    if results is not None:
        recorded = results.get("held_out_case_ids")
        stages = results.get("stages") or {}
        require_same_environment(
            headroom.get("heldout_fingerprint"), results.get("heldout_fingerprint"), what="training results vs headroom"
        )
        out["results_fingerprint"] = results.get("heldout_fingerprint") or UNVERIFIED
        if stages and recorded != ids:
            raise InputError(
                "the training results were evaluated on other merge requests than the headroom run "
                f"({len(recorded or [])} recorded, {len(ids)} held out): rerun one of them on the same environment"
            )
        for stage in STAGES:
            runs = (stages.get(stage) or {}).get("greedy") or []
            if runs:
                # a stage run more than once (RL: one run per seed) counts as its mean per MR
                per_stage[stage] = [sum(float(run[i]["reward"]) for run in runs) / len(runs) for i in range(len(ids))]
    previous: list[float] | None = None
    for stage in STAGES:
        rewards = per_stage.get(stage)
        if rewards is None:
            continue
        mean = sum(rewards) / len(rewards)
        entry: dict[str, Any] = {
            "mean": round(mean, 4),
            "paired_vs_rule": _brief(paired_difference(rewards, rule).as_dict()),
            "captured_share": None if (s := captured_share(mean, rule_mean, oracle_mean)) is None else round(s, 4),
            "captured_share_interval": None
            if (ci := captured_share_interval(rewards, rule, oracle)) is None
            else [round(ci[0], 4), round(ci[1], 4)],
        }
        if fixed is not None:
            entry["paired_vs_best_fixed"] = _brief(paired_difference(rewards, fixed).as_dict())
        if "base" in per_stage and stage != "base":
            entry["paired_vs_base"] = _brief(paired_difference(rewards, per_stage["base"]).as_dict())
        if previous is not None:
            entry["paired_vs_previous"] = _brief(paired_difference(rewards, previous).as_dict())
        out["stages"][stage] = entry
        previous = rewards
    out["missing_stages"] = [s for s in STAGES if s not in per_stage]
    return out


def summary_line(headroom_file: Path, results_file: Path | None) -> str:
    headroom = _read(headroom_file, "headroom file (run `python -m bench.headroom`)")
    results = _read(results_file, "training results") if results_file is not None and results_file.is_file() else None
    return json.dumps(summary(headroom, results), separators=(",", ":"))
