"""Headroom before training: what the best plan per merge request would earn over the rule plan.

A null result of training can only be read against the headroom it had (issue 24). With the fixed
executor an execution is deterministic and its reward additive over (reviewer, file) visits
(`learning.replay`'s execution model), so one table of each visit's value per merge request gives
every valid plan's reward as a sum. From that table:

- **rule**: serving's rule-based plan (`agent.strategy.rule_based_strategy`, with the case's history),
  executed exactly;
- **random**: the mean over `random_plans` uniformly drawn valid plans (the decisions-only space: the
  mandatory reviewer first with 1..B files, then optionally one other reviewer with the rest);
- **oracle**: the best valid plan per merge request — for each share k of the budget B given to the
  mandatory reviewer, its k best files, then the other reviewer whose best positive visits fill the
  rest best — executed exactly (the sum is only the search);
- **best fixed rule**: of a small family of MR-independent rules (file order × second reviewer × the
  mandatory reviewer's share), the one best on the training split, reported on both.

Each reference is reported as the reward and its parts — found value (severity weight of accepted
labels matched), rejected posts, noise posts, steps — so a gain in cost alone is visible as such.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from agent.risk import change_signals
from agent.strategy import Strategy, mandatory_reviewers, rule_based_strategy
from learning.replay import Execution, ReplayCase, ReplayEnv
from learning.replay_reward import ReplayRewardConfig, reward_breakdown
from reviewers.kernel.contracts import FileChange, PlanItem

Visit = tuple[str, str]
FILE_ORDERS = ("diff", "largest", "risk")
SECURITY_SHARES = (1.0, 0.67, 0.5, 0.34)


@dataclass(frozen=True)
class Outcome:
    """A plan's reward on one merge request and its parts (costs as positive amounts lost)."""

    reward: float
    found: float  # Σ severity weights of matched accepted labels
    rejected_cost: float
    noise_cost: float
    step_cost: float
    steps: int

    def __add__(self, other: Outcome) -> Outcome:
        return Outcome(
            self.reward + other.reward,
            self.found + other.found,
            self.rejected_cost + other.rejected_cost,
            self.noise_cost + other.noise_cost,
            self.step_cost + other.step_cost,
            self.steps + other.steps,
        )

    def __sub__(self, other: Outcome) -> Outcome:
        return Outcome(
            self.reward - other.reward,
            self.found - other.found,
            self.rejected_cost - other.rejected_cost,
            self.noise_cost - other.noise_cost,
            self.step_cost - other.step_cost,
            self.steps - other.steps,
        )


ZERO = Outcome(0.0, 0.0, 0.0, 0.0, 0.0, 0)


def outcome_of(execution: Execution, case: ReplayCase, config: ReplayRewardConfig) -> Outcome:
    parts = reward_breakdown(execution, case, config)
    return Outcome(
        reward=parts.total,
        found=parts.accepted,
        rejected_cost=config.rejected_weight * parts.rejected,
        noise_cost=config.unlabeled_cost * parts.unlabeled,
        step_cost=config.step_cost * parts.steps,
        steps=parts.steps,
    )


@dataclass
class CaseTable:
    """One merge request's visit values: what each (reviewer, file) visit earns alone."""

    case: ReplayCase
    budget: int
    required: str | None  # the reviewer every valid plan names first (security on a code change)
    readable: dict[str, list[str]]  # reviewer → files it can visit, in diff order
    values: dict[Visit, Outcome]  # each visit's value over the floor
    files: dict[str, FileChange]
    floor: Outcome = ZERO  # what every plan posts (agent.plan_posting's floor): the empty plan's outcome

    def total(self, visits: Sequence[Visit]) -> Outcome:
        out = self.floor
        for v in visits:
            out = out + self.values[v]
        return out


def case_table(env: ReplayEnv, case: ReplayCase, config: ReplayRewardConfig) -> CaseTable:
    files = env.files(case)
    repo = case.repo_config()
    required = next(iter(mandatory_reviewers(files, repo)), None)
    readable: dict[str, list[str]] = {str(r): env.readable(case, r) for r in repo.reviewers}
    floor = outcome_of(env.execute_visits(case, []), case, config)
    values: dict[Visit, Outcome] = {
        (r, p): outcome_of(env.execute_visits(case, [(r, p)]), case, config) - floor
        for r, paths in readable.items()
        for p in paths
    }
    budget = case.budget or sum(len(p) for p in readable.values())
    return CaseTable(case, budget, required, readable, values, {f.path: f for f in files}, floor)


def _mandatory_counts(table: CaseTable) -> range:
    if table.required is None or not table.readable.get(table.required):
        return range(0, 1)
    return range(1, min(table.budget, len(table.readable[table.required])) + 1)


def oracle_visits(table: CaseTable) -> list[Visit]:
    """The best valid plan's visits under additivity (see the module docstring)."""
    best: tuple[float, list[Visit]] | None = None
    others = [r for r in table.readable if r != table.required]
    for k in _mandatory_counts(table):
        first: list[Visit] = []
        if table.required is not None and k:
            ranked = sorted(
                table.readable[table.required], key=lambda p: -table.values[(table.required or "", p)].reward
            )
            first = [(table.required, p) for p in ranked[:k]]
        rest = table.budget - k
        second: list[Visit] = []
        for r in others if rest > 0 else []:
            gains = sorted(
                ((table.values[(r, p)].reward, p) for p in table.readable[r] if table.values[(r, p)].reward > 0),
                reverse=True,
            )[:rest]
            candidate = [(r, p) for _, p in gains]
            if table.total(candidate).reward > table.total(second).reward:
                second = candidate
        # without a mandatory reviewer a plan is one reviewer (or none): `second` alone is that plan
        visits = first + second
        value = table.total(visits).reward
        if best is None or value > best[0]:
            best = (value, visits)
    return best[1] if best is not None else []


def random_visits(table: CaseTable, rng: random.Random) -> list[Visit]:
    """One uniformly drawn valid decisions-only plan (see the module docstring)."""
    k = rng.choice(list(_mandatory_counts(table)))
    visits: list[Visit] = []
    if table.required is not None and k:
        visits = [(table.required, p) for p in rng.sample(table.readable[table.required], k)]
    choices: list[str | None] = [None, *(r for r in table.readable if r != table.required and table.readable[r])]
    second = rng.choice(choices)
    rest = table.budget - k
    if second is not None and rest > 0:
        m = rng.randint(1, min(rest, len(table.readable[second])))
        visits += [(second, p) for p in rng.sample(table.readable[second], m)]
    return visits


@dataclass(frozen=True)
class FixedRule:
    """An MR-independent plan rule: files in one order, the mandatory reviewer's share, a second reviewer."""

    order: str
    security_share: float
    second: str | None

    @property
    def name(self) -> str:
        return f"{self.order} order, {self.security_share:.0%} to the first reviewer, then {self.second or 'nothing'}"

    def visits(self, table: CaseTable) -> list[Visit]:
        files = table.files

        def ranked(paths: list[str]) -> list[str]:
            if self.order == "largest":
                return sorted(paths, key=lambda p: -files[p].additions)
            if self.order == "risk":
                return sorted(paths, key=lambda p: (-len(change_signals(files[p])), -files[p].additions))
            return list(paths)

        counts = list(_mandatory_counts(table))
        k = min(max(counts[0], math.ceil(self.security_share * table.budget)), counts[-1])
        visits: list[Visit] = []
        if table.required is not None and k:
            visits = [(table.required, p) for p in ranked(table.readable[table.required])[:k]]
        rest = table.budget - k
        if self.second is not None and rest > 0 and self.second in table.readable:
            visits += [(self.second, p) for p in ranked(table.readable[self.second])[:rest]]
        return visits


def fixed_rules(reviewers: Sequence[str]) -> list[FixedRule]:
    seconds: list[str | None] = [None, *(r for r in reviewers if r != "security")]
    return [FixedRule(o, s, r) for o in FILE_ORDERS for s in SECURITY_SHARES for r in seconds if s < 1.0 or r is None]


# --- the report --------------------------------------------------------------------------------------


@dataclass
class MRRow:
    """One merge request's references (exact executions for rule and oracle; sums for the rest)."""

    case_id: str
    split: str
    team: str | None
    rule: Outcome
    random: Outcome  # the mean over the random plans
    oracle: Outcome
    fixed: dict[str, Outcome]
    additivity_error: float  # |Σ visit values − exact reward| of the oracle plan

    def as_dict(self, *, fixed: Sequence[str] | None = None) -> dict[str, object]:
        """As JSON; `fixed` limits the fixed rules kept (the file stays small with the chosen one only)."""
        kept = self.fixed if fixed is None else {k: self.fixed[k] for k in fixed}
        return {
            "case_id": self.case_id, "split": self.split, "team": self.team,
            "rule": asdict(self.rule), "random": asdict(self.random), "oracle": asdict(self.oracle),
            "fixed": {k: asdict(v) for k, v in kept.items()}, "additivity_error": self.additivity_error,
        }  # fmt: skip


def _mean_outcome(outcomes: Sequence[Outcome]) -> Outcome:
    n = len(outcomes)
    total = ZERO
    for o in outcomes:
        total = total + o
    return Outcome(total.reward / n, total.found / n, total.rejected_cost / n, total.noise_cost / n,
                   total.step_cost / n, round(total.steps / n))  # fmt: skip


def mr_row(env: ReplayEnv, case: ReplayCase, config: ReplayRewardConfig, *, random_plans: int, seed: int) -> MRRow:
    table = case_table(env, case, config)
    rule_z = rule_based_strategy(env.files(case), case.repo_config(), case.history)
    rule = outcome_of(env.execute(case, rule_z), case, config)
    best = oracle_visits(table)
    oracle = outcome_of(env.execute_visits(case, best), case, config)
    rng = random.Random(f"{seed}:{case.case_id}")
    randoms = _mean_outcome([table.total(random_visits(table, rng)) for _ in range(random_plans)])
    rules = fixed_rules(case.repo_config().reviewers)
    fixed = {r.name: table.total(r.visits(table)) for r in rules}
    return MRRow(case.case_id, case.split or "", case.team, rule, randoms, oracle, fixed,
                 abs(table.total(best).reward - oracle.reward))  # fmt: skip


def rows_for(
    env: ReplayEnv,
    cases: Sequence[ReplayCase],
    config: ReplayRewardConfig,
    *,
    random_plans: int = 32,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> list[MRRow]:
    rows = []
    for i, case in enumerate(cases):
        rows.append(mr_row(env, case, config, random_plans=random_plans, seed=seed))
        if progress is not None:
            progress(i + 1, len(cases))
    return rows


def best_fixed_rule(rows: Sequence[MRRow]) -> str:
    """The fixed rule with the best mean reward over `rows` (the training split); ties by name."""
    names = sorted(rows[0].fixed)
    return max(names, key=lambda n: (sum(r.fixed[n].reward for r in rows) / len(rows), n))


REFERENCES = ("rule", "random", "oracle", "best_fixed")


def reference(row: MRRow, name: str, fixed: str) -> Outcome:
    return row.fixed[fixed] if name == "best_fixed" else getattr(row, name)  # type: ignore[no-any-return]


# z(0.975) + z(0.8): a paired two-sided test at α = 0.05 with 80 % power.
_Z_SUM = 1.959964 + 0.841621


def _power(diffs: Sequence[float]) -> dict[str, float]:
    """With the per-MR sd of oracle − rule as the stand-in for a stage's paired sd: the smallest mean
    difference a paired test on these MRs detects, and the MRs needed to detect 0.3 × the gap."""
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else 0.0
    target = 0.3 * mean
    needed = math.ceil((_Z_SUM * sd / target) ** 2) if target > 0 else float("inf")
    return {"paired_sd": sd, "detectable_difference": _Z_SUM * sd / math.sqrt(n), "mrs_for_0_3_gap": needed}


def summarise(rows: Sequence[MRRow], *, gap_threshold: float = 0.05, seed: int = 0) -> dict[str, object]:
    """Per split: each reference's mean reward and parts, oracle − rule paired (bootstrap interval,
    sign-flip p), the share of MRs whose oracle − rule gap exceeds `gap_threshold`, and how the gap
    splits into found value, rejected posts, noise and steps. The best fixed rule is chosen on train."""
    from learning.paired_stats import paired_difference

    train = [r for r in rows if r.split == "train"]
    fixed = best_fixed_rule(train or list(rows))
    out: dict[str, object] = {"best_fixed_rule": fixed, "gap_threshold": gap_threshold, "splits": {}}
    splits: dict[str, object] = {}
    for split in ("train", "eval"):
        part = [r for r in rows if r.split == split]
        if not part:
            continue
        means = {}
        for name in REFERENCES:
            values = [reference(r, name, fixed) for r in part]
            means[name] = {k: sum(getattr(v, k) for v in values) / len(values) for k in
                           ("reward", "found", "rejected_cost", "noise_cost", "step_cost", "steps")}  # fmt: skip
        gap = paired_difference([r.oracle.reward for r in part], [r.rule.reward for r in part], seed=seed)
        fixed_gap = paired_difference([r.oracle.reward for r in part], [r.fixed[fixed].reward for r in part], seed=seed)
        splits[split] = {
            "mrs": len(part),
            "teams": len({r.team for r in part}),
            "means": means,
            "oracle_minus_rule": gap.as_dict(),
            "oracle_minus_best_fixed": fixed_gap.as_dict(),
            "share_gap_over_threshold": sum(1 for r in part if r.oracle.reward - r.rule.reward > gap_threshold)
            / len(part),
            "gap_parts": {
                "found": means["oracle"]["found"] - means["rule"]["found"],
                "fewer_rejected": means["rule"]["rejected_cost"] - means["oracle"]["rejected_cost"],
                "less_noise": means["rule"]["noise_cost"] - means["oracle"]["noise_cost"],
                "fewer_steps": means["rule"]["step_cost"] - means["oracle"]["step_cost"],
            },
            "max_additivity_error": max(r.additivity_error for r in part),
            "power": _power([r.oracle.reward - r.rule.reward for r in part]),
        }
    out["splits"] = splits
    return out


# --- training data from the table: SFT on the oracle plan, DPO oracle vs. worst -----------------------


def strategy_of(visits: Sequence[Visit], *, change_type: str) -> Strategy:
    """The decisions-only strategy whose execution is exactly `visits` (one item per reviewer, focus
    paths in visit order, a step budget of as many files): what a model is trained to write."""
    plan: list[PlanItem] = []
    for reviewer in dict.fromkeys(r for r, _ in visits):
        paths = [p for r, p in visits if r == reviewer]
        plan.append(PlanItem(reviewer=reviewer, focus_paths=paths, step_budget=len(paths)))  # type: ignore[arg-type]
    return Strategy(change_type=change_type, plan=plan)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PlanExample:
    """One training MR's prompt, its oracle plan and its worst plan seen (with their rewards)."""

    case_id: str
    s1: str
    best: Strategy
    best_reward: float
    worst: Strategy
    worst_reward: float


def plan_examples(
    env: ReplayEnv, cases: Sequence[ReplayCase], config: ReplayRewardConfig, *, random_plans: int = 32, seed: int = 0
) -> list[PlanExample]:
    """SFT targets (the oracle plan) and DPO pairs (oracle vs. the worst of the random and fixed-rule
    plans) for each case, prompted with the one renderer (`ReplayEnv.reset`). Cases where the two
    earn the same carry no preference and are left out."""
    out = []
    for case in cases:
        table = case_table(env, case, config)
        change_type = rule_based_strategy(env.files(case), case.repo_config(), case.history).change_type
        best = oracle_visits(table)
        rng = random.Random(f"{seed}:{case.case_id}")
        candidates = [random_visits(table, rng) for _ in range(random_plans)]
        candidates += [r.visits(table) for r in fixed_rules(case.repo_config().reviewers)]
        worst = min(candidates, key=lambda v: (table.total(v).reward, len(v)))
        best_reward, worst_reward = table.total(best).reward, table.total(worst).reward
        if best_reward > worst_reward:
            out.append(
                PlanExample(
                    case.case_id,
                    env.reset(case),
                    strategy_of(best, change_type=change_type),
                    best_reward,
                    strategy_of(worst, change_type=change_type),
                    worst_reward,
                )  # fmt: skip
            )
    return out
