# ruff: noqa: E402, E501, E701, E702, E741, B905, S301, S614
"""SFT (then DPO when time allows) with LoRA on the last K=2 layers over the deep prompt cache."""

import json
import random
import sys
import time
from pathlib import Path

import torch

torch.set_num_threads(2)
from learning.gate import parse_strategy
from learning.replay import read_jsonl_cases
from learning.replay_reward import ReplayRewardConfig, reward
from learning.strata.constrained import case_schema, make_grammar
from learning.strata.deep_cache import DeepPromptCache, deep_lora_targets
from learning.strata.deep_sft import ReadCase, ReadTarget, dpo_loss, plan_logprobs
from learning.strata.jump_forward import JumpForwardSampler
from learning.strata.policy import PolicyConfig, StrategyPolicy
from learning.strata.replay_cache import CachedReplayEnv

T0 = time.time()
STOP_TRAIN_AT = float(sys.argv[1])  # unix time: no new SFT epoch starts after it
STOP_DPO_AT = float(sys.argv[2])  # unix time: no new DPO epoch starts after it
import os

SMOKE = bool(os.environ.get("SMOKE"))
OUT = Path(".data/scratch/dpo_run")
OUT.mkdir(exist_ok=True, parents=True)
K = 2
LR = 1e-3
ACCUM = 2
VAL_MRS = 8
MAX_EPOCHS = 6
MODULES = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)
base = Path(".data/models/smollm2-135m-instruct")
cfg = json.loads((base / "config.json").read_text())
FIRST = cfg["num_hidden_layers"] - K


def log(m):
    print(f"[{(time.time() - T0) / 60:6.1f} min] {m}", flush=True)


policy = StrategyPolicy.load(
    base, config=PolicyConfig(device="cpu", lora_target_modules=deep_lora_targets(cfg, K, MODULES))
)
log(f"trainable params {sum(p.numel() for p in policy.trainable_parameters())}")
cases = {c.case_id: c for c in read_jsonl_cases(Path(".data/scratch/env.jsonl"))}
env = CachedReplayEnv()
rc = ReplayRewardConfig()
grammar = make_grammar(policy)
results = {
    "config": {"K": K, "lr": LR, "accum": ACCUM, "modules": MODULES, "lora_r": 16, "val_mrs": VAL_MRS},
    "epochs": [],
    "notes": [],
}


def save():
    (OUT / "results.json").write_text(json.dumps(results, indent=1))


items = {}
for f in sorted(Path(".data/scratch/deep").glob("*.pt")):
    items[f.stem] = torch.load(f, weights_only=False)
held_ids = [c for c in cases if cases[c].split == "eval"]
if SMOKE:
    held_ids = [h for h in held_ids if h in items][:2]
assert all(h in items for h in held_ids), "held-out not all read"
train_ids = [i for i, it in items.items() if it["split"] == "train" and it["plans"]]
# validation: whole packages of the read training MRs, chosen by a seeded draw (never held-out MRs)
pk = sorted({cases[i].package for i in train_ids})
random.Random(1).shuffle(pk)
val_ids, val_pk = [], []
for p in pk:
    if len(val_ids) >= VAL_MRS:
        break
    val_pk.append(p)
    val_ids += [i for i in train_ids if cases[i].package == p]
fit_ids = [i for i in train_ids if i not in val_ids]
if SMOKE:
    val_ids, fit_ids = train_ids[:1], train_ids[1:3]
results["ids"] = {"fit": fit_ids, "val": val_ids, "heldout": held_ids}
results["data"] = {
    "train_read": len(train_ids),
    "fit": len(fit_ids),
    "val": len(val_ids),
    "val_packages": val_pk,
    "heldout": len(held_ids),
}
log(f"data {results['data']}")


def read_case(it):
    def tgt(p):
        return ReadTarget(p["ids"], p["decisions"], p["allowed"], p["hidden"], p["value"])

    return ReadCase(
        it["case_id"],
        it["prompt"],
        it["hidden"],
        good=[tgt(p) for p in it["plans"] if p["kind"] == "good"],
        bad=[tgt(p) for p in it["plans"] if p["kind"] == "bad"],
    )


fit = [read_case(items[i]) for i in fit_ids]

cache = DeepPromptCache(max_bytes=1 << 40, first_trainable=FIRST)
for i in held_ids + val_ids:
    cache.put(items[i]["prompt"], items[i]["kv"], items[i]["hidden"])
for i in list(items):
    if i not in held_ids and i not in val_ids:
        items[i].pop("kv", None)


def outcome(case, text):
    z = parse_strategy(text)
    if z is None:
        return {"reward": -0.5, "valid": 0.0, "plan": text}
    ex = env.execute(case, z)
    valid = not ex.added_by_safety_net
    return {"reward": reward(ex, case, rc) if valid else -0.5, "valid": float(valid), "plan": text}


def evaluate(ids):
    policy.prompt_cache = cache
    cs = [cases[i] for i in ids]
    sampler = JumpForwardSampler(policy, grammar, [case_schema(c, env, decisions_only=True) for c in cs])
    out = sampler.sample([items[i]["prompt"] for i in ids], n=1, temperature=0.0, max_new_tokens=224, seed=0)
    policy.prompt_cache = None
    return [dict(outcome(c, policy.decode(r[0])), case_id=c.case_id) for c, r in zip(cs, out)]


def mean(rows):
    return sum(r["reward"] for r in rows) / len(rows)


def oracle_mean(ids):
    return sum(items[i]["row"].oracle.reward for i in ids) / len(ids)


def snapshot():
    return {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}


def restore(state):
    with torch.no_grad():
        for n, p in policy.model.named_parameters():
            if n in state:
                p.copy_(state[n])


# the SFT run's selected adapter, loaded into this policy's (identically configured) LoRA weights
from peft import set_peft_model_state_dict
from safetensors.torch import load_file

sft_dir = Path(".data/scratch/sft_run/adapter_sft")
set_peft_model_state_dict(policy.model, load_file(str(sft_dir / "adapter_model.safetensors")))
sft_run = json.loads(Path(".data/scratch/sft_run/results.json").read_text())
assert sft_run["ids"] == results["ids"], "other split than the SFT run"
results["epochs"] = sft_run["epochs"]
results["val_base"] = sft_run["val_base"]
best = (
    sft_run["epochs"][sft_run["best_epoch"] - 1]["val"] if sft_run["best_epoch"] else sft_run["val_base"],
    sft_run["best_epoch"],
)
val = evaluate(val_ids)
log(f"val greedy of the loaded SFT adapter {mean(val):+.3f} (SFT run: {best[0]:+.3f})")
results["val_sft_loaded"] = mean(val)
rng = random.Random(0)
# --- DPO from the selected SFT adapter: (good, one-decision-worse) pairs of the same MR --------------
dpo_fit = [c for c in fit if c.good and c.bad]
results["dpo_data"] = {"mrs": len(dpo_fit), "pairs": sum(len(c.good) * len(c.bad) for c in dpo_fit)}
if time.time() < STOP_DPO_AT and dpo_fit:
    policy.model.eval()
    refs = {c.case_id: plan_logprobs(policy, FIRST, c) for c in dpo_fit}
    log(f"DPO reference log-probabilities for {len(refs)} MRs; pairs {results['dpo_data']}")
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=5e-4, weight_decay=0.0)
    dbest = (results["epochs"][best[1] - 1]["val"] if best[1] else results["val_base"], 0)
    dstate = snapshot()
    results["dpo_epochs"] = []
    for epoch in range(1, 4):
        if time.time() > STOP_DPO_AT:
            results["notes"].append(f"DPO stopped before epoch {epoch}: time")
            break
        order = dpo_fit[:]
        rng.shuffle(order)
        policy.model.train()
        total = 0.0
        opt.zero_grad()
        for n, c in enumerate(order, 1):
            loss = dpo_loss(policy, FIRST, c, refs[c.case_id], beta=0.1) / ACCUM
            loss.backward()
            total += float(loss.detach()) * ACCUM
            if n % ACCUM == 0 or n == len(order):
                torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), 1.0)
                opt.step()
                opt.zero_grad()
        val = evaluate(val_ids)
        results["dpo_epochs"].append({"epoch": epoch, "loss": total / len(order), "val": mean(val)})
        log(f"DPO epoch {epoch}: loss {total / len(order):.4f} val greedy {mean(val):+.3f}")
        if mean(val) > dbest[0]:
            dbest = (mean(val), epoch)
            dstate = snapshot()
        save()
    results["dpo_best_epoch"] = dbest[1]
    restore(dstate)
    policy.save(OUT / "adapter_dpo")
    held = evaluate(held_ids)
    results["heldout_dpo"] = held
    log(f"held-out DPO greedy {mean(held):+.3f} (DPO epoch {dbest[1]}; 0 = the SFT adapter)")
    save()
