"""The evaluation gate: a candidate strategy model goes into service only if it beats the baseline.

Both are evaluated on the held-out replay split the same way serving would use them: the version is
loaded in process (the transformers backend, base model and adapter), asked with the strategy prompt
under the merge request's JSON schema (grammar-constrained greedy decoding, one retry with the
validation error: `agent.strategy.model_strategy`), an answer that still fails replaced by the
rule-based strategy (serving's fallback), and the strategy executed in the replay environment. A
version whose plans run with the analyzers alone (`executor` `analyzer-only`, what RL and this gate
execute with) is decoded under the decisions-only schema: that executor never reads free text, so
the version is judged on its decisions. What counts as valid is `agent.strategy.check_strategy`, the
rule StraTA's invalid penalty applies too. The numbers are mean reward (and each merge request's own
reward), precision/recall/F1 of the posted findings against the accepted ones (the evaluation's
matching rule), cost (reviewer steps) and the share of valid model answers.

The decision is paired by merge request (issue 41): every candidate is compared MR by MR with the
baseline (the model in service, or the rules) AND with the best fixed rule on the same cases (the
best of `learning.headroom.fixed_rules`, chosen on these very cases: the strictest such bar). It is
promoted only when the paired bootstrap interval's lower bound of its reward difference is above
`margin` (0 by default) against both, its F1 is not worse by more than `F1_TOLERANCE` and its valid
share did not fall by more than that. Unpaired means with a margin promoted the untrained base model
on a lucky split; a lower bound above zero does not. The decision and the numbers are stored as a
`training_runs` row of kind `eval`.

`rules` is a pseudo-version: the rule-based strategy (no model), the floor every model must clear.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.evaluation import match_findings, score_matches
from agent.llm.structured import InvalidOutput
from agent.store.db import Database
from agent.store.models import (
    ModelVersionRow,
    finish_run,
    production_version,
    promote,
    reject_version,
    start_run,
)
from agent.strategy import Strategy, check_strategy, model_strategy, parse_valid_strategy, rule_based_strategy
from learning.headroom import case_table, fixed_rules, strategy_of
from learning.paired_stats import PairedDifference, paired_difference
from learning.registry import resolve_version
from learning.replay import ReplayCase, ReplayEnv, accepted_expected
from learning.replay_reward import ReplayRewardConfig, reward
from reviewers.kernel.errors import InputError, LLMError, TrainingError

if TYPE_CHECKING:
    from learning.strata.policy import Device, StrategyPolicy

RULES = "rules"
# The lower bound of the paired 95 % interval must clear this: zero, so "better on these MRs beyond
# resampling noise" is the bar, not a hand-set effect size.
DEFAULT_MARGIN = 0.0
# How much F1 or valid-answer share a better-rewarded candidate may lose (reward already prices both).
F1_TOLERANCE = 0.02
DEFAULT_EVAL_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class PolicyEvaluation:
    """A policy's numbers on a set of replayed merge requests."""

    cases: int
    strategies: int  # strategies executed (cases × samples)
    mean_reward: float
    precision: float
    recall: float
    f1: float
    mean_steps: float  # reviewer steps per execution: the review's cost
    valid_share: float  # model answers that were valid strategies (1.0 for the rules)
    per_case: tuple[float, ...] = ()  # each case's mean reward, in case order: what pairing reads

    def as_dict(self) -> dict[str, float | int]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items() if k != "per_case"}


@dataclass(frozen=True)
class GateDecision:
    promote: bool
    reason: str
    reward_delta: float
    f1_delta: float
    vs_baseline: PairedDifference | None = None
    vs_best_fixed: PairedDifference | None = None
    best_fixed_rule: str | None = None


# --- turning policies into strategies --------------------------------------------------------------


def rule_strategies(cases: Sequence[ReplayCase], env: ReplayEnv) -> list[list[Strategy | None]]:
    """The rule-based strategy per case (what runs without a model)."""
    return [[rule_based_strategy(env.files(c), c.repo_config())] for c in cases]


def parse_strategy(text: str) -> Strategy | None:
    try:
        return parse_valid_strategy(text)
    except InvalidOutput:
        return None


def model_strategies(
    policy: StrategyPolicy,
    cases: Sequence[ReplayCase],
    env: ReplayEnv,
    *,
    temperature: float = 0.0,
    samples: int = 1,
    max_new_tokens: int = DEFAULT_EVAL_MAX_NEW_TOKENS,
    seed: int = 0,
    batch_size: int = 16,
) -> list[list[Strategy | None]]:
    """Per case, `samples` strategies the policy writes (greedy at temperature 0); None where invalid."""
    out: list[list[Strategy | None]] = []
    for start in range(0, len(cases), batch_size):
        chunk = cases[start : start + batch_size]
        completions = policy.sample(
            [policy.prompt_ids(env.reset(c)) for c in chunk],
            n=samples,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            seed=seed + start,
        )
        out += [[parse_strategy(policy.decode(ids)) for ids in rows] for rows in completions]
    return out


# --- scoring ---------------------------------------------------------------------------------------


def evaluate_strategies(
    cases: Sequence[ReplayCase],
    strategies: Sequence[Sequence[Strategy | None]],
    *,
    env: ReplayEnv,
    reward_config: ReplayRewardConfig,
    invalid_reward: float | None = None,
) -> PolicyEvaluation:
    """Execute every strategy on its case and aggregate.

    Validity is `check_strategy` (RL's rule). An answer that did not parse (None) is replaced by the
    rule-based strategy and a plan that leaves out a reviewer is completed by `constrain_strategy`, as
    serving does, unless `invalid_reward` is given: then an invalid one is not executed and scores
    that (how training sees it).
    """
    if len(cases) != len(strategies) or not cases:
        raise TrainingError(f"{len(cases)} cases but {len(strategies)} strategy lists")
    rewards: list[float] = []
    per_case: list[float] = []
    steps: list[int] = []
    matches = []
    valid = total = 0
    for case, options in zip(cases, strategies, strict=True):
        case_rewards: list[float] = []
        for z in options:
            total += 1
            ok = check_strategy(z, env.files(case), case.repo_config()).valid
            if not ok and invalid_reward is not None:
                case_rewards.append(invalid_reward)
                steps.append(0)
                continue
            valid += ok
            execution = env.execute(
                case, z if z is not None else rule_based_strategy(env.files(case), case.repo_config())
            )
            case_rewards.append(reward(execution, case, reward_config))
            steps.append(execution.n_steps)
            matches.append(match_findings(execution.findings, accepted_expected(case)))
        rewards += case_rewards
        per_case.append(float(np.mean(case_rewards)) if case_rewards else 0.0)
    overall: dict[str, Any] = score_matches(matches)["overall"] if matches else {}  # type: ignore[assignment]
    return PolicyEvaluation(
        cases=len(cases),
        strategies=total,
        mean_reward=float(np.mean(rewards)),
        precision=float(overall.get("precision", 0.0)),
        recall=float(overall.get("recall", 0.0)),
        f1=float(overall.get("f1", 0.0)),
        mean_steps=float(np.mean(steps)),
        valid_share=valid / total,
        per_case=tuple(per_case),
    )


def _paired(candidate: PolicyEvaluation, other: PolicyEvaluation, what: str, *, seed: int) -> PairedDifference:
    if not candidate.per_case or len(candidate.per_case) != len(other.per_case):
        raise InputError(
            f"the gate pairs by merge request: the candidate has {len(candidate.per_case)} per-case rewards, "
            f"the {what} {len(other.per_case)} (evaluate both on the same cases with `evaluate_strategies`)"
        )
    return paired_difference(candidate.per_case, other.per_case, seed=seed)


def _interval(d: PairedDifference) -> str:
    return f"{d.mean:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}] over {d.n} MRs"


def gate_decision(
    candidate: PolicyEvaluation,
    baseline: PolicyEvaluation,
    *,
    margin: float = DEFAULT_MARGIN,
    best_fixed: PolicyEvaluation | None = None,
    best_fixed_rule: str | None = None,
    seed: int = 0,
) -> GateDecision:
    """Promote only a candidate whose paired reward difference's 95 % lower bound is above `margin`
    against the baseline and (when given) the best fixed rule, not worse by `F1_TOLERANCE` in F1 or
    validity. Both evaluations must carry per-case rewards over the same cases."""
    if not math.isfinite(margin) or margin < 0:
        raise InputError(f"the margin must be a non-negative number, got {margin}")
    reward_delta = candidate.mean_reward - baseline.mean_reward
    f1_delta = candidate.f1 - baseline.f1
    vs_base = _paired(candidate, baseline, "baseline", seed=seed)
    vs_fixed = _paired(candidate, best_fixed, "best fixed rule", seed=seed) if best_fixed is not None else None

    def decision(promote: bool, why: str) -> GateDecision:
        return GateDecision(promote, why, reward_delta, f1_delta, vs_base, vs_fixed, best_fixed_rule)

    if candidate.valid_share < baseline.valid_share - F1_TOLERANCE:
        return decision(
            False, f"valid strategy share fell from {baseline.valid_share:.2f} to {candidate.valid_share:.2f}"
        )
    if vs_base.lo <= margin:
        return decision(
            False,
            f"reward vs the baseline {_interval(vs_base)}: the lower bound is not above {margin}",
        )
    if vs_fixed is not None and vs_fixed.lo <= margin:
        return decision(
            False,
            f"reward vs the best fixed rule ({best_fixed_rule}) {_interval(vs_fixed)}: "
            f"the lower bound is not above {margin}",
        )
    if f1_delta < -F1_TOLERANCE:
        return decision(False, f"F1 fell from {baseline.f1:.3f} to {candidate.f1:.3f}")
    why = f"reward vs the baseline {_interval(vs_base)}"
    if vs_fixed is not None:
        why += f"; vs the best fixed rule {_interval(vs_fixed)}"
    return decision(True, why)


def best_fixed_rule_evaluation(
    cases: Sequence[ReplayCase], *, env: ReplayEnv, reward_config: ReplayRewardConfig
) -> tuple[str, PolicyEvaluation]:
    """The best MR-independent plan rule on these cases and its numbers (executed as plans, exactly as a
    model's plan would be). Chosen on the gate's own cases, so it is the strictest fixed bar there is."""
    tables = [case_table(env, case, reward_config) for case in cases]
    names = sorted({r.name for c in cases for r in fixed_rules(c.repo_config().reviewers)})
    best: tuple[float, str, PolicyEvaluation] | None = None
    for name in names:
        strategies: list[list[Strategy | None]] = []
        for case, table in zip(cases, tables, strict=True):
            rule = next((r for r in fixed_rules(case.repo_config().reviewers) if r.name == name), None)
            if rule is None:
                strategies.append([rule_based_strategy(env.files(case), case.repo_config())])
                continue
            change_type = rule_based_strategy(env.files(case), case.repo_config()).change_type
            strategies.append([strategy_of(rule.visits(table), change_type=change_type)])
        numbers = evaluate_strategies(cases, strategies, env=env, reward_config=reward_config)
        if best is None or (numbers.mean_reward, name) > (best[0], best[1]):
            best = (numbers.mean_reward, name, numbers)
    if best is None:
        raise InputError("no fixed rule applies to these cases")
    return best[1], best[2]


# --- versions --------------------------------------------------------------------------------------

VersionRef = ModelVersionRow | None
"""A model version, or None for the rules pseudo-version."""


def version_or_rules(db: Database, ref: str) -> VersionRef:
    """`rules` (None), or a version by id or name: the registry's one lookup (`resolve_version`)."""
    if ref == RULES:
        return None
    try:
        return resolve_version(db, ref)
    except InputError as exc:
        raise InputError(f"{exc} (give an id, a name, or 'rules')") from None


def describe(ref: VersionRef) -> str:
    return RULES if ref is None else f"{ref['name']} (id {ref['id']})"


def decides_only(row: ModelVersionRow) -> bool:
    """Whether a version is judged on its decisions alone: its plans run with the analyzers only."""
    return row.get("executor") == "analyzer-only"


def served_strategies(
    row: ModelVersionRow,
    cases: Sequence[ReplayCase],
    env: ReplayEnv,
    *,
    device: Device = "auto",
    max_new_tokens: int = DEFAULT_EVAL_MAX_NEW_TOKENS,
) -> list[list[Strategy | None]]:
    """Per case, the strategy the version writes as serving asks for it (None where it failed twice).

    The in-process backend (base model + adapter) decodes greedily under the case's schema: the
    decisions-only one for an analyzer-only version, with the focus paths capped at what the
    environment's step budget cap lets a reviewer reach.
    """
    from agent.llm.transformers_local import TransformersLLM

    llm = TransformersLLM(
        Path(row["base_model"]),
        adapter_path=Path(row["adapter_path"]) if row["adapter_path"] else None,
        device=device,
        max_output_tokens=max_new_tokens,
        schema_in_prompt=False,  # a trained version is asked with exactly its training prompt
        model_name=row["name"],
    )
    decisions = decides_only(row)
    out: list[list[Strategy | None]] = []
    for case in cases:
        try:
            z: Strategy | None = model_strategy(
                llm,
                s1=env.reset(case),
                files=env.files(case),
                config=case.repo_config(),
                decisions_only=decisions,
                max_focus_paths=env.config.step_budget_cap,
            )
        except LLMError:
            z = None
        out.append([z])
    return out


def evaluate_version(
    ref: VersionRef,
    cases: Sequence[ReplayCase],
    *,
    env: ReplayEnv,
    reward_config: ReplayRewardConfig,
    device: Device = "auto",
    max_new_tokens: int = DEFAULT_EVAL_MAX_NEW_TOKENS,
) -> PolicyEvaluation:
    """A version's numbers as serving would produce them (`served_strategies`, rule fallback)."""
    if ref is None:
        strategies = rule_strategies(cases, env)
    else:
        strategies = served_strategies(ref, cases, env, device=device, max_new_tokens=max_new_tokens)
    return evaluate_strategies(cases, strategies, env=env, reward_config=reward_config)


@dataclass(frozen=True)
class Comparison:
    """Both versions' numbers on the same held-out cases, and the gate's decision between them."""

    candidate: PolicyEvaluation
    baseline: PolicyEvaluation
    decision: GateDecision


def compare_versions(
    candidate: ModelVersionRow,
    baseline: VersionRef,
    cases: Sequence[ReplayCase],
    *,
    margin: float,
    env: ReplayEnv,
    reward_config: ReplayRewardConfig,
    device: Device = "auto",
    max_new_tokens: int = DEFAULT_EVAL_MAX_NEW_TOKENS,
    vs_best_fixed: bool = True,
) -> Comparison:
    """The gate itself, as `eval-model` and the retrain's last stage both run it: each version reviews
    the cases the way serving would (`evaluate_version`), then `gate_decision` decides."""
    numbers = {
        role: evaluate_version(
            ref, cases, env=env, reward_config=reward_config, device=device, max_new_tokens=max_new_tokens
        )
        for role, ref in (("candidate", candidate), ("baseline", baseline))
    }
    fixed_name: str | None = None
    fixed: PolicyEvaluation | None = None
    if vs_best_fixed:
        fixed_name, fixed = best_fixed_rule_evaluation(cases, env=env, reward_config=reward_config)
    decision = gate_decision(
        numbers["candidate"], numbers["baseline"], margin=margin, best_fixed=fixed, best_fixed_rule=fixed_name
    )
    return Comparison(candidate=numbers["candidate"], baseline=numbers["baseline"], decision=decision)


@dataclass(frozen=True)
class GateReport:
    candidate: str
    baseline: str
    candidate_numbers: PolicyEvaluation
    baseline_numbers: PolicyEvaluation
    decision: GateDecision
    run_id: int | None
    promoted_id: int | None


def run_gate(
    db: Database,
    *,
    candidate: str,
    baseline: str | None,
    cases: Sequence[ReplayCase],
    margin: float = DEFAULT_MARGIN,
    env: ReplayEnv | None = None,
    reward_config: ReplayRewardConfig | None = None,
    device: Device = "auto",
    max_new_tokens: int = DEFAULT_EVAL_MAX_NEW_TOKENS,
    apply: bool = True,
) -> GateReport:
    """Evaluate both, decide, store the decision (kind `eval`), and promote or reject the candidate.

    `baseline=None` compares with the version in service, or the rules when none is. With
    `apply=False` nothing is promoted or rejected (the decision is still stored).
    """
    cand = version_or_rules(db, candidate)
    if cand is None:
        raise InputError("the candidate must be a model version; 'rules' can only be the baseline")
    base = production_version(db) if baseline is None else version_or_rules(db, baseline)
    if base is not None and base["id"] == cand["id"]:
        raise InputError("the candidate and the baseline are the same version")
    env = env or ReplayEnv()
    reward_config = reward_config or ReplayRewardConfig()
    config = {
        "candidate": describe(cand),
        "baseline": describe(base),
        "margin": margin,
        "cases": len(cases),
        "reward": asdict(reward_config),
        "env": asdict(env.config),
    }
    run_id = start_run(db, "eval", config)
    try:
        comparison = compare_versions(
            cand,
            base,
            cases,
            margin=margin,
            env=env,
            reward_config=reward_config,
            device=device,
            max_new_tokens=max_new_tokens,
        )
        decision = comparison.decision
        promoted_id = None
        if apply and decision.promote:
            promote(db, cand["id"])
            promoted_id = cand["id"]
        elif apply and cand["stage"] == "candidate":
            reject_version(db, cand["id"])
    except BaseException as exc:
        finish_run(db, run_id, status="failed", reason=(str(exc).strip().splitlines() or [type(exc).__name__])[0])
        raise
    finish_run(
        db,
        run_id,
        status="succeeded",
        reason=decision.reason,
        model_version_id=cand["id"],
        metrics={
            "decision": "promote" if decision.promote else "refuse",
            "applied": apply,
            "reward_delta": decision.reward_delta,
            "f1_delta": decision.f1_delta,
            "paired_vs_baseline": decision.vs_baseline.as_dict() if decision.vs_baseline else None,
            "paired_vs_best_fixed": decision.vs_best_fixed.as_dict() if decision.vs_best_fixed else None,
            "best_fixed_rule": decision.best_fixed_rule,
            "candidate": comparison.candidate.as_dict(),
            "baseline": comparison.baseline.as_dict(),
        },
    )
    return GateReport(
        candidate=describe(cand),
        baseline=describe(base),
        candidate_numbers=comparison.candidate,
        baseline_numbers=comparison.baseline,
        decision=decision,
        run_id=run_id,
        promoted_id=promoted_id,
    )
