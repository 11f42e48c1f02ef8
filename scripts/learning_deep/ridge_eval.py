# ruff: noqa: E402, E501, E701, E702, E741, B905, S301, S614
"""Ridge-on-s1 reference: fit on the SFT run's fit MRs, alpha chosen on its validation MRs, held-out once."""

import json
from pathlib import Path

import torch
from transformers import AutoTokenizer

from learning.headroom import CaseTable, Outcome, case_table
from learning.replay import read_jsonl_cases
from learning.replay_reward import ReplayRewardConfig
from learning.ridge_policy import RidgePolicy
from learning.strata.replay_cache import CachedReplayEnv

run = json.loads(Path(".data/scratch/sft_run/results.json").read_text())
ids = run["ids"]
tok = AutoTokenizer.from_pretrained(".data/models/smollm2-135m-instruct")
cases = {c.case_id: c for c in read_jsonl_cases(Path(".data/scratch/env.jsonl"))}
env = CachedReplayEnv()
rc = ReplayRewardConfig()


def load(i):
    it = torch.load(f".data/scratch/deep/{i}.pt", weights_only=False, map_location="cpu")
    s1 = tok.decode(it["prompt"])
    if "table" in it:
        t = it["table"]
        table = CaseTable(
            cases[i],
            t["budget"],
            t["required"],
            t["readable"],
            {tuple(v): Outcome(r, 0, 0, 0, 0, 0) for v, r in t["values"].items()},
            {},
            Outcome(t["floor"], 0, 0, 0, 0, 0),
        )
    else:
        table = case_table(env, cases[i], rc)
    return s1, table


data = {i: load(i) for s in ("fit", "val", "heldout") for i in ids[s]}


def score(policy, which):
    return [data[i][1].total(policy.plan(*data[i])).reward for i in ids[which]]


out = {"val": {}}
for alpha in (0.1, 1.0, 10.0):
    pol = RidgePolicy(alpha=alpha).fit([data[i] for i in ids["fit"]])
    v = score(pol, "val")
    out["val"][alpha] = sum(v) / len(v)
alpha = max(out["val"], key=out["val"].get)
pol = RidgePolicy(alpha=alpha).fit([data[i] for i in ids["fit"] + ids["val"]])
held = score(pol, "heldout")
out |= {
    "alpha": alpha,
    "heldout": dict(zip(ids["heldout"], held)),
    "heldout_mean": sum(held) / len(held),
    "fit_on": len(ids["fit"]) + len(ids["val"]),
}
print(json.dumps({k: v for k, v in out.items() if k != "heldout"}))
Path(".data/scratch/ridge.json").write_text(json.dumps(out, indent=1))
