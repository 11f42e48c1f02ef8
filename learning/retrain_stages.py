"""The training stages of a retrain and how each is recorded.

Each stage function takes the run's `RunContext` and returns its `StageRecord` after writing its
`training_runs` row under the parent `retrain` row: skipped with the reason when its data is thin or
it is switched off, succeeded with its metrics, or failed with the error's first line. The TRL
trainers and StraTA record their own rows (with per-step metrics); those rows are adopted into the
parent run rather than duplicated. `Chain` is the policy as the stages build it: the original base
model plus the LoRA adapters trained so far, each on the base with the earlier ones folded in.

The last stage, `gate_stage`, combines the stages' adapters into one adapter on the original base
(learning/adapters.py) and registers it as a candidate version. The held-out replay merge requests
are then reviewed under the candidate and under the version in service — the rule-based strategy
when none is — by the one evaluation gate (learning/gate.py: each version asked as serving asks it,
in process under the merge request's schema with one retry, the decisions-only schema for the
analyzer-only candidate; an answer that still fails replaced by the rules), whose rule decides.
The decision goes into the eval row's metrics as `decision` ("promote"/"keep") and `promoted`
(whether it is in service now), which the dashboard shows. A kept candidate is rejected. A promoted
one is loaded into vLLM first when vLLM serves (the registry must never name an adapter the server
does not have), then put in service in the registry; the transformers backend reads the registry at
every review, so nothing else is needed.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent.store import models as store_models
from agent.store.db import Pool, connection
from agent.store.models import RunStatus
from learning.datasets import DatasetCard, DatasetConfig, build_datasets
from learning.retrain_config import RetrainConfig
from learning.vllm_lora import VllmServer
from reviewers.kernel.errors import ReviewloopError, TrainingError

log = logging.getLogger(__name__)

Decision = Literal["promote", "keep"]

StageKind = Literal["dataset", "sft", "dpo", "kto", "rl", "eval"]
STAGES: tuple[StageKind, ...] = ("dataset", "sft", "dpo", "kto", "rl", "eval")


@dataclass
class StageRecord:
    kind: StageKind
    status: RunStatus
    reason: str | None
    run_id: int | None
    metrics: dict[str, Any] = field(default_factory=dict)


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


class Stages:
    """Records each stage under the parent run, and keeps them for the report."""

    def __init__(self, db: Pool, parent_id: int) -> None:
        self.db = db
        self.parent_id = parent_id
        self.records: list[StageRecord] = []

    def skip(self, kind: StageKind, reason: str, **metrics: Any) -> StageRecord:
        if kind == "eval":  # no gate ran: the version in service stays, and the row says so
            metrics = {"decision": "keep", "promoted": False, **metrics}
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


@dataclass
class RunContext:
    """What every stage works with."""

    db: Pool
    config: RetrainConfig
    stages: Stages
    chain: Chain
    dataset_dir: Path
    counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # the dataset card's counts


def dataset_stage(run: RunContext) -> StageRecord:
    """Build every dataset kind from the store; an empty store is a skip, not a failure."""
    db, config, stages, dataset_dir = run.db, run.config, run.stages, run.dataset_dir
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
    run.counts = card.counts
    metrics = {"card": card.model_dump(mode="json"), "snapshot_id": card.snapshot_id, "reviews": card.reviews}
    return stages.finish("dataset", run_id, metrics=metrics)


def enough(have: int, need: int, what: str) -> str | None:
    """None when there is enough, else the reason the stage is skipped."""
    return None if have >= need else f"only {have} {what} in the train split; at least {need} are needed"


def sft_stage(run: RunContext) -> StageRecord:
    """SFT on the well-received strategies."""
    config, stages, counts, dataset_dir, db = run.config, run.stages, run.counts, run.dataset_dir, run.db
    if not config.run_sft:
        return stages.skip("sft", "switched off (run_sft = false)")
    need = max(config.min_sft_examples, config.sft.min_train_rows)
    thin = enough(counts["strategy_sft"]["train"], need, "well-received strategies")
    if thin:
        return stages.skip("sft", thin)
    from learning.train_sft import train_sft

    return _train_stage("sft", run, lambda base, out: train_sft(
        base_model=base, dataset_dir=dataset_dir, out_dir=out, config=config.sft, db=db
    ))  # fmt: skip


def preference_stage(run: RunContext) -> StageRecord:
    """DPO when there are enough pairs, else KTO when there are enough unpaired labels; both recorded."""
    config, stages, counts, dataset_dir, db = run.config, run.stages, run.counts, run.dataset_dir, run.db
    if not config.run_preference:
        stages.skip("kto", "switched off (run_preference = false)")
        return stages.skip("dpo", "switched off (run_preference = false)")
    pairs, labels = counts["strategy_dpo"]["train"], counts["strategy_kto"]["train"]
    dpo_thin = enough(pairs, max(config.min_dpo_pairs, config.dpo.min_train_rows), "preference pairs")
    if dpo_thin is None:
        from learning.train_dpo import train_dpo

        record = _train_stage("dpo", run, lambda base, out: train_dpo(
            base_model=base, dataset_dir=dataset_dir, out_dir=out, config=config.dpo, db=db
        ))  # fmt: skip
        stages.skip("kto", f"DPO trained on {pairs} preference pairs; KTO is for when pairs are too few")
        return record
    stages.skip("dpo", dpo_thin)
    kto_thin = enough(labels, max(config.min_kto_labels, config.kto.min_train_rows), "labeled strategies")
    if kto_thin is not None:
        return stages.skip("kto", kto_thin)
    from learning.train_kto import train_kto

    return _train_stage("kto", run, lambda base, out: train_kto(
        base_model=base, dataset_dir=dataset_dir, out_dir=out, config=config.kto, db=db
    ))  # fmt: skip


def _train_stage(
    kind: Literal["sft", "dpo", "kto"], run: RunContext, train: Callable[[Path, Path], Any]
) -> StageRecord:
    """Run a TRL trainer on the chain's current base; its own `training_runs` row joins the parent."""
    stages, chain, dataset_dir = run.stages, run.chain, run.dataset_dir
    base = chain.training_base()
    out = chain.work_dir / kind
    try:
        result = train(base, out)
    except ReviewloopError as exc:
        run_id = stages.adopt(kind, key="dataset", value=dataset_dir)
        if run_id is None:  # it failed before recording its row
            run_id = stages.start(kind, {"dataset": str(dataset_dir)})
        return fail(stages, kind, run_id, exc)
    run_id = stages.adopt(kind, key="dataset", value=dataset_dir) or result.run_id
    if not result.uses_lora:
        raise TrainingError(f"the {kind} stage trained every weight (use_lora = false); retrain combines LoRA adapters")
    chain.adapters.append(Path(result.out_dir))
    record = StageRecord(kind, "succeeded", None, run_id, {**result.metrics, "adapter": str(result.out_dir)})
    stages.records.append(record)
    return record


def fail(stages: Stages, kind: StageKind, run_id: int, exc: ReviewloopError) -> StageRecord:
    row = store_models.get_run(stages.db, run_id)
    if row is not None and row["status"] == "running":
        store_models.finish_run(stages.db, run_id, status="failed", reason=first_line(exc))
    stages.records.append(StageRecord(kind, "failed", first_line(exc), run_id))
    raise exc


def rl_stage(run: RunContext) -> StageRecord:
    """StraTA RL on the replay train split: it continues the last stage's adapter (no new rank for
    the server to hold), or trains a fresh one when no earlier stage trained."""
    config, stages, chain, counts, dataset_dir, db = (
        run.config,
        run.stages,
        run.chain,
        run.counts,
        run.dataset_dir,
        run.db,
    )
    if not config.run_rl:
        return stages.skip("rl", "switched off (run_rl = false)")
    thin = enough(counts["replay"]["train"], config.min_replay_cases, "replay cases (reviews with labeled findings)")
    if thin:
        return stages.skip("rl", thin)
    from learning.train_rl import train_rl

    out = chain.work_dir / "rl"
    continued = chain.adapters[-1] if chain.adapters else None
    base = chain.folded(len(chain.adapters) - 1) if continued is not None else chain.base_model
    try:
        result = train_rl(base_model=base, replay=dataset_dir, out_dir=out, config=config.rl, adapter=continued, db=db)
    except ReviewloopError as exc:
        run_id = stages.adopt("rl", key="out_dir", value=out) or stages.start("rl", {"out_dir": str(out)})
        return fail(stages, "rl", run_id, exc)
    if result.adapter_path is None:
        raise TrainingError(
            "the rl stage trained every weight (policy.use_lora = false); retrain combines LoRA adapters"
        )
    # train_rl records its run (with step metrics) when given a store; a row of our own only if it did not
    run_id = stages.adopt("rl", key="out_dir", value=out) or stages.start("rl", {"out_dir": str(out)})
    rewards = [m["reward_mean"] for m in result.step_metrics if m.get("reward_mean") is not None]
    metrics = {
        **result.metrics,
        "first_reward_mean": rewards[0] if rewards else None,
        "last_reward_mean": rewards[-1] if rewards else None,
        "continued_adapter": str(continued) if continued else None,
        "adapter": result.adapter_path,
    }
    if continued is not None:
        chain.adapters[-1] = Path(result.adapter_path)
    else:
        chain.adapters.append(Path(result.adapter_path))
    return stages.finish("rl", run_id, metrics=metrics)


@dataclass(frozen=True)
class GateOutcome:
    record: StageRecord
    decision: Decision
    promoted: bool
    candidate_version_id: int | None


def gate_stage(run: RunContext, *, vllm: VllmServer | None) -> GateOutcome:
    """The last stage: register the combined candidate, run the gate (`learning.gate.compare_versions`)
    on the held-out MRs against the model in service, and promote the candidate (vLLM first, then the
    registry) only when it wins by the margin."""
    config, stages, chain, counts, dataset_dir, db = (
        run.config,
        run.stages,
        run.chain,
        run.counts,
        run.dataset_dir,
        run.db,
    )
    if not chain.adapters:
        return GateOutcome(stages.skip("eval", "no stage trained a candidate"), "keep", False, None)
    from learning.adapters import combine_adapters
    from learning.gate import compare_versions
    from learning.registry import promote_version, register_adapter
    from learning.replay import ReplayEnv, load_replay_cases

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
        # RL and this gate run plans with the replay environment's analyzer-only reviewers
        executor="analyzer-only",
    )
    gate_config = {"margin": config.margin, "min_eval_cases": config.min_eval_cases, "dataset": str(dataset_dir)}
    run_id = stages.start("eval", gate_config)
    n_eval = counts["replay"]["eval"]
    if n_eval < config.min_eval_cases:
        reason = f"only {n_eval} held-out replay cases; at least {config.min_eval_cases} are needed to decide"
        record = stages.finish(
            "eval",
            run_id,
            status="skipped",
            reason=reason,
            metrics={"decision": "keep", "promoted": False, "eval_cases": n_eval},
            model_version_id=candidate["id"],
        )
        return GateOutcome(record, "keep", False, candidate["id"])
    cases = load_replay_cases(dataset_dir, split="eval")
    env = ReplayEnv(config.rl.env)
    compared = compare_versions(
        candidate,
        in_service,
        cases,
        margin=config.margin,
        env=env,
        reward_config=config.rl.reward,
        device=config.rl.policy.device,
        max_new_tokens=config.gate_max_new_tokens,
        vs_best_fixed=config.gate_vs_best_fixed,
    )
    verdict = compared.decision
    decision: Decision = "promote" if verdict.promote else "keep"
    metrics: dict[str, Any] = {
        "decision": decision,
        "promoted": False,
        "why": verdict.reason,
        "margin": config.margin,
        "eval_cases": len(cases),
        "reward_delta": round(verdict.reward_delta, 4),
        "f1_delta": round(verdict.f1_delta, 4),
        "paired_vs_baseline": verdict.vs_baseline.as_dict() if verdict.vs_baseline else None,
        "paired_vs_best_fixed": verdict.vs_best_fixed.as_dict() if verdict.vs_best_fixed else None,
        "best_fixed_rule": verdict.best_fixed_rule,
        "baseline": {"name": in_service["name"] if in_service else "rules", **compared.baseline.as_dict()},
        "candidate": {"name": candidate["name"], **compared.candidate.as_dict()},
    }
    if decision == "keep":
        store_models.reject_version(db, candidate["id"])
        record = stages.finish("eval", run_id, metrics=metrics, reason=verdict.reason, model_version_id=candidate["id"])
        return GateOutcome(record, decision, False, candidate["id"])
    if not config.promote:
        reason = "the gate would promote; promotion is switched off (promote = false)"
        record = stages.finish("eval", run_id, metrics=metrics, reason=reason, model_version_id=candidate["id"])
        return GateOutcome(record, decision, False, candidate["id"])
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
    metrics["promoted"] = True
    record = stages.finish("eval", run_id, metrics=metrics, model_version_id=candidate["id"])
    return GateOutcome(record, decision, True, candidate["id"])
