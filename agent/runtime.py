"""The review's ports in one value: the store, the model, loaders, workspaces, the publisher, the
reviewers and the strategy model. `agent.pipeline.run_review` runs the graph over a `Runtime`; the
worker, the CLI, benchmarks and tests each build one with the parts they have."""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from psycopg_pool import ConnectionPool

from agent.context import ReviewRequest, Snapshot, build_context
from agent.diff import DiffIndex, parse_unified_diff
from agent.gitrepo import open_repository
from agent.graph import ReviewState
from agent.loaders import load_diff, load_local, load_replay
from agent.store import rejections as store_rejections
from agent.store import reviews as store_reviews
from agent.store import snapshots as store_snapshots
from agent.store import suppressions as store_suppressions
from agent.strategy import Strategy, StrategySource
from agent.strategy_model import StrategyModel, StrategyModelSource
from agent.verdicts.feedback import PeopleVotes
from agent.verdicts.posting import Posting
from agent.verifier import VerifiedFinding, VerifierInputs
from agent.workspaces.diff import DiffWorkspace
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers import run_reviewer
from reviewers.kernel.contracts import (
    FileChange,
    LLMPort,
    PlanItem,
    ReviewContext,
    ReviewerName,
    ReviewerResult,
    Workspace,
)
from reviewers.kernel.errors import InputError
from reviewers.loop import AnalyzerPass
from reviewers.registry import run_analyzers

if TYPE_CHECKING:
    from agent.embeddings import Embedder  # numpy: loaded only where a model's strategies are embedded

log = logging.getLogger(__name__)


SnapshotLoaderFn = Callable[[ReviewRequest], tuple[Snapshot, Workspace, list[FileChange]]]
Publisher = Callable[[ReviewState, Sequence[VerifiedFinding], Mapping[str, int], "Runtime"], dict[str, Any]]


def verdict_counts(verified: Sequence[VerifiedFinding]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in verified:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    return counts


class Runtime:
    """The graph's ports over a store, an optional model, and an optional publisher."""

    def __init__(
        self,
        *,
        pool: ConnectionPool | None,
        llm: LLMPort | None,
        loaders: Mapping[str, SnapshotLoaderFn] | None = None,
        workspace_for: Callable[[ReviewRequest, Snapshot], Workspace] | None = None,
        publisher: Publisher | None = None,
        reviewer_fn: Callable[..., ReviewerResult] = run_reviewer,
        model_version_id: int | None = None,
        strategy_model: StrategyModelSource | None = None,
        shadow_strategies: int = 0,
        embedder: Embedder | None = None,
        review_deadline_s: float | None = None,
        hold_by_track_record: bool = True,
        posting: Posting = "proven",
    ) -> None:
        """`review_deadline_s`: reviewers take no step after this many seconds from the review's start
        (Settings.review_deadline_s); the files they did not reach are named in `not_reviewed`.
        `hold_by_track_record`: Settings.hold_by_track_record (`agent.verdicts.track_record`).
        `posting`: Settings.posting (`agent.verdicts.posting`)."""
        self.pool = pool
        self.review_deadline_s = review_deadline_s
        self.hold_by_track_record = hold_by_track_record
        self.posting: Posting = posting
        self._llm = llm
        # Strategy and finding-text embeddings for agreement; None: character n-grams for strategies,
        # word overlap for findings (no model to load).
        self._embedder = embedder
        self.strategy_model = strategy_model
        self.shadow_strategies = shadow_strategies
        self.loaders: dict[str, SnapshotLoaderFn] = {
            "local": load_local,
            "diff": load_diff,
            "demo": load_local,
            "replay": load_replay,
            "eval": load_replay,
            **(loaders or {}),
        }
        self._workspace_for = workspace_for
        self.publisher = publisher
        self.reviewer_fn = reviewer_fn
        # a reviewer function written before analyzer passes (a test's, a bench's) runs its own
        self._reviewer_takes_prior = "prior" in inspect.signature(reviewer_fn).parameters
        self.model_version_id = model_version_id
        self._contexts: dict[int, tuple[ReviewContext, DiffIndex]] = {}
        self._workspaces: dict[int, Workspace] = {}
        self._lock = threading.Lock()

    @property
    def llm(self) -> LLMPort | None:
        return self._llm

    @property
    def embedder(self) -> Embedder | None:
        return self._embedder

    def strategy_llm(self) -> StrategyModel:
        """The model that writes z now, its registry version (the promoted one, if any) and how it is asked."""
        if self.strategy_model is None:
            name = self._llm.model_name if self._llm is not None else "rules"
            return StrategyModel(self._llm, self.model_version_id, name)
        return self.strategy_model.current()

    # --- context -------------------------------------------------------------------------------

    def load_snapshot(self, state: ReviewState) -> dict[str, Any]:
        request = ReviewRequest.model_validate(state["request"])
        loader = self.loaders.get(request.source)
        if loader is None:
            raise InputError(f"no loader for source {request.source!r}")
        snapshot, workspace, files = loader(request)
        review_id = state["review_id"]
        with self._lock:
            self._workspaces[review_id] = workspace
        if self.pool is not None:
            store_snapshots.set_snapshot(
                self.pool,
                review_id,
                snapshot=snapshot.model_dump(mode="json"),
                base_sha=snapshot.base_sha,
                start_sha=snapshot.start_sha,
                head_sha=snapshot.head_sha,
            )
        return snapshot.model_dump(mode="json")

    def _rebuild_workspace(self, request: ReviewRequest, snapshot: Snapshot) -> Workspace:
        """A workspace for a resumed run (the one the loader made lived in another process)."""
        if self._workspace_for is not None:
            return self._workspace_for(request, snapshot)
        if request.source in ("local", "demo") and request.repo_path and snapshot.head_sha:
            return open_repository(request.repo_path).workspace(snapshot.head_sha)
        if snapshot.files:
            return SnapshotWorkspace(snapshot.files)
        return DiffWorkspace(parse_unified_diff(snapshot.diff))

    def context_and_index(
        self, review_id: int, request: Mapping[str, Any], snapshot: Mapping[str, Any]
    ) -> tuple[ReviewContext, DiffIndex]:
        with self._lock:
            cached = self._contexts.get(review_id)
        if cached is not None:
            return cached
        req = ReviewRequest.model_validate(request)
        snap = Snapshot.model_validate(snapshot)
        with self._lock:
            workspace = self._workspaces.get(review_id)
        if workspace is None:
            workspace = self._rebuild_workspace(req, snap)
        files = parse_unified_diff(snap.diff)
        context = build_context(snap, workspace=workspace, project=req.project or None, mr_iid=req.mr_iid, files=files)
        if self.review_deadline_s is not None:
            context.deadline = context.clock() + self.review_deadline_s
        built = (context, DiffIndex(files))
        with self._lock:
            self._contexts[review_id] = built
        return built

    def forget(self, review_id: int) -> None:
        """Drop what was cached for a finished run."""
        with self._lock:
            self._contexts.pop(review_id, None)
            self._workspaces.pop(review_id, None)

    def context(self, review_id: int, request: Mapping[str, Any], snapshot: Mapping[str, Any]) -> ReviewContext:
        return self.context_and_index(review_id, request, snapshot)[0]

    def history(self, context: ReviewContext) -> Mapping[str, float]:
        if self.pool is None or not context.project:
            return {}
        return store_snapshots.path_acceptance(
            self.pool, project=context.project, paths=[f.path for f in context.files]
        )

    def rule_votes(self, context: ReviewContext) -> Mapping[str, tuple[int, int]]:
        """The project's votes by kind of finding (`agent.finding_kinds`: the defect kind, else the rule
        id), (people up, people down): the strategy prompt's team history, keyed as the learning
        environment keys its teams' votes."""
        if self.pool is None or not context.project:
            return {}
        by_kind = store_rejections.people_by_kind(self.pool, project=context.project)
        return {kind: (up, down) for kind, (down, up) in by_kind.items()}

    # --- stages --------------------------------------------------------------------------------

    @property
    def stores_reviews(self) -> bool:
        """Whether the review is recorded (what the strategy model saw is kept with it for training)."""
        return self.pool is not None

    def save_strategy(
        self,
        review_id: int,
        strategy: Strategy,
        source: StrategySource,
        note: str | None,
        *,
        model_version_id: int | None = None,
        s1: str = "",
    ) -> None:
        if self.pool is not None:
            if s1:  # what the strategy model saw, so training prompts match serving prompts exactly
                store_snapshots.set_s1(self.pool, review_id, s1=s1)
            store_reviews.set_strategy(
                self.pool,
                review_id,
                strategy_json=strategy.model_dump(mode="json"),
                strategy_text=strategy.render(),
                strategy_source=source,
                model_version_id=model_version_id if source == "model" else None,
            )

    def start_deadline(self, context: ReviewContext) -> None:
        """Start a phase's own deadline (`review_deadline_s` from now): the analyzers' pass, then the
        model's strategy and steps. A model that takes all of its time leaves the analyzers theirs."""
        if self.review_deadline_s is not None:
            context.deadline = context.clock() + self.review_deadline_s

    def run_analyzers(self, name: ReviewerName, context: ReviewContext) -> AnalyzerPass:
        return run_analyzers(name, context)

    def run_reviewer(
        self,
        name: ReviewerName,
        context: ReviewContext,
        plan: PlanItem,
        *,
        shared_prefix: str,
        model_step_budget: int | None = None,
        prior: AnalyzerPass | None = None,
    ) -> ReviewerResult:
        kwargs: dict[str, Any] = {"shared_prefix": shared_prefix}
        if model_step_budget is not None:  # None: a single execution, the reviewer function's own default
            kwargs["model_step_budget"] = model_step_budget
        if prior is not None and self._reviewer_takes_prior:
            kwargs["prior"] = prior
        return self.reviewer_fn(name, context, plan, self._llm, **kwargs)

    def verifier_inputs(self, review_id: int, context: ReviewContext) -> VerifierInputs:
        with self._lock:
            index = self._contexts[review_id][1] if review_id in self._contexts else DiffIndex(context.files)
        inputs = VerifierInputs(
            workspace=context.workspace,
            diff_index=index,
            min_severity=context.config.min_severity,
            track_record=None if self.hold_by_track_record else {},
            posting=self.posting,
        )
        if self.pool is not None and context.project:
            inputs.rejected_fingerprints = store_rejections.rejected_fingerprints(
                self.pool, project=context.project, mr_iid=context.mr_iid
            )
            inputs.acceptance = store_rejections.standings(self.pool, project=context.project)
            by_rule, by_path = store_rejections.people_by_rule_and_path(self.pool, project=context.project)
            inputs.people_votes = PeopleVotes(
                by_rule=by_rule,
                by_path=by_path,
                suppressions=store_suppressions.suppressed_scopes(self.pool, project=context.project),
            )
            if context.mr_iid is not None:
                inputs.open_fingerprints = set(
                    store_reviews.posted_fingerprints(self.pool, project=context.project, mr_iid=context.mr_iid)
                )
        return inputs

    def report(self, state: ReviewState, verified: Sequence[VerifiedFinding]) -> dict[str, Any]:
        review_id = state["review_id"]
        ids: dict[str, int] = {}
        if self.pool is not None:
            ids = store_reviews.save_findings(
                self.pool, review_id, [(v.finding, v.verdict, v.reason) for v in verified]
            )
        report: dict[str, Any] = {"finding_ids": ids, "counts": verdict_counts(verified)}
        if self.publisher is not None:
            report.update(self.publisher(state, verified, ids, self))
        return report
