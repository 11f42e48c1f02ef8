"""The evaluation gate of a retrain: the candidate against the model in service, on held-out MRs.

Each side writes a strategy for every held-out replay case the way serving does (the registry
version loaded through the LLM factory — base model plus LoRA adapter, asked with exactly the
training prompt and validated, retried once with the validation error), or with the rule-based
strategy when no version is in service. The strategy is executed in the replay environment and the
execution rewarded against the people's labels (learning/replay.py), with precision and recall of
the findings against the accepted ones. A side whose output never validates scores the replay
reward of an invalid strategy, as in RL rollouts: serving would fall back to the rules for it, but
crediting a broken model with the rules' work would let it win ties with them.

The candidate is promoted only when its mean reward beats the baseline's by more than the margin.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent.evaluation import match_findings, score_matches
from agent.llm.factory import make_llm
from agent.store.models import ModelVersionRow
from agent.strategy import Strategy, rule_based_strategy, strategy_messages
from learning.replay import ReplayCase, ReplayEnv, ReplayRewardConfig, accepted_expected, reward_breakdown
from reviewers.contracts import LLMPort
from reviewers.errors import LLMError, TrainingError

log = logging.getLogger(__name__)

Decision = Literal["promote", "keep"]
RULES = "rules"


@dataclass(frozen=True)
class GateSide:
    """One side of the comparison: a registry version (base + adapter) or the rule-based strategy."""

    name: str
    version_id: int | None = None
    base_model: Path | None = None
    adapter: Path | None = None

    @classmethod
    def of_version(cls, row: ModelVersionRow | None) -> GateSide:
        if row is None:
            return cls(RULES)
        return cls(
            row["name"],
            row["id"],
            Path(row["base_model"]),
            Path(row["adapter_path"]) if row["adapter_path"] else None,
        )


@dataclass
class SideResult:
    """How one side did on the held-out cases."""

    name: str
    version_id: int | None
    rewards: list[float]
    valid_share: float  # cases whose strategy came from the side's model (1.0 for the rules)
    steps_mean: float  # reviewer steps per review: the cost of the strategy
    findings: dict[str, Any] = field(default_factory=dict)  # precision/recall/F1 against accepted findings

    @property
    def reward_mean(self) -> float:
        return sum(self.rewards) / len(self.rewards) if self.rewards else 0.0

    def as_metrics(self) -> dict[str, Any]:
        return {**asdict(self), "reward_mean": round(self.reward_mean, 4)}


def gate_decision(candidate: SideResult, baseline: SideResult, *, margin: float) -> Decision:
    """Promote only a candidate whose mean reward exceeds the baseline's by more than `margin`."""
    return "promote" if candidate.reward_mean - baseline.reward_mean > margin else "keep"


def _side_llm(side: GateSide, *, max_new_tokens: int) -> LLMPort | None:
    if side.base_model is None:
        return None
    llm = make_llm(
        base_url=None,
        model=side.name,
        api_key=None,
        model_path=side.base_model,
        adapter_path=side.adapter,
        timeout_s=600.0,
        max_retries=0,
        max_output_tokens=max_new_tokens,
        schema_in_prompt=False,
    )
    if llm is None:  # cannot happen: a model path is given
        raise TrainingError(f"model version {side.name} names no model to load")
    return llm


def evaluate_side(
    side: GateSide,
    cases: Sequence[ReplayCase],
    *,
    env: ReplayEnv,
    reward_config: ReplayRewardConfig,
    invalid_reward: float,
    max_new_tokens: int,
) -> SideResult:
    """Write, execute and reward one strategy per case (greedy decoding: what serving would get)."""
    llm = _side_llm(side, max_new_tokens=max_new_tokens)
    rewards: list[float] = []
    matches = []
    valid = 0
    steps = 0
    try:
        for case in cases:
            files = env.files(case)
            z: Strategy | None
            if llm is None:
                z = rule_based_strategy(files, case.repo_config())
            else:
                try:
                    z = llm.complete_json(strategy_messages(env.reset(case)), Strategy, purpose="strategy")
                except LLMError as exc:
                    log.info("gate: %s wrote no valid strategy for case %s: %s", side.name, case.case_id, exc)
                    z = None
            if z is None:
                rewards.append(invalid_reward)
                matches.append(match_findings([], accepted_expected(case)))
                continue
            valid += 1
            execution = env.execute(case, z)
            rewards.append(reward_breakdown(execution, case, reward_config).total)
            matches.append(match_findings(execution.findings, accepted_expected(case)))
            steps += execution.n_steps
    finally:
        del llm
        gc.collect()  # free the model before the other side loads its own (GPU memory)
    return SideResult(
        name=side.name,
        version_id=side.version_id,
        rewards=[round(r, 4) for r in rewards],
        valid_share=valid / len(cases) if cases else 0.0,
        steps_mean=steps / len(cases) if cases else 0.0,
        findings=dict(score_matches(matches)["overall"]),  # type: ignore[call-overload]
    )
