"""The last stage of a retrain: the evaluation gate, and promotion of a candidate that passes it.

The stages' adapters are combined into one adapter on the original base (learning/adapters.py) and
registered as a candidate version. The held-out replay merge requests are then reviewed under the
candidate and under the version in service — the rule-based strategy when none is — the way serving
would (learning/gate.py: greedy decoding, an invalid answer replaced by the rules), and the gate's
rule decides. The decision goes into the eval row's metrics as `decision` ("promote"/"keep") and
`promoted` (whether it is in service now), which the dashboard shows. A kept candidate is rejected.
A promoted one is loaded into vLLM first when vLLM serves (the registry must never name an adapter
the server does not have), then put in service in the registry; the transformers backend reads the
registry at every review, so nothing else is needed there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent.store import models as store_models
from learning.retrain_stages import RunContext, StageRecord, first_line
from learning.vllm_lora import VllmServer
from reviewers.errors import ReviewloopError

Decision = Literal["promote", "keep"]


@dataclass(frozen=True)
class GateOutcome:
    record: StageRecord
    decision: Decision
    promoted: bool
    candidate_version_id: int | None


def gate_stage(run: RunContext, *, vllm: VllmServer | None) -> GateOutcome:
    """Register the combined candidate, replay the held-out MRs under it and under the model in
    service, and promote it (vLLM first, then the registry) only when it wins by the margin."""
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
    from learning.gate import evaluate_version, gate_decision
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
    numbers = {
        role: evaluate_version(
            ref,
            cases,
            env=env,
            reward_config=config.rl.reward,
            device=config.rl.policy.device,
            max_new_tokens=config.gate_max_new_tokens,
        )
        for role, ref in (("baseline", in_service), ("candidate", candidate))
    }
    verdict = gate_decision(numbers["candidate"], numbers["baseline"], margin=config.margin)
    decision: Decision = "promote" if verdict.promote else "keep"
    metrics: dict[str, Any] = {
        "decision": decision,
        "promoted": False,
        "why": verdict.reason,
        "margin": config.margin,
        "eval_cases": len(cases),
        "reward_delta": round(verdict.reward_delta, 4),
        "f1_delta": round(verdict.f1_delta, 4),
        "baseline": {"name": in_service["name"] if in_service else "rules", **numbers["baseline"].as_dict()},
        "candidate": {"name": candidate["name"], **numbers["candidate"].as_dict()},
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
