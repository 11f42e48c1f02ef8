# ruff: noqa: E402, E501, E701, E702, E741, B905, S301, S614
"""The held-out table: each stage paired MR by MR with the best fixed rule (chosen on the read training MRs)."""

import json
from pathlib import Path

import torch

from learning.paired_stats import captured_share, captured_share_interval, mean, paired_difference

run = json.loads(Path(".data/scratch/sft_run/results.json").read_text())
ridge = json.loads(Path(".data/scratch/ridge.json").read_text()) if Path(".data/scratch/ridge.json").exists() else None
ids = run["ids"]
rows = {}
for s in ("fit", "val", "heldout"):
    for i in ids[s]:
        rows[i] = torch.load(f".data/scratch/deep/{i}.pt", weights_only=False, map_location="cpu")["row"]
train = ids["fit"] + ids["val"]
names = list(rows[train[0]].fixed)
best_rule = max(
    names,
    key=lambda n: (
        sum(rows[i].fixed[n].reward for i in train if n in rows[i].fixed)
        if all(n in rows[i].fixed for i in train)
        else -1e9
    ),
)
H = ids["heldout"]
ref = {
    "rule plan": [rows[i].rule.reward for i in H],
    "random valid plans": [rows[i].random.reward for i in H],
    "oracle": [rows[i].oracle.reward for i in H],
    "best fixed rule": [rows[i].fixed[best_rule].reward for i in H],
}
stages = {}
if ridge:
    stages["ridge on s1 (non-LM reference)"] = [ridge["heldout"][i] for i in H]
dpo_path = Path(".data/scratch/dpo_run/results.json")
dpo_run = json.loads(dpo_path.read_text()) if dpo_path.exists() else {}
if dpo_run:
    assert dpo_run["ids"] == ids
for key, name in (("heldout_sft", "SFT"), ("heldout_dpo", "DPO")):
    src = (
        run if key in run else (dpo_run if dpo_run.get("dpo_best_epoch") else {})
    )  # DPO epoch 0 = the SFT adapter: no DPO row
    if key in src:
        run[key] = src[key]
        by = {r["case_id"]: r for r in run[key]}
        stages[name] = [by[i]["reward"] for i in H]
table = {}
for name, vals in {**ref, **stages}.items():
    entry = {"mean": mean(vals)}
    if name not in ("best fixed rule",):
        entry["minus_best_fixed_rule"] = paired_difference(vals, ref["best fixed rule"]).as_dict()
    entry["captured_share_of_oracle_minus_rule"] = captured_share(
        mean(vals), mean(ref["rule plan"]), mean(ref["oracle"])
    )
    ci = captured_share_interval(vals, ref["rule plan"], ref["oracle"])
    entry["captured_share_interval"] = list(ci) if ci else None
    table[name] = entry
if "SFT" in stages and "DPO" in stages:
    table["DPO"]["minus_SFT"] = paired_difference(stages["DPO"], stages["SFT"]).as_dict()
for name, e in table.items():
    d = e.get("minus_best_fixed_rule")
    print(
        f"{name:34s} {e['mean']:+.3f}"
        + (f"  − best fixed {d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] p={d['p']:.4f}" if d else "")
        + (
            f"  share {e['captured_share_of_oracle_minus_rule']:.0%}"
            if e["captured_share_of_oracle_minus_rule"] is not None
            else ""
        )
    )
json.dump(
    {"best_fixed_rule": best_rule, "table": table, "per_mr": {"case_ids": H, **ref, **stages}},
    open(".data/scratch/aggregate.json", "w"),
    indent=1,
)
print("best fixed rule (on the read training MRs):", best_rule)

# --- the file to record --------------------------------------------------------------------------
import subprocess

commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
reads = [l for l in Path(".data/scratch/reader.log").read_text().splitlines() if "same_as_recorded_headroom" in l]
record = {
    "what": "issue 41 Done-when 1, CPU: SFT on several good plans per MR, loss on the decisions only, LoRA r16 on every linear of the last 2 layers (k/v included) over a prompt cache of the frozen 28 layers; ridge-on-s1 reference; paired with the best fixed rule MR by MR on the held-out MRs",
    "environment": {
        "fingerprint": "4e18c7b81106f0d1",
        "heldout_fingerprint": "2a0062c2d6805289",
        "envgen": "EnvGenConfig(n=240, seed=0) over /work/main/.venv site-packages",
        "matches_recorded_headroom": False,
        "note": "bench/learning_headroom.json (recorded without a fingerprint) is over other MRs: team or oracle reward differ on ("
        + str(sum("same_as_recorded_headroom=False" in l for l in reads))
        + " of "
        + str(len(reads))
        + " MRs read; the rest by chance). Every reference below (rule, random, oracle, fixed rules) was recomputed on this environment with learning.headroom.mr_row, the function bench.headroom uses.",
    },
    "best_fixed_rule": best_rule,
    "best_fixed_rule_chosen_on": f"the {len(train)} training MRs read (fit + validation), not all 168",
    "training": {
        "config": run["config"],
        "data": run["data"],
        "sft_epochs": run["epochs"],
        "val_base": run["val_base"],
        "best_epoch_on_validation": run.get("best_epoch"),
        "dpo": {
            k: dpo_run[k]
            for k in ("dpo_data", "dpo_epochs", "dpo_best_epoch", "val_sft_loaded", "notes")
            if k in dpo_run
        },
        "notes": run["notes"],
    },
    "ridge": {k: ridge[k] for k in ("val", "alpha", "heldout_mean", "fit_on")} if ridge else None,
    "heldout": table,
    "per_mr": {"case_ids": H, **ref, **stages},
    "code_commit": commit,
}
Path("bench/learning_results_cpu_new.json").write_text(json.dumps(record, indent=1) + "\n")
print("wrote bench/learning_results_cpu_new.json")
