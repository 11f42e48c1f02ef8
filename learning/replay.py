"""The replay environment: past merge requests, replayed under a new strategy, scored by what people said.

A `ReplayCase` is one merge request's snapshot (title, description, diff, files at head) and the
findings people labeled on it (accepted or rejected, with severity). `ReplayEnv.reset(case)` gives the
state s1 the strategy model sees — rendered by the one strategy-prompt renderer serving uses
(`agent.strategy_prompt`) — and `ReplayEnv.execute(case, z)` executes z against the snapshot (a
`SnapshotWorkspace`: nothing is fetched, nothing under review is executed), then the deterministic
verifier. What an execution earns is `learning.replay_reward`.

The execution model (what a plan is worth here), made explicit because production changed under it:
since issue 21 serving runs every enabled reviewer's analyzers on every changed file whatever the
plan says, and the plan decides only where the *model's* steps go. A plan's value is therefore what
its model steps examine. The fixed executor (`llm=None`) models exactly that and nothing else:

- An execution of a plan is a sequence of **visits**, one (reviewer, file) item per step: each plan
  item visits its targets (`reviewers.loop.plan_targets`: its focus paths in order, or every file the
  reviewer reads in diff order) while its own step budget, the env's `step_budget_cap` and the case's
  shared `review_budget` (first come, first served across items) last. Each visit costs one step.
- A visit yields what that reviewer's analyzers find on that file: the analyzer stands in for what a
  model-driven reviewer finds when it examines the file. Train = serve (issue 41): production posts
  exactly what `agent.plan_posting.split_by_plan` says for the plan — the visited items' findings and
  a floor no plan lowers (critical findings, the project's own rules, removed guards) — and lists the
  rest in the summary, where they earn nothing. Findings on files no plan item visits are therefore
  not credited to the plan, except the floor, which is the same for every plan of a merge request.
  What the strategy controls — which files get a reviewer's attention, which reviewers it spends
  steps on (a reviewer whose kind of finding the team rejects costs when it is sent to look), and
  how many steps — decides the rest of the reward.
- The reward is then additive over visits on top of the floor (`visit_table` gives each (reviewer,
  file) item's findings), which is what lets the headroom bench enumerate every valid plan of a
  merge request from one analyzer run per reviewer (cached here per case).

A model executor (`llm` given) is production's review: every analyzer on every file, the model's
steps bounded by the plan; its findings are all credited and its charged steps are the model's.

RL (learning/strata) and the evaluation gate (learning/gate) both read this one environment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.diff import DiffIndex, parse_unified_diff
from agent.evaluation import ExpectedFinding
from agent.plan_posting import plan_visits, split_by_plan
from agent.repo_config import parse_repo_config
from agent.strategy import Strategy, constrain_strategy
from agent.verifier import VerifiedFinding, VerifierInputs, below_min_severity, verify_findings
from agent.workspaces.snapshot import SnapshotWorkspace
from learning.episodes import s1_for_snapshot
from reviewers import render_review_prefix, run_reviewer
from reviewers.kernel.contracts import (
    Category,
    FileChange,
    Finding,
    LLMPort,
    PlanItem,
    RepoConfig,
    ReviewContext,
    ReviewerResult,
    Severity,
    Step,
)
from reviewers.kernel.errors import ConfigError, TrainingError

ReplaySplit = Literal["train", "eval"]
# make-env's output format: 2 added teams' votes, the review budget in s1, false-alarm decoys and
# defects out of test paths (issue 24). A file an older make-env wrote is refused, not half-read.
ENVGEN_VERSION = 2
LabeledAs = Literal["accepted", "rejected"]

# --- cases -----------------------------------------------------------------------------------------


class ReplayFinding(BaseModel):
    """A finding people judged on this merge request."""

    model_config = ConfigDict(extra="ignore")
    path: str
    line: int = Field(ge=1)
    category: Category
    severity: Severity
    label: LabeledAs
    fingerprint: str = ""
    kind: str = ""  # what was planted here, for synthesised cases (learning/envgen): "sql-injection", "decoy:…"


class ReplayCase(BaseModel):
    """One merge request to replay: the snapshot a review saw and the labels its findings earned."""

    model_config = ConfigDict(extra="ignore")
    case_id: str
    title: str = ""
    description: str = ""
    diff: str
    files: dict[str, str] = Field(default_factory=dict)  # path → text at head
    config_text: str | None = None
    s1: str | None = None  # the exact s1 the model saw, when the snapshot kept it
    findings: list[ReplayFinding] = Field(default_factory=list)
    split: ReplaySplit | None = None
    package: str | None = None  # the source package of a synthesised case: the unit of its train/eval split
    review_budget: int | None = Field(
        default=None, ge=1, description="reviewer steps for the whole review (one file per step); None: no limit"
    )
    # The project's (team's) feedback history at the time, as serving shows it in s1.
    history: dict[str, float] = Field(default_factory=dict)  # path → accepted share
    rule_votes: dict[str, tuple[int, int]] = Field(default_factory=dict)  # kind → (people up, people down)
    team: str | None = None  # the team profile a synthesised case was drawn with
    envgen_version: int | None = None  # the make-env version that wrote a synthesised case

    def snapshot(self) -> dict[str, Any]:
        """The snapshot mapping the dataset builder renders prompts from."""
        return {
            "title": self.title,
            "description": self.description,
            "diff": self.diff,
            "files": self.files,
            "config_text": self.config_text,
            "s1": self.s1,
            "history": self.history,
            "rule_votes": self.rule_votes,
            "review_budget": self.budget,
        }

    def repo_config(self) -> RepoConfig:
        return parse_repo_config(self.config_text) if self.config_text else RepoConfig()

    @property
    def budget(self) -> int | None:
        """The review budget s1 shows and the plan's steps spend: the case's own (a synthesised case's),
        else its repository config's `review_budget`, as serving reads it."""
        return self.review_budget if self.review_budget is not None else self.repo_config().review_budget


def case_from_dataset_row(row: Mapping[str, Any], *, split: ReplaySplit | None = None) -> ReplayCase:
    """A case from a row of the `replay` dataset (learning/datasets.py): files are a JSON object there."""
    files = row.get("files") or "{}"
    try:
        files_map = json.loads(files) if isinstance(files, str) else dict(files)
    except ValueError as exc:
        raise TrainingError(f"replay row {row.get('review_id')}: files is not a JSON object") from exc
    try:
        return ReplayCase(
            case_id=str(row.get("review_id") if row.get("review_id") is not None else row.get("case_id")),
            title=str(row.get("title") or ""),
            description=str(row.get("description") or ""),
            diff=str(row.get("diff") or ""),
            files=files_map,
            config_text=row.get("config_text"),
            s1=row.get("s1") or None,  # rows built before the column existed re-render s1
            findings=[f for f in row.get("findings") or [] if f.get("label") in ("accepted", "rejected")],
            split=split,
        )
    except ValidationError as exc:
        raise TrainingError(f"replay row {row.get('review_id')} is malformed: {_first_error(exc)}") from exc


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc']) or '(root)'}: {first['msg']}"


def read_jsonl_cases(path: Path) -> list[ReplayCase]:
    """Cases from a JSONL file, one `ReplayCase` object per line; a bad line is one clear error."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TrainingError(f"cannot read replay cases from {path}: {exc.strerror or exc}") from exc
    cases = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            case = ReplayCase.model_validate_json(line)
        except ValidationError as exc:
            raise TrainingError(f"{path}:{number}: not a replay case: {_first_error(exc)}") from exc
        if case.package is not None and case.envgen_version != ENVGEN_VERSION:
            raise TrainingError(
                f"{path}:{number}: written by an older make-env (version {case.envgen_version or 1}, this is "
                f"{ENVGEN_VERSION}); rebuild it with `reviewloop dev make-env`"
            )
        cases.append(case)
    return cases


def write_jsonl_cases(path: Path, cases: Sequence[ReplayCase]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(c.model_dump_json() + "\n" for c in cases), encoding="utf-8")
    return path


def load_replay_cases(source: Path, *, split: ReplaySplit | Literal["all"] = "all") -> list[ReplayCase]:
    """Cases from a dataset directory (its `replay` kind) or a JSONL file, limited to one split.

    A JSONL case without a `split` belongs to every split. An empty result is an error: training or
    gating on nothing would report numbers about nothing.
    """
    source = Path(source)
    if source.is_dir():
        from learning.datasets import load_dataset

        dd = load_dataset(source, "replay")
        wanted: tuple[ReplaySplit, ...] = ("train", "eval") if split == "all" else (split,)
        cases = [case_from_dataset_row(row, split=s) for s in wanted for row in dd[s]]
    elif source.is_file():
        cases = [c for c in read_jsonl_cases(source) if split == "all" or c.split in (None, split)]
    else:
        raise TrainingError(f"replay source {source} does not exist (a dataset directory or a JSONL file)")
    if not cases:
        raise TrainingError(f"replay source {source} has no cases in the {split} split")
    return cases


# --- executions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayEnvConfig:
    """How strategies are executed on replayed merge requests."""

    step_budget_cap: int | None = field(
        default=None,
        metadata={
            "help": "cap on every planned reviewer's step budget (None: the strategy's own budget). A cap "
            "models limited review capacity: the strategy must put the right files first."
        },
    )
    verify: bool = field(default=True, metadata={"help": "run the deterministic verifier before scoring"})

    def __post_init__(self) -> None:
        if self.step_budget_cap is not None and self.step_budget_cap < 1:
            raise ConfigError(f"step_budget_cap must be at least 1, got {self.step_budget_cap}")


@dataclass(frozen=True)
class Execution:
    """What running one strategy on one case produced."""

    strategy: Strategy  # as executed: constrained to the change and capped
    results: tuple[ReviewerResult, ...]
    verified: tuple[VerifiedFinding, ...]
    # Reviewers serving's safety net added because z left them out (security on a code change).
    added_by_safety_net: tuple[str, ...] = ()
    # The (reviewer, file) items the plan's steps examined, in order (the fixed executor's visits).
    visits: tuple[tuple[str, str], ...] = ()
    charged: int | None = None  # steps the plan is charged for (None: every step of the results)

    @property
    def findings(self) -> list[Finding]:
        """The findings the review would post: verified REAL."""
        return [v.finding for v in self.verified if v.verdict == "REAL"]

    @property
    def steps(self) -> list[Step]:
        return [s for r in self.results for s in r.steps]

    @property
    def n_steps(self) -> int:
        """Steps the plan is charged for: one per visit (fixed executor), the model's steps (model)."""
        return self.charged if self.charged is not None else sum(len(r.steps) for r in self.results)


@dataclass
class _Prepared:
    files: list[FileChange]
    context: ReviewContext
    diff_index: DiffIndex
    s1: str
    # Each reviewer's analyzer-only run over every file it reads: the visits' findings come from here.
    static: dict[str, ReviewerResult] = field(default_factory=dict)


class ReplayEnv:
    """Replays cases under strategies. Parsed diffs and contexts are kept per case id."""

    def __init__(self, config: ReplayEnvConfig | None = None) -> None:
        self.config = config or ReplayEnvConfig()
        self._prepared: dict[str, _Prepared] = {}

    def _prepare(self, case: ReplayCase) -> _Prepared:
        ready = self._prepared.get(case.case_id)
        if ready is None:
            files = parse_unified_diff(case.diff)
            if not files:
                raise TrainingError(f"replay case {case.case_id} has an empty diff")
            context = ReviewContext(
                title=case.title,
                description=case.description,
                files=files,
                workspace=SnapshotWorkspace(case.files) if case.files else SnapshotWorkspace.from_changes(files),
                config=case.repo_config(),
            )
            ready = _Prepared(files, context, DiffIndex(files), s1_for_snapshot(case.snapshot()))
            self._prepared[case.case_id] = ready
        return ready

    def reset(self, case: ReplayCase) -> str:
        """s1 for the case: what the strategy model is conditioned on."""
        return self._prepare(case).s1

    def files(self, case: ReplayCase) -> list[FileChange]:
        return self._prepare(case).files

    def static_result(self, case: ReplayCase, reviewer: str) -> ReviewerResult:
        """The reviewer's analyzers over every changed file it reads (deterministic; run once per case)."""
        ready = self._prepare(case)
        result = ready.static.get(reviewer)
        if result is None:
            result = run_reviewer(reviewer, ready.context, PlanItem(reviewer=reviewer), None)  # type: ignore[arg-type]
            ready.static[reviewer] = result
        return result

    def visit_table(self, case: ReplayCase, reviewer: str) -> dict[str, list[Finding]]:
        """Each file the reviewer reads → what one visit of it finds (before min-severity and verifier)."""
        result = self.static_result(case, reviewer)
        table: dict[str, list[Finding]] = {s.paths[0]: [] for s in result.steps if s.paths}
        for f in result.findings:
            table.setdefault(f.path, []).append(f)
        return table

    def execute(self, case: ReplayCase, z: Strategy, *, llm: LLMPort | None = None) -> Execution:
        """Execute z on the snapshot (`llm=None`: visits scored by the analyzers; see the module
        docstring), then verify."""
        ready = self._prepare(case)
        context = ready.context
        written = {p.reviewer for p in z.plan}
        z = constrain_strategy(z, ready.files, context.config)
        added = tuple(p.reviewer for p in z.plan if p.reviewer not in written)
        cap = self.config.step_budget_cap
        if cap is not None:
            z = z.model_copy(
                update={"plan": [p.model_copy(update={"step_budget": min(p.step_budget, cap)}) for p in z.plan]}
            )
        if llm is None:
            execution = self.execute_visits(case, self.plan_visits(case, z))
            return Execution(
                strategy=z,
                results=execution.results,
                verified=execution.verified,
                added_by_safety_net=added,
                visits=execution.visits,
                charged=execution.charged,
            )
        results = self._run_plan(case, z, context, llm, render_review_prefix(context))
        charged = sum(1 for r in results for s in r.steps if s.tool != "run_analyzer")
        return self._verified(case, z, results, added=added, visits=(), charged=charged)

    def _verified(
        self,
        case: ReplayCase,
        z: Strategy,
        results: tuple[ReviewerResult, ...],
        *,
        added: tuple[str, ...],
        visits: tuple[tuple[str, str], ...],
        charged: int,
    ) -> Execution:
        ready = self._prepare(case)
        context = ready.context
        found = [f for r in results for f in r.findings if not below_min_severity(f, context.config.min_severity)]
        if self.config.verify:
            # No held-out track record here: it is a prior about real projects a rule meets for the first
            # time, while a replayed team's taste is the environment's own ground truth (its votes).
            # Nor posting tiers, for the same reason: the team's votes decide what it wants to see.
            inputs = VerifierInputs(
                workspace=context.workspace, diff_index=ready.diff_index, track_record={}, posting="all"
            )
            verified = verify_findings(found, inputs)
        else:
            verified = [VerifiedFinding(f, "REAL", "verifier off") for f in found]
        return Execution(
            strategy=z,
            results=results,
            verified=tuple(verified),
            added_by_safety_net=added,
            visits=visits,
            charged=charged,
        )

    def readable(self, case: ReplayCase, reviewer: str) -> list[str]:
        """The changed files the reviewer reads in full, in diff order: what its steps can visit."""
        return [s.paths[0] for s in self.static_result(case, reviewer).steps if s.paths]

    def plan_visits(self, case: ReplayCase, z: Strategy) -> tuple[tuple[str, str], ...]:
        """The (reviewer, file) items z's steps visit, in order, under the item budgets and the case's
        shared `review_budget` (first come, first served): `agent.plan_posting.plan_visits`, as serving
        computes them."""
        readable: dict[str, list[str]] = {item.reviewer: self.readable(case, item.reviewer) for item in z.plan}
        return plan_visits(z, readable, review_budget=case.budget)

    def execute_visits(self, case: ReplayCase, visits: Sequence[tuple[str, str]]) -> Execution:
        """The fixed executor on explicit visits (each a step): what serving posts under that plan
        (`agent.plan_posting.split_by_plan`: the visited (reviewer, file) items' findings, plus the floor
        no plan lowers, found by any reviewer on any file), then the verifier. Each visited reviewer's
        steps are its visited files'. The strategy recorded is the visits as a plan (one item per
        reviewer, focus paths in visit order)."""
        order = list(dict.fromkeys(r for r, _ in visits))
        everyone = list(dict.fromkeys([*order, *case.repo_config().reviewers]))
        found = [f for reviewer in everyone for f in self.static_result(case, reviewer).findings]
        posted = split_by_plan(found, visits).posted
        results: list[ReviewerResult] = []
        plan: list[PlanItem] = []
        for reviewer in everyone:
            seen = [p for r, p in visits if r == reviewer]
            mine = [f for f in posted if f.reviewer == reviewer]
            if not seen and not mine:
                continue
            static = self.static_result(case, reviewer)
            results.append(
                static.model_copy(
                    update={"findings": mine, "steps": [s for s in static.steps if s.paths and s.paths[0] in seen]}
                )
            )
            if seen:
                plan.append(PlanItem(reviewer=reviewer, focus_paths=seen, step_budget=len(seen)))  # type: ignore[arg-type]
        z = Strategy(change_type="mixed", plan=plan)
        return self._verified(case, z, tuple(results), added=(), visits=tuple(visits), charged=len(visits))

    def _run_plan(
        self, case: ReplayCase, z: Strategy, context: ReviewContext, llm: LLMPort, prefix: str
    ) -> tuple[ReviewerResult, ...]:
        """Production's review with a model: every analyzer on every file; the case's `review_budget`
        is shared by the reviewers' model steps, first come first served."""
        left = case.budget
        results: list[ReviewerResult] = []
        for item in z.plan:
            budget = item.step_budget if left is None else min(item.step_budget, left)
            result = run_reviewer(
                item.reviewer, context, item, llm, shared_prefix=prefix, model_step_budget=budget if budget > 0 else 0
            )
            results.append(result)
            if left is not None:
                left -= sum(1 for s in result.steps if s.tool != "run_analyzer")
        return tuple(results)


def accepted_expected(case: ReplayCase) -> list[ExpectedFinding]:
    """The accepted findings as the evaluation's expected items (what recall is measured against)."""
    return [
        ExpectedFinding(path=f.path, line=f.line, category=f.category, severity=f.severity)
        for f in case.findings
        if f.label == "accepted"
    ]
