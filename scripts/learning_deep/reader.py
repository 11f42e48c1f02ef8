# ruff: noqa: E402, E501, E701, E702, E741, B905, S301, S614
"""Background reader: each case's prompt through the frozen layers 0..F-1 (F = L - K), kept on disk."""

import json
import random
import time
from pathlib import Path

import torch

torch.set_num_threads(2)
from transformers import DynamicCache

from agent.llm.grammar import JsonSchemaGrammar
from agent.strategy import rule_based_strategy
from learning.headroom import case_table, mr_row, strategy_of
from learning.replay import read_jsonl_cases
from learning.replay_reward import ReplayRewardConfig
from learning.strata.constrained import case_schema
from learning.strata.decision_targets import replay, vocabulary_bytes
from learning.strata.policy import PolicyConfig, StrategyPolicy, _decoder_stack, _only_layers
from learning.strata.replay_cache import CachedReplayEnv
from learning.visit_targets import contrast_plans, good_plans

K = 2
OUT = Path(".data/scratch/deep")
OUT.mkdir(parents=True, exist_ok=True)
base = Path(".data/models/smollm2-135m-instruct")
pol = StrategyPolicy.load(base, config=PolicyConfig(device="cpu", use_lora=False))
model = pol.model.eval()
L = model.config.num_hidden_layers
F = L - K
stack = _decoder_stack(model)
cases = read_jsonl_cases(Path(".data/scratch/env.jsonl"))
head = json.load(open("bench/learning_headroom.json"))
rows = {r["case_id"]: r for r in head["rows"]}
best_rule = head["summary"]["best_fixed_rule"]
env = CachedReplayEnv()
rc = ReplayRewardConfig()
held = [c for c in cases if c.split == "eval"]
train = [c for c in cases if c.split == "train"]
random.Random(0).shuffle(train)
order = train[:4] + held + train[4:]
eos = pol.tokenizer.eos_token or ""
V = int(model.config.vocab_size)
grammar = JsonSchemaGrammar(pol.tokenizer, vocab_size=V, stop_token_ids=pol.eos_ids)
vb = vocabulary_bytes(pol.tokenizer, vocab_size=V, eos_ids=pol.eos_ids)


def lower(ids, cache=None):
    captured = []
    hook = stack.norm.register_forward_pre_hook(lambda _m, a: captured.append(a[0].detach()))
    try:
        with torch.no_grad(), _only_layers(stack, slice(None, F)):
            out = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=1)
    finally:
        hook.remove()
    return out.past_key_values, captured[0][0].to(torch.bfloat16)


t0 = time.time()
for n, case in enumerate(order):
    path = OUT / f"{case.case_id}.pt"
    if path.exists():
        continue
    table = case_table(env, case, rc)
    mrow = mr_row(env, case, rc, random_plans=32, seed=0)
    row = rows[case.case_id]
    check = {
        "team": case.team,
        "team_recorded_headroom": row["team"],
        "oracle": mrow.oracle.reward,
        "oracle_recorded_headroom": row["oracle"]["reward"],
    }
    prompt = pol.prompt_ids(env.reset(case))
    cache, hidden = lower(prompt[:-1])
    kv = [(cache.layers[i].keys.to(torch.bfloat16), cache.layers[i].values.to(torch.bfloat16)) for i in range(F)]
    item = {
        "case_id": case.case_id,
        "split": case.split,
        "prompt": prompt,
        "kv": kv,
        "hidden": hidden,
        "check": check,
        "row": mrow,
        "table": {
            "budget": table.budget,
            "required": table.required,
            "readable": table.readable,
            "values": {v: o.reward for v, o in table.values.items()},
            "floor": table.floor.reward,
        },
        "plans": [],
    }
    if case.split == "train":
        change_type = rule_based_strategy(env.files(case), case.repo_config(), case.history).change_type
        good = good_plans(table)
        bad = contrast_plans(table, good[0]) if good else []
        compiled = grammar.compile(case_schema(case, env, decisions_only=True))
        for kind, plans in (("good", good), ("bad", bad)):
            for p in plans:
                text = strategy_of(list(p.visits), change_type=change_type).to_json()
                target = replay(
                    text, compiled, tokenizer=pol.tokenizer, token_bytes=vb, vocab_size=V, eos_ids=pol.eos_ids
                )
                if target is None:
                    print("  no replay for", text, flush=True)
                    continue
                ids = list(target.tokens)
                c = DynamicCache(ddp_cache_data=[(k.float(), v.float()) for k, v in kv], config=model.config)
                _, h = lower([prompt[-1], *ids[:-1]], cache=c)
                item["plans"].append(
                    {
                        "kind": kind,
                        "text": text,
                        "ids": ids,
                        "decisions": list(target.decisions),
                        "allowed": [list(a) for a in target.allowed],
                        "visits": list(p.visits),
                        "value": p.value,
                        "hidden": h,
                    }
                )
    torch.save(item, path)
    ok = (
        check["team"] == check["team_recorded_headroom"]
        and abs(check["oracle"] - check["oracle_recorded_headroom"]) < 1e-9
    )
    print(
        f"[{time.time() - t0:7.1f} s] {n + 1}/{len(order)} {case.case_id} P={len(prompt)} plans={len(item['plans'])} same_as_recorded_headroom={ok} oracle={mrow.oracle.reward:+.2f} rule={mrow.rule.reward:+.2f}",
        flush=True,
    )
