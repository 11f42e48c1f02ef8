"""`python -m bench.decoding`: tokens decoded and seconds per plan, token by token vs. jump-forward.

    python -m bench.decoding [--base-model DIR] [--mrs 12] [--no-record]

On the strategy prompts of envgen merge requests (the one renderer; each MR's decisions-only
schema), each plan is decoded greedily twice: token by token under the grammar mask
(`ConstrainedSampler`, what RL, the gate and the bench used) and with grammar-forced text skipped
(learning/strata/jump_forward.py). Reported per plan: forward passes after the prompt, seconds, and
how often the two greedy plans are the same. Without `--base-model` the model is the tiny test model
(learning/tiny_model.py, a 1,024-token BPE vocabulary: more tokens per plan than SmolLM2's, the same
forced share); its seconds say little about SmolLM2's, its token counts are the grammar's.
"""

from __future__ import annotations

import argparse
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

from bench.headroom import record
from learning.envgen.build import EnvGenConfig, make_env
from learning.envgen.sources import discover_packages
from learning.replay import ReplayEnv
from learning.strata.constrained import ConstrainedSampler, case_schema, make_grammar
from learning.strata.jump_forward import decode_jump_forward
from learning.strata.policy import PolicyConfig, StrategyPolicy

MAX_NEW_TOKENS = 400


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decoding", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-model", type=Path, default=None)
    parser.add_argument("--mrs", type=int, default=12)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    config = EnvGenConfig(n=max(args.mrs, 2), seed=0)
    cases = make_env(discover_packages(Path(sysconfig.get_paths()["purelib"]), min_files=config.min_files), config)
    cases = cases[: args.mrs]
    env = ReplayEnv()
    model_name = str(args.base_model)
    if args.base_model is None:
        from learning.tiny_model import build_tiny_model

        corpus = [env.reset(c) for c in cases]
        args.base_model = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", corpus=corpus, vocab_size=1024)
        model_name = "tiny test model (2 layers, 1,024-token BPE)"
    policy = StrategyPolicy.load(args.base_model, config=PolicyConfig(device="cpu", use_lora=False))
    grammar = make_grammar(policy)
    rows = []
    for case in cases:
        schema = case_schema(case, env, decisions_only=True)
        compiled = grammar.compile(schema)
        prompt = policy.prompt_ids(env.reset(case))
        started = time.perf_counter()
        [[before]] = ConstrainedSampler(policy, grammar, [schema]).sample(
            [prompt], n=1, temperature=0.0, max_new_tokens=MAX_NEW_TOKENS, seed=0
        )
        before_s = time.perf_counter() - started
        started = time.perf_counter()
        after = decode_jump_forward(policy, prompt, compiled, max_new_tokens=MAX_NEW_TOKENS)
        after_s = time.perf_counter() - started
        same = policy.decode(before) == policy.decode(after.tokens)
        rows.append((len(prompt), len(before), before_s, after.forward_passes + 1, after.forced, after_s, same))
        print(f"{case.case_id}: {len(before)} tokens in {before_s:.2f} s → {after.forward_passes + 1} passes "
              f"({after.forced} forced) in {after_s:.2f} s; same plan: {same}", flush=True)  # fmt: skip
    mean = statistics.mean
    section = "\n".join([
        "## Strategy decoding: token by token vs. jump-forward (grammar-forced text skipped)",
        "",
        f"`python -m bench.decoding --mrs {len(rows)}`: greedy decisions-only plans of {len(rows)} envgen merge "
        f"requests (prompts by the one renderer, mean {mean(r[0] for r in rows):.0f} prompt tokens), model: "
        f"{model_name}, CPU.",
        "",
        "| decoding | forward passes per plan | forced tokens per plan | seconds per plan |",
        "|---|---:|---:|---:|",
        f"| token by token (before) | {mean(r[1] for r in rows):.1f} | — | {mean(r[2] for r in rows):.3f} |",
        f"| jump-forward (after) | {mean(r[3] for r in rows):.1f} | {mean(r[4] for r in rows):.1f} | "
        f"{mean(r[5] for r in rows):.3f} |",
        "",
        f"The same greedy plan both ways on {sum(r[6] for r in rows)} of {len(rows)} MRs (forced text is tokenized "
        "on its own, so later choices can differ).",
    ]) + "\n"  # fmt: skip
    print(section)
    headline = (
        f"{mean(r[1] for r in rows):.0f} → {mean(r[3] for r in rows):.0f} forward passes per plan, "
        f"{mean(r[2] for r in rows):.3f} → {mean(r[5] for r in rows):.3f} s ({model_name})"
    )
    if not args.no_record:
        record(section, headline, name="strategy-decoding", title="Strategy decoding cost per plan")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
