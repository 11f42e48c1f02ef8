"""StraTA RL on the strategy model: one run from a base model (and optional SFT/DPO adapter) to a new adapter.

Loads the replay set (a dataset directory's `replay` kind, or a JSONL of cases), measures the policy
on the held-out split, trains with `StrataTrainer` on the train split (checkpointing as it goes;
`resume=True` continues an interrupted run), measures again, and saves the adapter (or the whole
model when LoRA is off) with a `training.json` beside it, as the SFT and DPO runs do. Measurements
are taken twice: greedily with serving's rule fallback (what the gate will see) and by sampling at
the training temperature with invalid answers penalised (what RL optimises).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.store.db import Database
from agent.store.models import finish_run
from learning.gate import PolicyEvaluation, evaluate_strategies, model_strategies
from learning.replay import ReplayCase, ReplayEnv, ReplayEnvConfig, load_replay_cases
from learning.replay_reward import ReplayRewardConfig
from learning.strata.config import AblationName, StrataConfig
from learning.strata.policy import PolicyConfig
from learning.strata.run_config import RLTrainConfig
from learning.strata.trainer import StepHook, StrataTrainer
from learning.strata.vllm_backend import VLLMConfig
from reviewers.kernel.errors import ConfigError, TrainingError

if TYPE_CHECKING:
    from learning.strata.policy import StrategyPolicy

TRAINING_FILE = "training.json"  # the name learning/training.py gives SFT and DPO runs' records
BEFORE_FILE = "before_metrics.json"  # kept so a resumed run reports the true starting point


@dataclass(frozen=True)
class EvalConfig:
    """How a run measures its policy on the held-out split."""

    samples: int = field(default=4, metadata={"help": "sampled strategies per held-out merge request"})
    max_cases: int | None = field(default=None, metadata={"help": "measure on at most this many held-out cases"})

    def __post_init__(self) -> None:
        if self.samples < 1 or (self.max_cases is not None and self.max_cases < 1):
            raise ConfigError(f"bad eval config: {self}")


@dataclass(frozen=True)
class RLRunConfig:
    """Every knob of a `train rl` run, grouped as in its JSON file: {"strata": {...}, "train": {...}, ...}.

    A section names only what it changes. By default plans are sampled the way the trained version
    will be asked for them: it is registered analyzer-only, so the gate and serving decode it under
    each merge request's decisions-only schema, and RL samples under the same schema (`served_train`).
    With `"generation_backend": "vllm"` set `"constrained_decoding": false` too: that sampler sends no
    per-merge-request schema."""

    strata: StrataConfig = field(default_factory=StrataConfig)
    train: RLTrainConfig = field(default_factory=lambda: served_train())
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    env: ReplayEnvConfig = field(default_factory=ReplayEnvConfig)
    reward: ReplayRewardConfig = field(default_factory=ReplayRewardConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: asdict(getattr(self, f.name)) for f in fields(self)}


def served_train() -> RLTrainConfig:
    """RL's sampling as the trained (analyzer-only) version is served: constrained, decisions-only.
    Unconstrained, a small model writes almost no valid plan, every reward is the invalid one and no
    group has the spread to learn from (`learning/strata/constrained.py`)."""
    return RLTrainConfig(constrained_decoding=True, decisions_only=True)


def _section(cls: type[Any], name: str, values: Any, base: Any) -> Any:
    if not isinstance(values, Mapping):
        raise ConfigError(f"rl config section {name!r} must be an object of field: value")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown field(s) in rl config section {name!r}: {', '.join(unknown)}")
    tuples = {k: tuple(v) for k, v in values.items() if isinstance(v, list)}
    try:
        return replace(base, **{**values, **tuples})  # the fields it does not name keep their defaults
    except TypeError as exc:
        raise ConfigError(f"rl config section {name!r}: {exc}") from exc


def load_rl_config(path: Path | None = None, *, ablation: AblationName = "full") -> RLRunConfig:
    """The run config from a JSON file (sections optional), with an ablation preset applied on top."""
    config = RLRunConfig()
    if path is not None:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read rl config {path}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise ConfigError(f"rl config {path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"rl config {path} must be a JSON object of sections")
        sections = {f.name: f for f in fields(RLRunConfig)}
        unknown = sorted(set(data) - set(sections))
        if unknown:
            raise ConfigError(f"unknown rl config section(s): {', '.join(unknown)}; known: {', '.join(sections)}")
        types = {"strata": StrataConfig, "train": RLTrainConfig, "policy": PolicyConfig, "env": ReplayEnvConfig,
                 "reward": ReplayRewardConfig, "eval": EvalConfig, "vllm": VLLMConfig}  # fmt: skip
        config = replace(
            config,
            **{name: _section(types[name], name, values, getattr(config, name)) for name, values in data.items()},
        )
    return replace(config, strata=StrataConfig.ablation(ablation, config.strata))


@dataclass
class RLResult:
    out_dir: Path
    run_id: int | None
    steps: int
    resumed_from: int | None
    uses_lora: bool
    base_model: str  # the model to load: the base under the adapter, or out_dir when all weights were trained
    adapter_path: str | None  # None when the whole model was trained
    metrics: dict[str, Any]
    step_metrics: list[dict[str, Any]]
    main_process: bool = True  # False on the other ranks of a data-parallel run: they save and report nothing


def measure_policy(
    policy: StrategyPolicy,
    cases: list[ReplayCase],
    *,
    env: ReplayEnv,
    config: RLRunConfig,
) -> dict[str, PolicyEvaluation]:
    """Greedy with the rule fallback (serving, the gate) and sampled with the invalid penalty (RL's objective)."""
    greedy = model_strategies(policy, cases, env, max_new_tokens=config.strata.max_new_tokens)
    sampled = model_strategies(
        policy,
        cases,
        env,
        temperature=config.strata.temperature,
        samples=config.eval.samples,
        max_new_tokens=config.strata.max_new_tokens,
        seed=config.strata.seed + 1,
    )
    return {
        "greedy": evaluate_strategies(cases, greedy, env=env, reward_config=config.reward),
        "sampled": evaluate_strategies(
            cases, sampled, env=env, reward_config=config.reward, invalid_reward=config.train.invalid_reward
        ),
    }


def _flatten(prefix: str, numbers: Mapping[str, PolicyEvaluation]) -> dict[str, float]:
    return {f"{prefix}_{mode}_{k}": float(v) for mode, e in numbers.items() for k, v in e.as_dict().items()}


def train_rl(
    *,
    base_model: Path,
    replay: Path,
    out_dir: Path,
    config: RLRunConfig | None = None,
    adapter: Path | None = None,
    db: Database | None = None,
    resume: bool = False,
    on_step_end: StepHook | None = None,
) -> RLResult:
    """Run StraTA RL and save the result into `out_dir` (see the module docstring)."""
    config = config or RLRunConfig()
    out_dir = Path(out_dir)
    train_cases = load_replay_cases(replay, split="train")
    try:
        eval_cases = load_replay_cases(replay, split="eval")[: config.eval.max_cases]
    except TrainingError:
        eval_cases = []  # nothing held out: the run trains but cannot report before/after numbers
    env = ReplayEnv(config.env)
    trainer = StrataTrainer(
        config.strata,
        base_model=base_model,
        adapter=adapter,
        train_cases=train_cases,
        out_dir=out_dir,
        train_config=config.train,
        policy_config=config.policy,
        env_config=config.env,
        reward_config=config.reward,
        db=db,
        vllm_config=config.vllm,
        on_step_end=on_step_end,
    )
    metrics: dict[str, Any] = {}
    before_file = out_dir / BEFORE_FILE

    def measure_before(policy: StrategyPolicy, start: int) -> None:
        if before_file.is_file():
            metrics.update(json.loads(before_file.read_text(encoding="utf-8")))
        elif eval_cases and start == 0:
            metrics.update(_flatten("before", measure_policy(policy, eval_cases, env=env, config=config)))
            out_dir.mkdir(parents=True, exist_ok=True)
            before_file.write_text(json.dumps(metrics, indent=2), encoding="utf-8")

    outcome = trainer.train(resume=resume, on_start=measure_before)
    policy = trainer.policy
    if policy is None:  # train() always loads it
        raise TrainingError("the trainer has no policy after training")
    if not trainer.dp.is_main:  # rank 0 holds the same weights and does the measuring and saving
        return RLResult(
            out_dir=out_dir, run_id=None, steps=outcome.steps, resumed_from=outcome.resumed_from,
            uses_lora=policy.is_peft, base_model=str(base_model), adapter_path=None, metrics={},
            step_metrics=outcome.step_metrics, main_process=False,
        )  # fmt: skip
    if eval_cases:
        metrics |= _flatten("after", measure_policy(policy, eval_cases, env=env, config=config))
    metrics |= {"steps": outcome.steps, "train_cases": len(train_cases), "eval_cases": len(eval_cases)}
    trainer.save(out_dir)
    uses_lora = policy.is_peft
    result = RLResult(
        out_dir=out_dir,
        run_id=outcome.run_id,
        steps=outcome.steps,
        resumed_from=outcome.resumed_from,
        uses_lora=uses_lora,
        base_model=str(base_model) if uses_lora else str(out_dir),
        adapter_path=str(out_dir) if uses_lora else None,
        metrics=metrics,
        step_metrics=outcome.step_metrics,
    )
    record = {
        "kind": "rl",
        "base_model": str(base_model) if uses_lora else str(out_dir),
        "initial_adapter": str(adapter) if adapter else None,
        "replay": str(replay),
        "run_id": outcome.run_id,
        "uses_lora": uses_lora,
        "metrics": metrics,
        "config": config.as_dict(),
    }
    (out_dir / TRAINING_FILE).write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
    if db is not None and outcome.run_id is not None:
        finish_run(db, outcome.run_id, status="succeeded", metrics=metrics)
    return result
