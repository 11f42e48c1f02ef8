"""The retraining pipeline: reviews and feedback in, a better strategy model in service (or not).

    dataset build ─▶ SFT ─▶ DPO (pairs) or KTO (unpaired labels) ─▶ StraTA RL ─▶ evaluation gate ─▶ promote
                     │         │                                      │              │
                     └─ each stage trains a LoRA adapter on the base with the earlier stages folded in

Every stage runs only when its data suffices and is otherwise skipped with the reason; every stage is a
`training_runs` row (kind dataset, sft, dpo, kto, rl, eval) under one parent row of kind `retrain`. The
stages' adapters are combined into one adapter on the original base (learning/adapters.py), which is
what the model server loads. The gate replays the held-out merge requests under the candidate and
under the model in service (the rule-based strategy when none is) and promotes only a candidate
better by the margin; its decision is stored in the eval row's metrics (`decision`, `promoted`).
A promoted adapter is loaded into vLLM first (when vLLM serves), then put in service in the registry;
the transformers backend reads the registry at every review, so nothing else is needed there.

Two retrains never run at once: a Postgres advisory lock, held on a dedicated connection for the
whole run, refuses a second one (`RetrainBusyError`, recorded as a skipped `retrain` row).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psycopg

from agent.store import models as store_models
from agent.store.db import Pool, connection
from agent.store.models import RunStatus
from learning.datasets import DatasetCard, DatasetConfig, build_datasets
from learning.retrain_config import RetrainConfig, config_as_dict
from reviewers.errors import ReviewloopError, TrainingError

log = logging.getLogger(__name__)

RETRAIN_LOCK_KEY = 0x72767274  # "rvrt": one retrain at a time, across processes and hosts
StageKind = Literal["dataset", "sft", "dpo", "kto", "rl", "eval"]
STAGES: tuple[StageKind, ...] = ("dataset", "sft", "dpo", "kto", "rl", "eval")
Decision = Literal["promote", "keep"]


class RetrainBusyError(TrainingError):
    """Another retrain holds the lock; this one did not start."""


@dataclass(frozen=True)
class VllmServer:
    """Where a promoted adapter is hot-loaded: an OpenAI-compatible vLLM server with runtime LoRA."""

    base_url: str
    api_key: str | None = None


@dataclass
class StageRecord:
    kind: StageKind
    status: RunStatus
    reason: str | None
    run_id: int | None
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class RetrainReport:
    """What one retrain did: its parent run, each stage, the candidate and the gate's decision."""

    run_id: int
    status: RunStatus
    reason: str | None
    stages: list[StageRecord]
    candidate_version_id: int | None = None
    decision: Decision | None = None
    promoted: bool = False
    serving_version_id: int | None = None  # the version in service when the run ended

    def stage(self, kind: StageKind) -> StageRecord:
        for record in self.stages:
            if record.kind == kind:
                return record
        raise KeyError(kind)


@dataclass
class Chain:
    """The policy being trained: the original base plus the adapters the stages produced so far."""

    base_model: Path
    work_dir: Path
    adapters: list[Path] = field(default_factory=list)
    merged: dict[int, Path] = field(default_factory=dict)  # adapters folded in → merged model dir

    def training_base(self) -> Path:
        """The base with every adapter so far folded in: where the next stage's adapter goes."""
        return self.folded(len(self.adapters))

    def folded(self, n: int) -> Path:
        """The base with the first `n` adapters folded in (merged models are kept for reuse)."""
        from learning.training import merge_adapter

        done = max((k for k in self.merged if k <= n), default=0)
        base = self.merged.get(done, self.base_model)
        for k in range(done + 1, n + 1):
            base = merge_adapter(
                base_model=base, adapter_dir=self.adapters[k - 1], out_dir=self.work_dir / f"merged-{k}"
            )
            self.merged[k] = base
        return base

    def remove_merged(self) -> None:
        for path in self.merged.values():
            shutil.rmtree(path, ignore_errors=True)
        self.merged.clear()


# --- the lock --------------------------------------------------------------------------------------


@contextmanager
def retrain_lock(dsn: str) -> Iterator[bool]:
    """Try the retrain lock on a connection of its own, held until the block ends; yields whether it was got.

    A session-level advisory lock lives as long as its connection: if the process dies, Postgres
    drops the connection and with it the lock, so a crashed retrain never blocks the next one.
    """
    conn = psycopg.connect(dsn, autocommit=True, application_name="reviewloop-retrain-lock")
    try:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (RETRAIN_LOCK_KEY,)).fetchone()
        got = bool(row and row[0])
        try:
            yield got
        finally:
            if got and not conn.closed:
                conn.execute("SELECT pg_advisory_unlock(%s)", (RETRAIN_LOCK_KEY,))
    finally:
        conn.close()


def pool_dsn(db: Pool) -> str:
    """The DSN a pool connects with (a pool may also be built from a callable: not ours)."""
    if not isinstance(db.conninfo, str):
        raise TrainingError("the store pool has no plain DSN to open the retrain lock connection with")
    return db.conninfo


def _running_retrain(db: Pool) -> tuple[int, Any] | None:
    with connection(db) as conn:
        row = conn.execute(
            "SELECT id, started_at FROM training_runs WHERE kind = 'retrain' AND status = 'running'"
            " ORDER BY id DESC LIMIT 1"
        ).fetchone()
    return (int(row[0]), row[1]) if row else None


def _close_interrupted(db: Pool, by_run: int) -> int:
    """Rows a killed retrain left `running` (we hold the lock, so none of them is alive)."""
    with connection(db) as conn:
        rows = conn.execute(
            "UPDATE training_runs SET status = 'failed', finished_at = now(),"
            " reason = 'interrupted: the process ended before the run finished (closed by retrain run ' || %s || ')'"
            " WHERE status = 'running' AND id <> %s AND (kind = 'retrain' OR parent_run_id IN"
            " (SELECT id FROM training_runs WHERE kind = 'retrain')) RETURNING id",
            (str(by_run), by_run),
        ).fetchall()
    return len(rows)


# --- stage records ---------------------------------------------------------------------------------


class Stages:
    """Records each stage under the parent run, and keeps them for the report."""

    def __init__(self, db: Pool, parent_id: int) -> None:
        self.db = db
        self.parent_id = parent_id
        self.records: list[StageRecord] = []

    def skip(self, kind: StageKind, reason: str, **metrics: Any) -> StageRecord:
        run_id = store_models.start_run(self.db, kind, {}, parent_run_id=self.parent_id)
        store_models.finish_run(self.db, run_id, status="skipped", reason=reason, metrics=metrics)
        log.info("%s skipped: %s", kind, reason)
        return self._keep(StageRecord(kind, "skipped", reason, run_id, dict(metrics)))

    def start(self, kind: StageKind, config: Mapping[str, Any]) -> int:
        return store_models.start_run(self.db, kind, config, parent_run_id=self.parent_id)

    def finish(
        self,
        kind: StageKind,
        run_id: int,
        *,
        metrics: Mapping[str, Any],
        status: RunStatus = "succeeded",
        reason: str | None = None,
        model_version_id: int | None = None,
    ) -> StageRecord:
        store_models.finish_run(
            self.db, run_id, status=status, metrics=metrics, reason=reason, model_version_id=model_version_id
        )
        return self._keep(StageRecord(kind, status, reason, run_id, dict(metrics)))

    def adopt(self, kind: StageKind, *, key: str, value: Path) -> int | None:
        """Put the row a trainer recorded itself (its step metrics included) under the parent run;
        the row is found by the directory it names in its config (`dataset`, `out_dir`)."""
        with connection(self.db) as conn:
            row = conn.execute(
                "UPDATE training_runs SET parent_run_id = %s WHERE kind = %s AND parent_run_id IS NULL"
                " AND config->>%s = %s RETURNING id",
                (self.parent_id, kind, key, str(value)),
            ).fetchone()
        return int(row[0]) if row else None

    def _keep(self, record: StageRecord) -> StageRecord:
        self.records.append(record)
        return record


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# --- the pipeline ----------------------------------------------------------------------------------


def retrain(db: Pool, config: RetrainConfig, *, vllm: VllmServer | None = None) -> RetrainReport:
    """Run the whole pipeline once (see the module docstring); refuses to run beside another retrain."""
    if config.base_model is None:
        raise TrainingError("no base model: pass --base-model or set REVIEWLOOP_LLM_MODEL_PATH")
    from learning.training import check_base_model

    check_base_model(config.base_model)
    with retrain_lock(pool_dsn(db)) as got:
        if not got:
            running = _running_retrain(db)
            since = f" (run {running[0]}, started {running[1]:%Y-%m-%d %H:%M:%S %Z})" if running else ""
            reason = f"another retrain is running{since}; this one did not start"
            run_id = store_models.start_run(db, "retrain", config_as_dict(config))
            store_models.finish_run(db, run_id, status="skipped", reason=reason)
            raise RetrainBusyError(reason)
        run_id = store_models.start_run(db, "retrain", config_as_dict(config))
        closed = _close_interrupted(db, run_id)
        if closed:
            log.warning("closed %d training runs an interrupted retrain left running", closed)
        stages = Stages(db, run_id)
        run_dir = Path(config.work_dir) / f"run-{run_id}"
        chain = Chain(base_model=Path(config.base_model), work_dir=run_dir)
        report = RetrainReport(run_id=run_id, status="running", reason=None, stages=stages.records)
        try:
            _run_stages(db, config, stages, chain, run_dir, report, vllm=vllm)
        except ReviewloopError as exc:
            report.status, report.reason = "failed", first_line(exc)
        except BaseException as exc:
            report.status, report.reason = "failed", f"{type(exc).__name__}: {first_line(exc)}"
            _finish_parent(db, report)
            raise
        finally:
            if not config.keep_merged:
                chain.remove_merged()
        if report.status == "running":
            report.status = "succeeded"
        if report.decision is None and any(r.kind == "eval" and r.status == "skipped" for r in report.stages):
            report.decision = "keep"
        production = store_models.production_version(db)
        report.serving_version_id = production["id"] if production else None
        _finish_parent(db, report)
        return report


def _finish_parent(db: Pool, report: RetrainReport) -> None:
    recorded = {r.kind for r in report.stages}
    metrics = {
        "stages": {r.kind: r.status for r in report.stages},
        "missing_stages": [k for k in STAGES if k not in recorded],
        "candidate_version_id": report.candidate_version_id,
        "decision": report.decision,
        "promoted": report.promoted,
        "serving_version_id": report.serving_version_id,
    }
    store_models.finish_run(
        db,
        report.run_id,
        status="failed" if report.status == "failed" else "succeeded",
        reason=report.reason,
        metrics=metrics,
        model_version_id=report.candidate_version_id,
    )


def _skip_rest(stages: Stages, reason: str) -> None:
    done = {r.kind for r in stages.records}
    for kind in STAGES:
        if kind not in done:
            stages.skip(kind, reason)


StageFn = Callable[[], StageRecord]


def _guarded(stages: Stages, kind: StageKind, body: StageFn) -> StageRecord:
    """Run one stage; an error a user or the data can cause ends the retrain with the stage failed."""
    try:
        return body()
    except ReviewloopError as exc:
        failed = next((r for r in stages.records if r.kind == kind), None)
        if failed is None:
            run_id = stages.start(kind, {})
            stages.finish(kind, run_id, status="failed", reason=first_line(exc), metrics={})
        _skip_rest(stages, f"not run: the {kind} stage failed")
        raise


def _run_stages(
    db: Pool,
    config: RetrainConfig,
    stages: Stages,
    chain: Chain,
    run_dir: Path,
    report: RetrainReport,
    *,
    vllm: VllmServer | None,
) -> None:
    dataset_dir = run_dir / "dataset"
    card = _guarded(stages, "dataset", lambda: _dataset_stage(db, config, stages, dataset_dir)).metrics.get("card")
    if card is None:
        _skip_rest(stages, "no dataset: nothing to train on")
        return
    counts = card["counts"]
    _guarded(stages, "sft", lambda: _sft_stage(config, stages, chain, dataset_dir, counts, db))
    _guarded(stages, "dpo", lambda: _preference_stage(config, stages, chain, dataset_dir, counts, db))
    _guarded(stages, "rl", lambda: _rl_stage(config, stages, chain, dataset_dir, counts, db))
    _guarded(stages, "eval", lambda: _gate_stage(config, stages, chain, dataset_dir, counts, db, report, vllm=vllm))


# --- stages ----------------------------------------------------------------------------------------


def _dataset_stage(db: Pool, config: RetrainConfig, stages: Stages, dataset_dir: Path) -> StageRecord:
    run_id = stages.start("dataset", {"out": str(dataset_dir), "eval_fraction": config.eval_fraction})
    try:
        card: DatasetCard = build_datasets(
            db, dataset_dir, config=DatasetConfig(reward=config.reward, eval_fraction=config.eval_fraction)
        )
    except TrainingError as exc:
        if "nothing to build from" in str(exc) or "can be used" in str(exc):
            # too little data is the normal state of a new installation, not a failure
            return stages.finish("dataset", run_id, status="skipped", reason=first_line(exc), metrics={})
        stages.finish("dataset", run_id, status="failed", reason=first_line(exc), metrics={})
        raise
    metrics = {"card": card.model_dump(mode="json"), "snapshot_id": card.snapshot_id, "reviews": card.reviews}
    return stages.finish("dataset", run_id, metrics=metrics)


def _enough(have: int, need: int, what: str) -> str | None:
    """None when there is enough, else the reason the stage is skipped."""
    return None if have >= need else f"only {have} {what} in the train split; at least {need} are needed"


def _sft_stage(
    config: RetrainConfig, stages: Stages, chain: Chain, dataset_dir: Path, counts: Mapping[str, Any], db: Pool
) -> StageRecord:
    if not config.run_sft:
        return stages.skip("sft", "switched off (run_sft = false)")
    need = max(config.min_sft_examples, config.sft.min_train_rows)
    thin = _enough(counts["strategy_sft"]["train"], need, "well-received strategies")
    if thin:
        return stages.skip("sft", thin)
    from learning.train_sft import train_sft

    return _train_stage("sft", stages, chain, dataset_dir, lambda base, out: train_sft(
        base_model=base, dataset_dir=dataset_dir, out_dir=out, config=config.sft, db=db
    ))  # fmt: skip


def _preference_stage(
    config: RetrainConfig, stages: Stages, chain: Chain, dataset_dir: Path, counts: Mapping[str, Any], db: Pool
) -> StageRecord:
    """DPO when there are enough pairs, else KTO when there are enough unpaired labels; both recorded."""
    if not config.run_preference:
        stages.skip("kto", "switched off (run_preference = false)")
        return stages.skip("dpo", "switched off (run_preference = false)")
    pairs, labels = counts["strategy_dpo"]["train"], counts["strategy_kto"]["train"]
    dpo_thin = _enough(pairs, max(config.min_dpo_pairs, config.dpo.min_train_rows), "preference pairs")
    if dpo_thin is None:
        from learning.train_dpo import train_dpo

        record = _train_stage("dpo", stages, chain, dataset_dir, lambda base, out: train_dpo(
            base_model=base, dataset_dir=dataset_dir, out_dir=out, config=config.dpo, db=db
        ))  # fmt: skip
        stages.skip("kto", f"DPO trained on {pairs} preference pairs; KTO is for when pairs are too few")
        return record
    stages.skip("dpo", dpo_thin)
    kto_thin = _enough(labels, max(config.min_kto_labels, config.kto.min_train_rows), "labeled strategies")
    if kto_thin is not None:
        return stages.skip("kto", kto_thin)
    from learning.train_kto import train_kto

    return _train_stage("kto", stages, chain, dataset_dir, lambda base, out: train_kto(
        base_model=base, dataset_dir=dataset_dir, out_dir=out, config=config.kto, db=db
    ))  # fmt: skip


def _train_stage(
    kind: Literal["sft", "dpo", "kto"],
    stages: Stages,
    chain: Chain,
    dataset_dir: Path,
    train: Callable[[Path, Path], Any],
) -> StageRecord:
    """Run a TRL trainer on the chain's current base; its own `training_runs` row joins the parent."""
    base = chain.training_base()
    out = chain.work_dir / kind
    try:
        result = train(base, out)
    except ReviewloopError as exc:
        run_id = stages.adopt(kind, key="dataset", value=dataset_dir)
        if run_id is None:  # it failed before recording its row
            run_id = stages.start(kind, {"dataset": str(dataset_dir)})
        return _fail(stages, kind, run_id, exc)
    run_id = stages.adopt(kind, key="dataset", value=dataset_dir) or result.run_id
    if not result.uses_lora:
        raise TrainingError(f"the {kind} stage trained every weight (use_lora = false); retrain combines LoRA adapters")
    chain.adapters.append(Path(result.out_dir))
    record = StageRecord(kind, "succeeded", None, run_id, {**result.metrics, "adapter": str(result.out_dir)})
    stages.records.append(record)
    return record


def _fail(stages: Stages, kind: StageKind, run_id: int, exc: ReviewloopError) -> StageRecord:
    row = store_models.get_run(stages.db, run_id)
    if row is not None and row["status"] == "running":
        store_models.finish_run(stages.db, run_id, status="failed", reason=first_line(exc))
    stages.records.append(StageRecord(kind, "failed", first_line(exc), run_id))
    raise exc


def _rl_stage(
    config: RetrainConfig, stages: Stages, chain: Chain, dataset_dir: Path, counts: Mapping[str, Any], db: Pool
) -> StageRecord:
    """StraTA RL on the replay train split: it continues the last stage's adapter (no new rank for
    the server to hold), or trains a fresh one when no earlier stage trained."""
    if not config.run_rl:
        return stages.skip("rl", "switched off (run_rl = false)")
    thin = _enough(counts["replay"]["train"], config.min_replay_cases, "replay cases (reviews with labeled findings)")
    if thin:
        return stages.skip("rl", thin)
    from learning.replay import load_replay_cases
    from learning.strata.trainer import StrataTrainer

    out = chain.work_dir / "rl"
    continued = chain.adapters[-1] if chain.adapters else None
    base = chain.folded(len(chain.adapters) - 1) if continued is not None else chain.base_model
    try:
        trainer = StrataTrainer(
            config.rl,
            base_model=base,
            adapter=continued,
            train_cases=load_replay_cases(dataset_dir, split="train"),
            out_dir=out,
            train_config=config.rl_train,
            policy_config=config.rl_policy,
            env_config=config.replay_env,
            reward_config=config.replay_reward,
            db=db,
        )
        outcome = trainer.train()
        trainer.save(out / "adapter")
    except ReviewloopError as exc:
        run_id = stages.adopt("rl", key="out_dir", value=out) or stages.start("rl", {"out_dir": str(out)})
        return _fail(stages, "rl", run_id, exc)
    # the trainer records its run when given a store; a row of our own only if it did not
    rl_run = stages.adopt("rl", key="out_dir", value=out) or stages.start("rl", {"out_dir": str(out)})
    history = outcome.step_metrics
    rewards = [m["reward_mean"] for m in history if m.get("reward_mean") is not None]
    metrics = {
        "steps": outcome.steps,
        "first_reward_mean": rewards[0] if rewards else None,
        "last_reward_mean": rewards[-1] if rewards else None,
        "last_valid_share": history[-1].get("valid_share") if history else None,
        "continued_adapter": str(continued) if continued else None,
        "adapter": str(out / "adapter"),
    }
    if continued is not None:
        chain.adapters[-1] = out / "adapter"
    else:
        chain.adapters.append(out / "adapter")
    return stages.finish("rl", rl_run, metrics=metrics)


def _gate_stage(
    config: RetrainConfig,
    stages: Stages,
    chain: Chain,
    dataset_dir: Path,
    counts: Mapping[str, Any],
    db: Pool,
    report: RetrainReport,
    *,
    vllm: VllmServer | None,
) -> StageRecord:
    """Register the combined candidate, replay the held-out MRs under it and under the model in
    service, and promote it (vLLM first, then the registry) only when it wins by the margin."""
    if not chain.adapters:
        report.decision = "keep"
        return stages.skip("eval", "no stage trained a candidate")
    from learning.adapters import combine_adapters
    from learning.registry import promote_version, register_adapter
    from learning.replay import ReplayEnv, load_replay_cases
    from learning.retrain_gate import GateSide, evaluate_side, gate_decision

    card = next(r for r in stages.records if r.kind == "dataset").metrics
    snapshot = str(card["snapshot_id"])
    in_service = store_models.production_version(db)
    adapter = combine_adapters(chain.adapters, chain.work_dir / "candidate", max_rank=config.max_lora_rank)
    candidate = register_adapter(
        db,
        name=f"strategy-r{stages.parent_id}-{snapshot[:8]}",
        base_model=str(chain.base_model),
        adapter_path=adapter,
        dataset_snapshot=snapshot,
        metrics={
            "retrain_run_id": stages.parent_id,
            "stages": [r.kind for r in stages.records if r.status == "succeeded" and r.kind != "dataset"],
        },
        parent=in_service["id"] if in_service else None,
    )
    report.candidate_version_id = candidate["id"]
    gate_config = {"margin": config.margin, "min_eval_cases": config.min_eval_cases, "dataset": str(dataset_dir)}
    run_id = stages.start("eval", gate_config)
    n_eval = counts["replay"]["eval"]
    if n_eval < config.min_eval_cases:
        report.decision = "keep"
        reason = f"only {n_eval} held-out replay cases; at least {config.min_eval_cases} are needed to decide"
        return stages.finish(
            "eval",
            run_id,
            status="skipped",
            reason=reason,
            metrics={"decision": "keep", "promoted": False, "eval_cases": n_eval},
            model_version_id=candidate["id"],
        )
    cases = load_replay_cases(dataset_dir, split="eval")
    env = ReplayEnv(config.replay_env)
    sides = {}
    for role, side in (("baseline", GateSide.of_version(in_service)), ("candidate", GateSide.of_version(candidate))):
        sides[role] = evaluate_side(
            side,
            cases,
            env=env,
            reward_config=config.replay_reward,
            invalid_reward=config.rl_train.invalid_reward,
            max_new_tokens=config.gate_max_new_tokens,
        )
    decision = gate_decision(sides["candidate"], sides["baseline"], margin=config.margin)
    report.decision = decision
    metrics: dict[str, Any] = {
        "decision": decision,
        "promoted": False,
        "margin": config.margin,
        "eval_cases": len(cases),
        "improvement": round(sides["candidate"].reward_mean - sides["baseline"].reward_mean, 4),
        "baseline": sides["baseline"].as_metrics(),
        "candidate": sides["candidate"].as_metrics(),
    }
    if decision == "keep":
        store_models.reject_version(db, candidate["id"])
        return stages.finish("eval", run_id, metrics=metrics, model_version_id=candidate["id"])
    if not config.promote:
        reason = "the gate would promote; promotion is switched off (promote = false)"
        return stages.finish("eval", run_id, metrics=metrics, reason=reason, model_version_id=candidate["id"])
    if vllm is not None:  # the server must have the adapter before the registry sends reviews to it
        from learning.vllm_lora import load_lora_adapter

        try:
            load_lora_adapter(
                base_url=vllm.base_url,
                lora_name=candidate["serving_name"] or candidate["name"],
                lora_path=Path(candidate["adapter_path"] or adapter),
                api_key=vllm.api_key,
            )
        except ReviewloopError as exc:
            reason = f"not promoted: {first_line(exc)}"
            stages.finish(
                "eval", run_id, status="failed", reason=reason, metrics=metrics, model_version_id=candidate["id"]
            )
            raise
        metrics["loaded_into"] = vllm.base_url
    promote_version(db, candidate["id"])
    metrics["promoted"] = report.promoted = True
    return stages.finish("eval", run_id, metrics=metrics, model_version_id=candidate["id"])


__all__ = [
    "RETRAIN_LOCK_KEY",
    "RetrainBusyError",
    "RetrainConfig",
    "RetrainReport",
    "StageRecord",
    "VllmServer",
    "retrain",
    "retrain_lock",
]
