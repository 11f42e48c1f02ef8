"""`make bench-learning`: does the strategy model learn? base → SFT → DPO → StraTA RL on SmolLM2-135M.

    python -m bench.learning [--out DIR] [--budget-minutes M] [--steps S] [--seeds K] ...
    python -m bench.learning --report-only DIR/results.json
    python -m bench.learning --summary [--out DIR] [--headroom bench/learning_headroom.json]

Merge requests come from learning/envgen over the Python packages installed beside this interpreter;
the held-out ones are from packages no training merge request touches. Every stage is a LoRA
adapter on the real base model (`reviewloop dev base-model`), trained on the CPU and evaluated on
the held-out MRs greedily and by sampling, with strategies decoded under each MR's decisions-only
schema (one reviewer, or security first and one more on a code change; focus paths in order;
learning/strata/constrained.py):

- SFT: each training MR's oracle plan (the best valid plan, from the cached visit table of
  learning/headroom.py), prompted with the one strategy-prompt renderer serving uses.
- DPO: (oracle, worst plan seen) per MR, on top of the SFT adapter (learning/strata/preference.py).
- RL: StraTA from the DPO adapter, several seeds (each seed's step-S evaluation is an "rl" run; the
  summary averages them per MR); ablations at equal compute; seed 0 is the collapse watch (reward std,
  entropy, gradient-norm spikes), run on to `--watch-factor` × S steps when time allows. Its first S
  steps are exactly a S-step run (the schedule does not depend on the step count).

Every prompt is read once for the whole run: LoRA sits on the last layer's query, output and MLP
weights, which cannot change a prompt's keys and values (learning/strata/policy.py PromptCache), and
plans are decoded by jump-forward (learning/strata/jump_forward.py): a forward pass per choice.

Results go to DIR/results.json after every stage (a stopped run keeps what it measured), then the run
is recorded in bench/RESULTS.md, paired MR by MR with the headroom run's rule and oracle plans
(bench/learning_headroom.json), and bench/learning_reward.png is drawn. `--budget-minutes` skips the
optional stages (later seeds, ablations) that would not fit, and says so in the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sysconfig
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from bench.learning_report import SECTION_TITLE, plot_rewards, render_markdown
from bench.report import git_commit
from learning.envgen.build import EnvGenConfig, make_env, seeded_profiles
from learning.envgen.sources import discover_packages
from learning.fingerprint import environment_fingerprint
from learning.gate import parse_strategy
from learning.replay import ReplayCase, read_jsonl_cases, write_jsonl_cases
from learning.replay_reward import ReplayRewardConfig, match_labeled, reward
from learning.strata.config import AblationName, StrataConfig
from learning.strata.constrained import ConstrainedSampler
from learning.strata.jump_forward import JumpForwardSampler
from learning.strata.policy import Device, PolicyConfig, PromptCache, StrategyPolicy
from learning.strata.replay_cache import CachedReplayEnv
from learning.strata.run_config import RLTrainConfig

ROOT = Path(__file__).resolve().parent.parent
INVALID_REWARD = -0.5
WATCH_VARIANT = "full seed 0 (collapse watch)"
MAX_NEW_TOKENS = 224  # a decisions-only plan: ~90 tokens for one reviewer, up to ~190 for two with three paths each
# LoRA on the last layer's query, output and MLP weights only (0.16M parameters): then training never
# changes what any layer reads of a prompt, so each ~1,300-token prompt is read once for the whole run
# (learning/strata/policy.py PromptCache) and every score and decode reads only its ~150 answer tokens.
# With LoRA on the last four layers a prompt was read again for every score: ~10 s a time on this CPU.
LORA_MODULES = ("self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
PROMPT_CACHE_BYTES = 9 << 30  # bfloat16, ~30 MB a prompt: all 240 MRs' prompts fit
# A run's time over the mean of the full seeds so far: with every prompt read up front an RL seed's time
# is steady (17.6 min for seed 0 on the 2-core box, 2026-11-26), so the margin covers load, not reading.
SEED_MARGIN = 1.05


RECORDED_RESULTS = Path(__file__).resolve().parent / "learning_results.json"


def heldout_fingerprint(cases: Sequence[ReplayCase]) -> str:
    return environment_fingerprint([c for c in cases if c.split == "eval"])


@dataclass(frozen=True)
class BenchConfig:
    # envgen's defaults (10–16 files, 0–3 defects and decoys, budget 30 %, 10 seeded teams), the same
    # environment `python -m bench.headroom` measures: 240 MRs, 72 held out from unseen packages.
    n_mrs: int = 240
    env_seed: int = 0
    sft_cases: int = 168  # every training MR: its oracle plan is read from the cached table, not sampled
    sft_steps: int = 60  # batches of 4: every training MR's oracle plan about 1.4 times
    dpo_steps: int = 30
    rl_steps: int = 30  # issue 24: at least 30 steps of 4 MRs each
    plans_per_mr: int = 4  # N: with 2, most groups had no reward spread and were skipped (run of a4f0009)
    seeds: int = 3
    ablations: tuple[str, ...] = ("no_fps", "no_filter", "no_judge", "plain_mean")
    sampled_eval_stages: tuple[str, ...] = ("base", "rl")  # sampling costs a second pass per stage
    watch_factor: int = 1  # seed 0 runs on to this many × rl_steps as the collapse watch (3 when time allows)
    decoding_mrs: int = 6  # held-out MRs decoded both ways for the decoding-cost row
    budget_minutes: float = 85.0
    # torch's threads: a ~1,300-token prompt read takes 4.8 s on one core of the 2-core box, 2.7 s on two;
    # a one-token decoding pass takes ~58 ms either way. The bench has the machine to itself.
    threads: int = 2
    # "cuda" trains and decodes on a GPU in bfloat16 (PolicyConfig's default there); the recorded CPU
    # runs use "cpu" (float32).
    device: Device = "cpu"


def lora_targets(model_dir: Path) -> tuple[str, ...]:
    """The last layer's LORA_MODULES: weights that cannot change a prompt's keys and values."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    last = int(config["num_hidden_layers"]) - 1
    return tuple(f"model.layers.{last}.{n}" for n in LORA_MODULES)


class Bench:
    def __init__(self, config: BenchConfig, *, out: Path, base_model: Path, headroom: Path | None = None) -> None:
        self.headroom = headroom
        self.config = config
        self.out = out
        self.base_model = base_model
        self.started = time.monotonic()
        self.env = CachedReplayEnv()
        self.reward_config = ReplayRewardConfig()
        self.profiles = {t.name: t for t in seeded_profiles(EnvGenConfig(n=config.n_mrs, seed=config.env_seed))}
        self.policy_config = PolicyConfig(device=config.device, lora_target_modules=lora_targets(base_model))
        self.prompt_cache = PromptCache(max_bytes=PROMPT_CACHE_BYTES)
        self.results: dict[str, Any] = {"stages": {}, "curves": {}, "ablations": {}, "rl_logs": {}, "notes": []}
        self.train: list[ReplayCase] = []
        self.heldout: list[ReplayCase] = []
        self._grammar: Any = None

    # --- bookkeeping ----------------------------------------------------------------------------

    def minutes(self) -> float:
        return (time.monotonic() - self.started) / 60

    def log(self, msg: str) -> None:
        print(f"[{self.minutes():6.1f} min] {msg}", flush=True)

    def save(self) -> None:
        self.results["duration_s"] = round(time.monotonic() - self.started, 1)
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1), encoding="utf-8")

    # --- environment ----------------------------------------------------------------------------

    def headroom_fingerprint(self) -> str | None:
        """The held-out fingerprint of the headroom file this run will be paired with (None: none yet)."""
        if self.headroom is None or not self.headroom.is_file():
            return None
        value = json.loads(self.headroom.read_text(encoding="utf-8")).get("heldout_fingerprint")
        return str(value) if value else None

    def build_env(self) -> None:
        c = self.config
        cached = self.out / "env.jsonl"
        expected = self.headroom_fingerprint()
        cases = read_jsonl_cases(cached) if cached.is_file() else None
        if cases is not None and expected is not None and heldout_fingerprint(cases) != expected:
            # the headroom was rebuilt since this environment was cached: the cache is over other MRs
            print(f"bench.learning: {cached} is not the headroom's environment; rebuilding it", flush=True)
            cases = None
        if cases is None:
            source = Path(sysconfig.get_paths()["purelib"])
            env_config = EnvGenConfig(n=c.n_mrs, seed=c.env_seed)
            packages = discover_packages(source, min_files=env_config.min_files)
            cases = make_env(packages, env_config)
            write_jsonl_cases(cached, cases)
        self.results["heldout_fingerprint"] = heldout_fingerprint(cases)
        if expected is not None and self.results["heldout_fingerprint"] != expected:
            raise SystemExit(
                f"bench.learning: this interpreter's packages give other held-out MRs (fingerprint "
                f"{self.results['heldout_fingerprint']}) than the headroom run ({expected}): run "
                "`python -m bench.headroom` here first"
            )
        self.train = [x for x in cases if x.split == "train"]
        self.heldout = [x for x in cases if x.split == "eval"]
        train_pk = sorted({x.package or "" for x in self.train})
        held_pk = sorted({x.package or "" for x in self.heldout})
        if set(train_pk) & set(held_pk):
            raise SystemExit("envgen split leaked a package into both splits")
        self.results["held_out_case_ids"] = [x.case_id for x in self.heldout]
        self.results["heldout"] = {
            "cases": len(self.heldout), "packages": held_pk,
            "train_cases": len(self.train), "train_packages": len(train_pk),
            "defects": sum(1 for x in self.heldout for f in x.findings if not f.kind.startswith("decoy:")),
            "decoys": sum(1 for x in self.heldout for f in x.findings if f.kind.startswith("decoy:")),
        }  # fmt: skip
        self.log(f"env: {len(self.train)} train MRs, {len(self.heldout)} held-out MRs from {held_pk}")

    # --- sampling and evaluation ---------------------------------------------------------------------

    def sampler(
        self, policy: StrategyPolicy, cases: Sequence[ReplayCase], *, jump_forward: bool = True
    ) -> JumpForwardSampler | ConstrainedSampler:
        from learning.strata.constrained import case_schema, make_grammar

        if self._grammar is None:
            self._grammar = make_grammar(policy)
        schemas = [case_schema(x, self.env, decisions_only=True) for x in cases]
        if jump_forward:
            return JumpForwardSampler(policy, self._grammar, schemas)
        return ConstrainedSampler(policy, self._grammar, schemas)

    def generate(
        self, policy: StrategyPolicy, cases: Sequence[ReplayCase], *, n: int, temperature: float, seed: int
    ) -> list[list[list[int]]]:
        prompts = [policy.prompt_ids(self.env.reset(x)) for x in cases]
        sampler = self.sampler(policy, cases)
        return sampler.sample(prompts, n=n, temperature=temperature, max_new_tokens=MAX_NEW_TOKENS, seed=seed)

    def decoding_cost(self, policy: StrategyPolicy, cases: Sequence[ReplayCase]) -> None:
        """Issue 24, Build 5: the same greedy plans decoded token by token and by jump-forward, prompts
        already read (the prompt cache serves both), so the figures are the answer's cost alone."""
        prompts = [policy.prompt_ids(self.env.reset(x)) for x in cases]
        for prompt in prompts:
            self.prompt_cache.get(policy, prompt)  # read outside the timing
        rows: dict[str, Any] = {}
        for name, jump in (("token by token", False), ("jump-forward", True)):
            sampler = self.sampler(policy, cases, jump_forward=jump)
            started = time.perf_counter()
            out = sampler.sample(prompts, n=1, temperature=0.0, max_new_tokens=MAX_NEW_TOKENS, seed=0)
            seconds = time.perf_counter() - started
            tokens = [len(r[0]) for r in out]
            passes = sampler.forward_passes if isinstance(sampler, JumpForwardSampler) else sum(tokens)
            rows[name] = {
                "plans": len(cases), "tokens_per_plan": sum(tokens) / len(tokens),
                "forward_passes_per_plan": passes / len(tokens), "seconds_per_plan": seconds / len(tokens),
                "valid": sum(1 for r in out if parse_strategy(policy.decode(r[0])) is not None),
                "plans_text": [policy.decode(r[0]) for r in out],
            }  # fmt: skip
        texts = zip(rows["token by token"]["plans_text"], rows["jump-forward"]["plans_text"], strict=True)
        same = sum(a == b for a, b in texts)
        for row in rows.values():
            del row["plans_text"]
        self.results["decoding"] = rows | {"same_plan": same, "load": _load()}
        self.log(f"decoding cost: {rows}")
        self.save()

    def read_prompts(self, policy: StrategyPolicy) -> None:
        """Every MR's prompt read once, up front: what every stage and seed reads after it is the cached
        prompt, so an RL seed's time (from which the budget decides whether the next one fits) is the
        seed's own work, not the first reading of the prompts it happened to visit."""
        started = time.monotonic()
        read = self.prompt_cache.warm(policy, [policy.prompt_ids(self.env.reset(x)) for x in self.train + self.heldout])
        minutes = (time.monotonic() - started) / 60
        self.results["prompt_reads"] = {"prompts": read, "minutes": round(minutes, 2)}
        self.log(f"read {read} prompts in {minutes:.1f} min ({self.prompt_cache.bytes / 2**30:.1f} GiB cached)")
        self.save()

    def outcome(self, case: ReplayCase, text: str) -> dict[str, float]:
        """One answer on one MR: reward, defects found, decoy posts, the profile's votes on the posts."""
        z = parse_strategy(text)
        defects = sum(1 for f in case.findings if not f.kind.startswith("decoy:"))
        if z is None:
            return {"reward": INVALID_REWARD, "found": 0, "defects": defects, "decoy_posts": 0, "votes": 0,
                    "accepted_votes": 0, "valid": 0.0}  # fmt: skip
        execution = self.env.execute(case, z)
        # a plan serving completes (security left out of a code change) is invalid under the one rule
        # (agent.strategy.check_valid_strategy) and scored as RL scores it (learning/strata/rollout.py)
        valid = not execution.added_by_safety_net
        value = reward(execution, case, self.reward_config) if valid else INVALID_REWARD
        result, labels = match_labeled(execution.findings, case)
        matched = [labels[id(expected)] for _, expected in result.true_positives]
        team = self.profiles[case.team or ""]
        votes = [team.vote_on(f) for f in execution.findings]
        return {
            "reward": value,
            "found": sum(1 for f in matched if not f.kind.startswith("decoy:")),
            "defects": defects,
            "decoy_posts": sum(1 for f in matched if f.kind.startswith("decoy:")),
            "votes": sum(v is not None for v in votes),
            "accepted_votes": sum(v == "accepted" for v in votes),
            "valid": 1.0 if valid else 0.0,
        }

    def evaluate(self, policy: StrategyPolicy, *, mode: str, seed: int = 0) -> list[dict[str, float]]:
        temperature = 0.0 if mode == "greedy" else 1.0
        rows = self.generate(policy, self.heldout, n=1, temperature=temperature, seed=10_000 + seed)
        return [self.outcome(x, policy.decode(r[0])) for x, r in zip(self.heldout, rows, strict=True)]

    def record(self, stage: str, policy: StrategyPolicy, *, key: str | None = None) -> list[dict[str, float]]:
        entry = self.results["stages"].setdefault(key or stage, {"greedy": [], "sampled": []})
        greedy = self.evaluate(policy, mode="greedy")
        entry["greedy"].append(greedy)
        if stage in self.config.sampled_eval_stages and len(entry["sampled"]) < 1:
            entry["sampled"].append(self.evaluate(policy, mode="sampled"))
        mean = sum(o["reward"] for o in greedy) / len(greedy)
        self.log(f"{key or stage}: held-out greedy reward {mean:.3f}")
        self.save()
        return greedy

    # --- stages ---------------------------------------------------------------------------------

    def load(self, adapter: Path | None = None) -> StrategyPolicy:
        policy = StrategyPolicy.load(self.base_model, adapter=adapter, config=self.policy_config)
        policy.enable_prompt_cache(shared=self.prompt_cache)
        return policy

    def sft_and_dpo(self, policy: StrategyPolicy) -> Path:
        """SFT on each sampled training MR's oracle plan, then DPO oracle vs. the worst plan seen, both
        read from the cached visit table (learning/headroom.py), not from the base model's samples."""
        from learning.headroom import plan_examples
        from learning.strata.preference import DPOLoopConfig, PreferencePair, train_dpo_pairs
        from learning.strata.warm_start import WarmStartConfig, warm_start

        cases = random.Random(0).sample(self.train, min(self.config.sft_cases, len(self.train)))
        data = plan_examples(self.env, cases, self.reward_config)
        examples = [(x.s1, x.best.to_json()) for x in data]
        self.results["sft_data"] = {"cases": len(cases), "informative": len(data)}
        self.log(f"SFT data: {len(data)} of {len(cases)} training MRs have a best plan better than their worst")
        if not examples:
            self.results["notes"].append("SFT and DPO had no data: every plan of every training MR scored the same.")
            return self.save_adapter(policy, "sft")
        warm_start(policy, examples, WarmStartConfig(steps=self.config.sft_steps, batch_size=4, learning_rate=2e-3))
        sft_dir = self.save_adapter(policy, "sft")
        self.record("sft", policy)
        end = policy.tokenizer.eos_token or ""

        def ids(text: str) -> list[int]:
            return list(policy.tokenizer(text + end, add_special_tokens=False)["input_ids"])

        pairs = [PreferencePair(policy.prompt_ids(x.s1), ids(x.best.to_json()), ids(x.worst.to_json())) for x in data]
        train_dpo_pairs(policy, pairs, DPOLoopConfig(steps=self.config.dpo_steps, batch_size=2, learning_rate=1e-3))
        self.log(f"DPO on {len(pairs)} pairs")
        del sft_dir
        return self.save_adapter(policy, "dpo")

    def save_adapter(self, policy: StrategyPolicy, name: str) -> Path:
        target = self.out / "adapters" / name
        policy.save(target)
        return target

    def rl_config(self, *, seed: int, steps: int, ablation: AblationName) -> tuple[StrataConfig, RLTrainConfig]:
        strata = StrataConfig(
            sigma=2, n_strategies=self.config.plans_per_mr, m_executions=1, keep_ratio=0.5, temperature=1.0,
            max_new_tokens=MAX_NEW_TOKENS,
            embedder="hashing", learning_rate=1e-3, max_steps=steps, seed=seed,
        )  # fmt: skip
        train = RLTrainConfig(
            mrs_per_step=4, ppo_epochs=1, checkpoint_every=steps, keep_checkpoints=1, cpu_threads=self.config.threads,
            invalid_reward=INVALID_REWARD, constrained_decoding=True, decisions_only=True, jump_forward=True,
        )  # fmt: skip
        return StrataConfig.ablation(ablation, strata), train

    def rl(self, adapter: Path, *, variant: str, seed: int, ablation: AblationName, steps: int,
           eval_at: Sequence[int]) -> list[dict[str, Any]]:  # fmt: skip
        from learning.strata.trainer import StrataTrainer

        strata, train = self.rl_config(seed=seed, steps=steps, ablation=ablation)
        trainer: StrataTrainer | None = None

        def on_step_end(step: int, metrics: Any) -> None:
            self.log(f"{variant} step {step}: reward {metrics['reward_mean']:.3f} std {metrics['reward_std']:.3f}"
                     f" entropy {metrics.get('entropy', 0):.3f} grad {metrics.get('grad_norm', 0):.3f}")  # fmt: skip
            if step in eval_at and trainer is not None and trainer.policy is not None:
                # every full seed's step-S evaluation is an "rl" run (the summary averages them per MR)
                key = "rl" if ablation == "full" and step == self.config.rl_steps else None
                if ablation != "full":
                    entry = self.results["ablations"].setdefault(ablation, {"greedy": []})
                    entry["greedy"].append(self.evaluate(trainer.policy, mode="greedy"))
                    greedy = entry["greedy"][-1]
                    self.save()
                elif key:
                    greedy = self.record("rl", trainer.policy)
                else:
                    greedy = self.evaluate(trainer.policy, mode="greedy")
                mean = sum(o["reward"] for o in greedy) / len(greedy)
                self.results["curves"].setdefault(variant, [[0, self.results["dpo_greedy_mean"]]]).append([step, mean])
                self.log(f"{variant} step {step}: held-out greedy reward {mean:.3f}")
                self.save()

        trainer = StrataTrainer(
            strata, base_model=self.base_model, adapter=adapter, train_cases=self.train,
            out_dir=self.out / "rl" / variant, train_config=train, policy_config=self.policy_config,
            reward_config=self.reward_config, on_step_end=on_step_end,
        )  # fmt: skip
        trainer.env = self.env  # the shared memo of executions (the analyzers are deterministic)
        trainer.prompt_cache = self.prompt_cache  # prompts read once for every stage and seed
        outcome = trainer.train()
        self.results["rl_logs"][variant] = outcome.step_metrics
        self.save()
        return outcome.step_metrics

    def fits(self, what: str, minutes: float) -> bool:
        left = self.config.budget_minutes - self.minutes()
        if minutes <= left:
            return True
        self.results["notes"].append(
            f"{what}: not run, the time budget had {left:.1f} min left, it needs ~{minutes:.1f}."
        )
        self.log(f"skipping {what} (needs ~{minutes:.1f} min, {left:.1f} left)")
        return False

    def run(self) -> None:
        import torch

        c = self.config
        torch.set_num_threads(c.threads)
        self.results |= {
            "machine": f"{platform.node()} ({platform.machine()}, {_cpus()} CPUs, load {_load()}),"
            f" torch {c.threads} thread{'s' if c.threads > 1 else ''}",
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "config": {k: v for k, v in c.__dict__.items()},
            "setup": f"Code: commit {git_commit(ROOT)}.",
        }
        self.build_env()
        policy = self.load()
        self.read_prompts(policy)
        self.record("base", policy)
        self.decoding_cost(policy, self.heldout[: c.decoding_mrs])
        dpo = self.sft_and_dpo(policy)
        self.record("dpo", policy)
        self.results["dpo_greedy_mean"] = _mean_reward(self.results["stages"]["dpo"]["greedy"][-1])
        del policy
        self.rl_runs(dpo)

    def resume(self) -> None:
        """Go on with a saved run whose base, SFT and DPO stages are recorded: the RL seeds and ablations
        it has not run yet, within what is left of the same budget (its clock goes on from the saved
        duration). A new process reads every prompt again first; the note says how long that took."""
        import torch

        saved = self.out / "results.json"
        dpo = self.out / "adapters" / "dpo"
        if not saved.is_file() or not dpo.is_dir():
            raise SystemExit(f"bench.learning: nothing to resume in {self.out} (no results.json or adapters/dpo)")
        self.results = json.loads(saved.read_text(encoding="utf-8"))
        # the budget may grow on resuming (the note says where the run went on); nothing else may change
        settings = {k: v for k, v in json.loads(json.dumps(self.config.__dict__)).items() if k != "budget_minutes"}
        saved_settings = {k: v for k, v in self.results.get("config", {}).items() if k != "budget_minutes"}
        if "dpo" not in self.results.get("stages", {}) or saved_settings != settings:
            raise SystemExit("bench.learning: the saved run has no DPO stage or other settings: run it again")
        self.results["config"]["budget_minutes"] = self.config.budget_minutes
        self.started = time.monotonic() - float(self.results.get("duration_s", 0.0))
        torch.set_num_threads(self.config.threads)
        at, when = self.minutes(), datetime.now(UTC)
        self.build_env()
        policy = self.load(dpo)
        self.read_prompts(policy)
        del policy
        done = set(self.results.get("rl_logs", {}))
        self.results["notes"] = [n for n in self.results["notes"] if "not run, the time budget" not in n]
        self.results["notes"].append(
            f"Resumed in a new process at {at:.1f} min ({when:%H:%M UTC}): reading the prompts"
            f" again took {self.results['prompt_reads']['minutes']:.1f} min of the budget; variants already run:"
            f" {', '.join(sorted(done)) or 'none'}."
        )
        self.rl_runs(dpo, done=done)

    def rl_runs(self, dpo: Path, *, done: Collection[str] = ()) -> None:
        """RL from the DPO adapter: seed 0 (the collapse watch), the other seeds, then the ablations,
        each while the budget has room for it (estimated from the full seeds run so far)."""
        c = self.config
        s = c.rl_steps
        watch = WATCH_VARIANT
        minutes = self.results.setdefault("rl_minutes", {})

        def timed(variant: str, **kwargs: Any) -> None:
            t0 = self.minutes()
            self.rl(dpo, variant=variant, **kwargs)
            minutes[variant] = round(self.minutes() - t0, 2)
            self.save()

        def per_run() -> float:
            """Minutes of one S-step run, from the full seeds so far (the watch runs watch_factor × S)."""
            runs = [m / (c.watch_factor if v == watch else 1) for v, m in minutes.items() if v.startswith("full")]
            return SEED_MARGIN * sum(runs) / len(runs) if runs else 0.0

        if watch not in done:
            long = s * c.watch_factor
            timed(watch, seed=0, ablation="full", steps=long, eval_at=tuple(sorted({s, long})))
            self.results["collapse"] = collapse_watch(self.results["rl_logs"][watch])
            self.save()
        for seed in range(1, c.seeds):
            variant = f"full seed {seed}"
            if variant not in done and self.fits(f"RL seed {seed}", per_run()):
                timed(variant, seed=seed, ablation="full", steps=s, eval_at=(s,))
        flags = [m.get("judge_flag_rate", 0.0) for m in self.results["rl_logs"][watch]]
        for name in c.ablations:
            note = ""
            if name in ("no_judge", "plain_mean") and max(flags, default=0.0) == 0.0:
                # measured all the same: the run shows the identity rather than arguing it
                note = ("expected equal to full seed 0: the fixed analyzer executor runs a strategy once (M = 1),"
                        " so the top-δ score is the reward for any δ") if name == "plain_mean" else (
                       f"expected equal to full seed 0: the judge flagged no step in the full run ({len(flags)} steps,"
                        " flag rate 0), so κ multiplies zero")  # fmt: skip
            if name not in done and self.fits(f"ablation {name}", per_run()):
                timed(name, seed=0, ablation=name, steps=s, eval_at=(s,))  # type: ignore[arg-type]
                if note:
                    self.results["ablations"][name]["note"] = note
        self.results["prompt_cache"] = {"prompts_read": self.prompt_cache.reads, "bytes": self.prompt_cache.bytes}
        self.save()


def collapse_watch(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Reward std, entropy and gradient norm over the long run, with the steps that look like collapse:
    a gradient norm over 3× the median of the steps before it, entropy under half its first value, or a
    reward std of ~0 (every sampled plan scored the same)."""
    trained = [m for m in steps if not m.get("skipped")]
    spikes, low_entropy, flat = [], [], []
    norms: list[float] = []
    first_entropy = trained[0]["entropy"] if trained else None
    for m in trained:
        if len(norms) >= 2 and m["grad_norm"] > 3 * sorted(norms)[len(norms) // 2]:
            spikes.append(m["step"])
        norms.append(m["grad_norm"])
        if first_entropy and m["entropy"] < 0.5 * first_entropy:
            low_entropy.append(m["step"])
    flat = [m["step"] for m in steps if m["reward_std"] < 1e-6]
    # a skipped step trained nothing: it has no entropy or gradient norm (not zero: "–" in the summary)
    series: dict[str, list[float | None]] = {
        k: [None if m.get("skipped") and k != "reward_std" else round(float(m.get(k, 0.0)), 4) for m in steps]
        for k in ("reward_std", "entropy", "grad_norm")
    }

    def shown(values: list[float | None]) -> str:
        return "[" + ", ".join("–" if v is None else str(v) for v in values) + "]"

    summary = (
        f"reward std per step {shown(series['reward_std'])}; entropy {shown(series['entropy'])};"
        f" grad norm {shown(series['grad_norm'])};"
        f" skipped (no reward spread) {sum(1 for m in steps if m.get('skipped'))} of {len(steps)}."
        f" Gradient-norm spikes at steps {spikes or 'none'}; entropy below half its start at {low_entropy or 'none'};"
        f" zero reward spread at {flat or 'none'}."
    )
    return {"steps": len(steps), "spikes": spikes, "low_entropy": low_entropy, "flat": flat, "series": series,
            "summary": summary}  # fmt: skip


def _mean_reward(rows: Sequence[dict[str, float]]) -> float:
    return sum(o["reward"] for o in rows) / len(rows)


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


def _load() -> str:
    try:
        return Path("/proc/loadavg").read_text(encoding="utf-8").split()[0]
    except OSError:
        return "?"


def report(results_file: Path, *, headroom: Path, png: Path, bench_dir: Path = ROOT / "bench") -> None:
    """Record the run in bench/RESULTS.md (bench/results_file.py) and draw the reward plot."""
    from bench.learning_summary import summary
    from bench.results_file import record_run

    results = json.loads(results_file.read_text(encoding="utf-8"))
    if WATCH_VARIANT in results.get("rl_logs", {}):  # recomputed: a saved summary may predate a fix here
        results["collapse"] = collapse_watch(results["rl_logs"][WATCH_VARIANT])
    paired = summary(json.loads(headroom.read_text(encoding="utf-8")), results) if headroom.is_file() else None
    rl = (paired or {}).get("stages", {}).get("rl")
    headline = (
        f"held-out ({paired['heldout_mrs']} MRs): RL captured {rl['captured_share']:.0%} of the oracle − rule gap,"
        f" RL − rule {rl['paired_vs_rule']['mean']:+.3f} [{rl['paired_vs_rule']['lo']:+.3f},"
        f" {rl['paired_vs_rule']['hi']:+.3f}]"
        if paired and rl and rl.get("captured_share") is not None
        else "no RL stage recorded"
    )
    record_run(name="learning", title=SECTION_TITLE.removeprefix("## "), headline=headline,
               section=render_markdown(results, paired), bench_dir=bench_dir)  # fmt: skip
    plot_rewards(results, png)
    print(f"recorded in {bench_dir / 'RESULTS.md'}; plot at {png}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".data" / "bench-learning", help="work directory")
    parser.add_argument("--base-model", type=Path, default=None, help="model directory (default: build it)")
    parser.add_argument("--report-only", type=Path, default=None, help="re-render RESULTS.md and the PNG from JSON")
    parser.add_argument("--bench-dir", type=Path, default=ROOT / "bench", help="where RESULTS.md is recorded")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "learning_reward.png")
    parser.add_argument("--budget-minutes", type=float, default=BenchConfig.budget_minutes)
    parser.add_argument("--steps", type=int, default=BenchConfig.rl_steps, help="RL steps per run (S)")
    parser.add_argument("--seeds", type=int, default=BenchConfig.seeds)
    parser.add_argument("--threads", type=int, default=BenchConfig.threads, help="torch threads")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default=BenchConfig.device,
                        help="where the policy trains and decodes (cuda: bfloat16)")  # fmt: skip
    parser.add_argument("--watch-factor", type=int, default=BenchConfig.watch_factor,
                        help="seed 0 runs this many × --steps (the collapse watch)")  # fmt: skip
    parser.add_argument("--plans", type=int, default=BenchConfig.plans_per_mr, help="RL strategies per MR (N)")
    parser.add_argument("--n-mrs", type=int, default=BenchConfig.n_mrs)
    parser.add_argument("--sft-cases", type=int, default=BenchConfig.sft_cases)
    parser.add_argument("--ablations", default=",".join(BenchConfig.ablations))
    parser.add_argument("--summary", action="store_true", help="print one JSON line from the recorded results")
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="with --summary: the training results (default: --out/results.json, else bench/learning_results.json)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on with the saved run in --out: the RL runs it has not run yet",
    )
    parser.add_argument("--headroom", type=Path, default=ROOT / "bench" / "learning_headroom.json")
    args = parser.parse_args(argv)
    if args.summary:
        from bench.learning_summary import summary_line
        from reviewers.kernel.errors import ReviewloopError

        # --results, else a training run in the work directory, else the recorded one (a clean checkout
        # has no .data/); a --results file that does not exist means "no training run": references alone
        results_file = args.results or args.out / "results.json"
        if args.results is None and not results_file.is_file():
            results_file = RECORDED_RESULTS
        try:
            print(summary_line(args.headroom, results_file))
        except ReviewloopError as exc:
            raise SystemExit(f"bench.learning: {exc}") from None
        return
    if args.report_only is not None:
        report(args.report_only, headroom=args.headroom, png=args.png, bench_dir=args.bench_dir)
        return
    base = args.base_model
    if base is None:
        from learning.base_model import ensure_base_model

        base = ensure_base_model(ROOT / ".data")
    config = BenchConfig(
        budget_minutes=args.budget_minutes, rl_steps=args.steps, plans_per_mr=args.plans, seeds=args.seeds,
        watch_factor=args.watch_factor, threads=args.threads, device=cast(Device, args.device),
        n_mrs=args.n_mrs,
        sft_cases=args.sft_cases, ablations=tuple(a for a in args.ablations.split(",") if a),
    )  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    bench = Bench(config, out=args.out, base_model=Path(base), headroom=args.headroom)
    try:
        if args.resume:
            bench.resume()
        else:
            bench.run()
    finally:
        bench.save()
    report(args.out / "results.json", headroom=args.headroom, png=args.png, bench_dir=args.bench_dir)


if __name__ == "__main__":
    main()
