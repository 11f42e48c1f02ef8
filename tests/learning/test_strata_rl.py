"""StraTA RL for real on the CPU: a tiny model, a synthetic replay set, `reviewloop train rl`, the gate.

The tiny model is built from a config with a tokenizer trained on the synthetic prompts, then warm
started by a short supervised pass on *uninformed* strategies (security on one changed file picked at
random): it learns to write valid strategy JSON, not where the problems are. RL must find that out
from the reward: the planted problem is in the source file, the decoys are docs, tests and deploy
config, and only one file per reviewer fits in the step budget. Reward is measured on held-out merge
requests whose names and layout no training one has, before and after, greedily (what serving and the
gate see) and by sampling at the training temperature (what RL optimises).

Then: an interrupted run resumes from its checkpoint and ends where an uninterrupted one ends, with
its step metrics in `training_runs`; and the gate refuses a worse model and decides on the held-out
numbers, through real model versions in Postgres, asking each as serving does (in process, under the
decisions-only schema of an analyzer-only version).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from devices import TEST_DEVICE
from typer.testing import CliRunner

from agent.store.db import open_pool
from agent.store.models import get_run, get_version, list_runs, production_version, register_version
from agent.strategy import STRATEGY_SYSTEM_PROMPT, Strategy
from api.cli import app
from learning.gate import gate_decision, run_gate
from learning.replay import ReplayEnv, ReplayEnvConfig, load_replay_cases, write_jsonl_cases
from learning.strata.checkpoint import list_checkpoints
from learning.strata.policy import PolicyConfig, StrategyPolicy
from learning.strata.synthetic import (
    SyntheticConfig,
    generate_replay_set,
    problem_paths,
    uninformed_strategy,
    vocabulary_words,
)
from learning.strata.warm_start import WarmStartConfig, compact_strategy_json, warm_start
from learning.tiny_model import build_tiny_model
from learning.train_rl import load_rl_config, train_rl
from reviewers.kernel.contracts import PlanItem

pytestmark = pytest.mark.slow

# The warm start writes valid plans for every training MR well before this; on the held-out names and
# layout its greedy valid share is unstable in the length (measured 0.69 at 100 steps, 0.44 at 150,
# 0.31 at 200, 0.31 at 300 straight): it copies training names and breaks the JSON where they would go.
WARM_START_STEPS = 300
NAME_POOL_SIZE = 12  # training spreads the problem over 12 names; held-out cases use 12 others, in another layout
RL_CONFIG: dict[str, dict[str, Any]] = {
    "strata": {
        "sigma": 2,
        "n_strategies": 8,
        "m_executions": 1,
        "keep_ratio": 0.75,
        "temperature": 0.8,
        "max_new_tokens": 64,
        "embedder": "hashing",
        # 2e-3 until 2026-11-26: on this session's machine (same code, same packages as an earlier
        # passing run but for the CPU) its 30 steps took held-out greedy valid share 0.938 -> 0.000 and
        # sampled 0.906 -> 0.406 (the policy unlearned the JSON on unseen names); 1e-3 keeps it (below).
        "learning_rate": 1e-3,
        "max_steps": 30,
        "seed": 0,
    },
    # a 64-wide random model: full weights (LoRA on it learns slower and less stably); real models use LoRA
    "policy": {"use_lora": False, "device": TEST_DEVICE},
    # unconstrained: this test is about what RL itself learns on the tiny model, format included
    "train": {
        "mrs_per_step": 4,
        "checkpoint_every": 10,
        "cpu_threads": 1,
        "invalid_reward": -0.5,
        "warmup_steps": 5,
        "constrained_decoding": False,
    },
    "env": {"step_budget_cap": 1},
    "eval": {"samples": 4},
}
# What RL must not lose on the held-out names and layout, which it does not generalise to (see
# below): the valid shares and the greedy and sampled rewards, each relative to the warm start.
# Two of the 16 held-out plans (0.125) is within what the tiny model's float rounding moves: when the
# planted tokens gained GitHub's checksum (79d8e65) the text its tokenizer learns changed, and on the
# AMD EPYC of 2026-11-27 RL went greedy reward 0.263 → 0.369 while greedy valid share went 1.000 →
# 0.875 and sampled 0.984 → 0.875. On the AMD EPYC of 2026-11-29, with a fresh install of the same pins
# (transformers 5.24, tokenizers 0.23.3), the same code gave greedy valid 1.000 → 0.938 and sampled
# 0.984 → 0.828 (10 of 64 samples, spread over the 16 MRs) while greedy reward rose 0.419 → 0.472: a
# drift, not the collapse this guards against. The bound is a fifth: the 0.938 → 0.000 and
# 0.906 → 0.406 unlearning seen before still fails it.
MAX_UNSEEN_DROP = 0.20
# The gate asks as serving does, under the decisions-only schema, whose pinned fields make an answer
# of ~70-100 of this tokenizer's tokens: RL's 64 cut every answer short (none valid), 160 do not.
GATE_MAX_NEW_TOKENS = 160


@dataclass
class Setup:
    replay: Path
    base: Path
    warm: Path
    config: Path
    work: Path


@pytest.fixture(scope="module")
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared: one thread is the fastest here
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, threads: None) -> Setup:
    work = tmp_path_factory.mktemp("strata")
    # the CPU demo's set (learning/strata/ablate.py): one language, one module name, so the lesson is
    # where to look first; copying names or extensions from s1 takes a 64-wide random model far longer
    cases = generate_replay_set(
        SyntheticConfig(n_train=32, n_eval=16, languages=("javascript",), name_pool=NAME_POOL_SIZE, seed=0)
    )
    replay = write_jsonl_cases(work / "replay.jsonl", cases)
    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
    rng = random.Random(0)
    train = [c for c in cases if c.split == "train"]
    examples = [(env.reset(c), compact_strategy_json(uninformed_strategy(c, rng, max_focus=1))) for c in train]
    corpus = [s1 for s1, _ in examples] + [text for _, text in examples] + [STRATEGY_SYSTEM_PROMPT] * 3
    corpus += [" ".join(vocabulary_words())] * 3  # held-out names are words it can spell, never seen in a case
    base = build_tiny_model(work / "base", seed=0, corpus=corpus, vocab_size=1024)
    policy = StrategyPolicy.load(base, config=PolicyConfig(use_lora=False, device=TEST_DEVICE))
    losses = warm_start(policy, examples, WarmStartConfig(steps=WARM_START_STEPS))
    assert losses[-1] < losses[0] / 3
    policy.save(work / "warm")
    config = work / "rl.json"
    config.write_text(json.dumps(RL_CONFIG), encoding="utf-8")
    return Setup(replay=replay, base=base, warm=work / "warm", config=config, work=work)


@pytest.fixture(scope="module")
def trained(setup: Setup) -> dict[str, Any]:
    """`reviewloop train rl` on the warm-started model; returns its training.json."""
    out = setup.work / "rl"
    result = CliRunner().invoke(
        app,
        ["train", "rl", "--base-model", str(setup.warm), "--replay", str(setup.replay), "--out", str(out),
         "--config", str(setup.config), "--no-store"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "trained 30 steps" in result.output
    record: dict[str, Any] = json.loads((out / "training.json").read_text(encoding="utf-8"))
    record["out"] = out
    return record


def _changed_tensors(before: Path, after: Path) -> int:
    a = StrategyPolicy.load(before, config=PolicyConfig(use_lora=False, device=TEST_DEVICE)).model.state_dict()
    b = StrategyPolicy.load(after, config=PolicyConfig(use_lora=False, device=TEST_DEVICE)).model.state_dict()
    return sum(1 for k in a if not torch.equal(a[k], b[k]))


def test_rl_on_held_out_names_and_layout(setup: Setup, trained: Mapping[str, Any]) -> None:
    """The held-out split (names and a layout no training MR has): measured, printed, and asserted not to
    get worse by more than MAX_UNSEEN_DROP in valid share (greedy and sampled): RL must not unlearn the
    plan's JSON on names it never saw. Rewards are printed, not asserted: on 16 MRs a 64-wide random
    model's reward moves with the CPU's float rounding (on an Intel Xeon of 2026-11-26, the same code gave
    greedy 0.422 → 0.263 while sampled rose 0.147 → 0.233; on the AMD EPYC below, greedy was flat). RL is
    not asserted to improve it: a 64-wide random model does not carry the lesson to paths
    it never saw within 30 steps. Measured (300 warm-start steps, 1 thread), before → after RL, on the
    machine of 2026-11-26 with learning rate 1e-3: greedy reward 0.316 → 0.316, greedy valid share
    0.938 → 0.938, sampled reward 0.205 → 0.182, sampled valid share 0.906 → 0.891. (Earlier, on another
    machine with 2e-3: greedy valid 0.312 → 0.312: the tiny model's trajectory depends on the CPU's float
    rounding, and at 2e-3 on this one RL unlearned the JSON on unseen names, valid 0.938 → 0.000.) An
    honest null, recorded, not tuned away; the real-model run belongs to `make bench-learning`."""
    m = trained["metrics"]
    print("\nheld-out, unseen names and layout (16 MRs)   before   after")
    for key in ("sampled_mean_reward", "sampled_valid_share", "greedy_mean_reward", "greedy_f1", "greedy_valid_share"):
        print(f"{key:22s} {m[f'before_{key}']:7.3f} {m[f'after_{key}']:7.3f}")
    assert m["before_greedy_valid_share"] > 0, "the warm start writes no valid plan on held-out: nothing to keep"
    for key in ("greedy_valid_share", "sampled_valid_share"):
        assert m[f"after_{key}"] >= m[f"before_{key}"] - MAX_UNSEEN_DROP, key
    assert _changed_tensors(setup.warm, trained["out"]) > 0
    assert trained["uses_lora"] is False and trained["kind"] == "rl"


def test_step_metrics_watch_for_collapse(trained: Mapping[str, Any]) -> None:
    state = json.loads((Path(trained["out"]) / "checkpoint-30" / "trainer_state.json").read_text(encoding="utf-8"))
    steps = state["step_metrics"]
    assert [m["step"] for m in steps] == list(range(1, 31))
    for m in steps:
        assert {"reward_mean", "reward_std", "strategy_diversity", "judge_flag_rate", "valid_share"} <= set(m)
        if not m["skipped"]:
            assert m["grad_norm"] > 0 and 0 <= m["clip_fraction"] <= 1 and m["entropy"] >= 0
    assert [n for n, _ in list_checkpoints(Path(trained["out"]))] == [20, 30]  # keep_checkpoints = 2


def _tiny_run_config(setup: Setup, steps: int) -> Any:
    config = load_rl_config(setup.config)
    strata = replace(config.strata, sigma=1, n_strategies=4, max_steps=steps)
    return replace(config, strata=strata, train=replace(config.train, mrs_per_step=2, checkpoint_every=2))


def test_interrupted_run_resumes_from_its_checkpoint(setup: Setup, db_dsn: str) -> None:
    straight = train_rl(
        base_model=setup.warm, replay=setup.replay, out_dir=setup.work / "straight", config=_tiny_run_config(setup, 4)
    )

    class Stop(Exception):
        pass

    def stop_at_3(step: int, metrics: Mapping[str, Any]) -> None:
        if step == 3:
            raise Stop("the machine went away")

    interrupted = setup.work / "interrupted"
    with open_pool(db_dsn, max_size=2) as pool:
        with pytest.raises(Stop):
            train_rl(
                base_model=setup.warm,
                replay=setup.replay,
                out_dir=interrupted,
                config=_tiny_run_config(setup, 4),
                db=pool,
                on_step_end=stop_at_3,
            )
        assert [n for n, _ in list_checkpoints(interrupted)] == [2]
        (failed,) = list_runs(pool, kind="rl")
        assert failed["status"] == "failed" and "stopped after step 2: the machine went away" in (
            failed["reason"] or ""
        )
        resumed = train_rl(
            base_model=setup.warm,
            replay=setup.replay,
            out_dir=interrupted,
            config=_tiny_run_config(setup, 4),
            db=pool,
            resume=True,
        )
        assert resumed.resumed_from == 2 and resumed.steps == 4 and resumed.run_id == failed["id"]
        assert [m["step"] for m in resumed.step_metrics] == [1, 2, 3, 4]
        row = get_run(pool, failed["id"])
        assert row is not None and row["status"] == "succeeded"
        # step 3 ran twice (once before the interruption); the log keeps both
        assert [m["step"] for m in row["step_metrics"]] == [1, 2, 3, 3, 4]
    # the resumed run is the run it would have been
    assert resumed.metrics["before_sampled_mean_reward"] == straight.metrics["before_sampled_mean_reward"]
    a = StrategyPolicy.load(setup.work / "straight", config=PolicyConfig(use_lora=False, device=TEST_DEVICE)).model
    b = StrategyPolicy.load(interrupted, config=PolicyConfig(use_lora=False, device=TEST_DEVICE)).model
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.allclose(x, y, atol=1e-6), name
    assert [m["reward_mean"] for m in resumed.step_metrics] == [m["reward_mean"] for m in straight.step_metrics]

    status = CliRunner().invoke(
        app, ["train", "status", "--run", str(failed["id"])], env={"REVIEWLOOP_DATABASE_URL": db_dsn, "COLUMNS": "200"}
    )
    assert status.exit_code == 0, status.output
    assert f"run {failed['id']} (rl, succeeded)" in status.output
    assert "reward_mean" in status.output and "grad_norm" in status.output and "clip_fraction" in status.output


def _bad_policy(setup: Setup) -> Path:
    """A deliberately bad strategy model: warm started on plans that review a decoy first."""
    cases = load_replay_cases(setup.replay, split="train")
    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
    examples = []
    for c in cases:
        decoy = next(f.path for f in env.files(c) if f.path not in problem_paths(c))
        z = Strategy(change_type="feature", plan=[PlanItem(reviewer="security", focus_paths=[decoy], step_budget=1)])
        examples.append((env.reset(c), compact_strategy_json(z)))
    policy = StrategyPolicy.load(setup.base, config=PolicyConfig(use_lora=False, device=TEST_DEVICE))
    warm_start(policy, examples, WarmStartConfig(steps=80))
    policy.save(setup.work / "bad")
    return setup.work / "bad"


def test_gate_refuses_a_worse_model_and_decides_on_held_out_numbers(
    setup: Setup, trained: Mapping[str, Any], db_dsn: str
) -> None:
    bad = _bad_policy(setup)
    with open_pool(db_dsn, max_size=2) as pool:
        # both plan for the replay environment's analyzer-only executor (as `reviewloop train rl` registers
        # its versions): the gate judges their decisions (the decisions-only schema), as serving asks them
        bad_id = register_version(pool, name="decoys-first", base_model=str(bad), executor="analyzer-only")
        trained_id = register_version(pool, name="strata-rl", base_model=str(trained["out"]), executor="analyzer-only")

        gate_config = setup.work / "gate.json"
        gate_config.write_text(
            json.dumps({**RL_CONFIG, "strata": {**RL_CONFIG["strata"], "max_new_tokens": GATE_MAX_NEW_TOKENS}})
        )
        refused = CliRunner().invoke(
            app,
            ["eval-model", "--candidate", "decoys-first", "--baseline", "rules", "--replay", str(setup.replay),
             "--config", str(gate_config), "--device", TEST_DEVICE],
            env={"REVIEWLOOP_DATABASE_URL": db_dsn, "COLUMNS": "200"},
        )  # fmt: skip
        assert refused.exit_code == 0, refused.output
        print("\n" + refused.output)
        assert "refuse" in refused.output
        bad_row = get_version(pool, bad_id)
        assert bad_row is not None and bad_row["stage"] == "rejected" and production_version(pool) is None

        cases = load_replay_cases(setup.replay, split="eval")
        config = load_rl_config(setup.config)
        report = run_gate(
            pool,
            candidate=str(trained_id),
            baseline="decoys-first",
            cases=cases,
            margin=0.02,
            env=ReplayEnv(config.env),
            reward_config=config.reward,
            device=TEST_DEVICE,
            max_new_tokens=GATE_MAX_NEW_TOKENS,
        )
        print(f"gate: {report.decision.reason}")
        # On names and a layout it never saw, the RL model is not better. Measured: asked as serving asks it
        # (decisions-only schema) it plans no reviewer on any held-out MR (valid share 0.00, the safety net
        # would add security), where decoys-first writes valid plans on 15 of 16 (reward 0.025 vs the
        # rules' 0.819): refused. The gate must decide on those held-out numbers, and its decision must
        # take effect.
        cand, base = report.candidate_numbers, report.baseline_numbers
        assert cand.cases == base.cases == len(cases)
        assert report.decision.reward_delta == pytest.approx(cand.mean_reward - base.mean_reward)
        assert report.decision.promote == gate_decision(cand, base, margin=0.02).promote
        serving = production_version(pool)
        trained_row = get_version(pool, trained_id)
        assert trained_row is not None
        if report.decision.promote:
            assert report.promoted_id == trained_id and serving is not None and serving["id"] == trained_id
        else:
            assert report.promoted_id is None and serving is None and trained_row["stage"] == "rejected"
        evals = list_runs(pool, kind="eval")
        assert [r["metrics"]["decision"] for r in evals] == [
            "promote" if report.decision.promote else "refuse",
            "refuse",
        ]
        assert evals[0]["model_version_id"] == trained_id and evals[0]["metrics"]["candidate"]["cases"] == len(cases)


def test_rl_raises_the_reward_on_the_merge_requests_it_trained_on(setup: Setup, trained: Mapping[str, Any]) -> None:
    """A small environment with a known optimum (the planted problem sits in one source file; with one
    step per reviewer the best plan visits exactly that file): greedy decoding on the training MRs earns
    more after RL than the warm start, whose focus paths were drawn at random. In-sample on purpose:
    the held-out test above shows the tiny model does not carry the lesson to names it never saw."""
    from learning.gate import evaluate_strategies, model_strategies
    from learning.replay_reward import ReplayRewardConfig

    cases = load_replay_cases(setup.replay, split="train")
    env = ReplayEnv(ReplayEnvConfig(step_budget_cap=1))
    rewards = ReplayRewardConfig()
    scores = {}
    for name, path in (("warm start", setup.warm), ("after RL", Path(trained["out"]))):
        policy = StrategyPolicy.load(path, config=PolicyConfig(use_lora=False, device=TEST_DEVICE))
        plans = model_strategies(
            policy, cases, env, temperature=0.0, max_new_tokens=RL_CONFIG["strata"]["max_new_tokens"]
        )
        scores[name] = evaluate_strategies(cases, plans, env=env, reward_config=rewards, invalid_reward=-0.5)
    optimum = [
        Strategy(
            change_type="feature", plan=[PlanItem(reviewer="security", focus_paths=problem_paths(c)[:1], step_budget=1)]
        )
        for c in cases
    ]
    best = evaluate_strategies(cases, [[z] for z in optimum], env=env, reward_config=rewards)
    print(
        f"\ntraining MRs ({len(cases)}), greedy mean reward: warm start {scores['warm start'].mean_reward:.3f}, "
        f"after RL {scores['after RL'].mean_reward:.3f}, the known optimum {best.mean_reward:.3f}"
    )
    assert scores["after RL"].mean_reward > scores["warm start"].mean_reward
    assert scores["after RL"].mean_reward <= best.mean_reward + 1e-9
