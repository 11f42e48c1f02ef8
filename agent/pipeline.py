"""Running a review end to end: the runtime behind the graph's ports, and the entry points.

`run_review` reviews any source (local range, diff, replay, GitLab MR) through the checkpointed
graph and returns the verified findings; the worker's job calls `review_gitlab_merge_request`
(agent/gitlab/review.py), which loads the merge request and runs it through `run_review`. A run
whose checkpoint shows unfinished nodes (a killed worker, a failed reviewer) is resumed rather than
started again, under the same review row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from opentelemetry import trace
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from agent.context import ReviewRequest, Snapshot, build_context
from agent.diff import DiffIndex, parse_unified_diff, render_diff_overview
from agent.embeddings import Embedder
from agent.gitrepo import open_repository
from agent.graph import ReviewState, build_review_graph
from agent.loaders import load_diff, load_local, load_replay
from agent.store import rejections as store_rejections
from agent.store import reviews as store_reviews
from agent.store import snapshots as store_snapshots
from agent.strategy import Strategy, StrategySource, render_s1
from agent.strategy_model import StrategyModelSource
from agent.verdicts.feedback import PeopleVotes
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
from reviewers.kernel.errors import InputError, StoreError

log = logging.getLogger(__name__)
tracer = trace.get_tracer("reviewloop.pipeline")
DIFF_OVERVIEW_LINES = 60


@dataclass
class ReviewOutcome:
    review_id: int
    verified: list[VerifiedFinding]
    strategy: Strategy
    strategy_source: str
    snapshot: Snapshot
    reviewer_results: list[ReviewerResult]  # under the strategy in service (the first execution)
    report: dict[str, Any] = field(default_factory=dict)
    # under the other strategies of an agreement run, with the index of their execution
    other_executions: list[tuple[int, ReviewerResult]] = field(default_factory=list)


SnapshotLoaderFn = Callable[[ReviewRequest], tuple[Snapshot, Workspace, list[FileChange]]]
Publisher = Callable[[ReviewState, Sequence[VerifiedFinding], Mapping[str, int], "Runtime"], dict[str, Any]]


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
    ) -> None:
        """`review_deadline_s`: reviewers take no step after this many seconds from the review's start
        (Settings.review_deadline_s); the files they did not reach are named in `not_reviewed`."""
        self.pool = pool
        self.review_deadline_s = review_deadline_s
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

    def strategy_llm(self) -> tuple[LLMPort | None, int | None]:
        """The model that writes z now and its registry version (the promoted one, if any)."""
        if self.strategy_model is None:
            return self._llm, self.model_version_id
        current = self.strategy_model.current()
        return current.llm, current.version_id

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
            context.deadline = time.monotonic() + self.review_deadline_s
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

    def diff_overview(self, context: ReviewContext) -> str:
        return render_diff_overview(context.files, max_lines=DIFF_OVERVIEW_LINES)

    # --- stages --------------------------------------------------------------------------------

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

    def run_reviewer(
        self,
        name: ReviewerName,
        context: ReviewContext,
        plan: PlanItem,
        *,
        shared_prefix: str,
        model_step_budget: int | None = None,
    ) -> ReviewerResult:
        if model_step_budget is None:  # a single execution: the reviewer function's own default
            return self.reviewer_fn(name, context, plan, self._llm, shared_prefix=shared_prefix)
        return self.reviewer_fn(
            name, context, plan, self._llm, shared_prefix=shared_prefix, model_step_budget=model_step_budget
        )

    def verifier_inputs(self, review_id: int, context: ReviewContext) -> VerifierInputs:
        with self._lock:
            index = self._contexts[review_id][1] if review_id in self._contexts else DiffIndex(context.files)
        inputs = VerifierInputs(workspace=context.workspace, diff_index=index, min_severity=context.config.min_severity)
        if self.pool is not None and context.project:
            inputs.rejected_fingerprints = store_reviews.rejected_fingerprints(self.pool, project=context.project)
            inputs.acceptance = store_reviews.acceptance_rates(self.pool, project=context.project)
            by_rule, by_path = store_rejections.votes_by_rule_and_path(self.pool, project=context.project)
            inputs.people_votes = PeopleVotes(by_rule=by_rule, by_path=by_path)
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
        report: dict[str, Any] = {"finding_ids": ids, "counts": _verdict_counts(verified)}
        if self.publisher is not None:
            report.update(self.publisher(state, verified, ids, self))
        return report


def _verdict_counts(verified: Sequence[VerifiedFinding]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in verified:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    return counts


def thread_id_for(request: ReviewRequest, review_id: int) -> str:
    """Checkpoint thread: repository, MR and head commit for GitLab; the review row otherwise."""
    if request.source == "gitlab":
        return f"gitlab:{request.project}:{request.mr_iid}:{request.head}"
    return f"review:{review_id}"


def checkpointer_connection(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)


def setup_checkpointer(dsn: str) -> None:
    """Create LangGraph's checkpoint tables (idempotent); part of `reviewloop db upgrade`."""
    with checkpointer_connection(dsn) as conn:
        PostgresSaver(conn).setup()


def run_review(
    runtime: Runtime,
    request: ReviewRequest,
    *,
    dsn: str | None,
    review_id: int | None = None,
    is_shadow: bool = False,
    parent_review_id: int | None = None,
) -> ReviewOutcome:
    """Review one merge request through the graph. With a DSN, the run is stored and checkpointed."""
    pool = runtime.pool
    if review_id is None:
        review_id = (
            store_reviews.create_review(
                pool,
                source=request.source,
                project=request.project,
                mr_iid=request.mr_iid,
                title=request.title,
                head_sha=request.head if request.source == "gitlab" else None,
                is_shadow=is_shadow,
                parent_review_id=parent_review_id,
            )
            if pool is not None
            else 0
        )
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id_for(request, review_id)}}
    attrs = {
        "reviewloop.review_id": review_id,
        "reviewloop.source": request.source,
        "reviewloop.project": request.project,
        "reviewloop.mr_iid": request.mr_iid or 0,
    }
    with tracer.start_as_current_span("review", attributes=attrs) as span:
        if pool is not None:
            store_reviews.mark_running(pool, review_id, trace_id=format(span.get_span_context().trace_id, "032x"))
        try:
            if dsn is not None:
                with checkpointer_connection(dsn) as conn:
                    graph = build_review_graph(runtime, PostgresSaver(conn))
                    state = _invoke_or_resume(graph, config, request, review_id)
            else:
                state = build_review_graph(runtime).invoke(
                    {"review_id": review_id, "request": request.model_dump(mode="json")}, config
                )
        except Exception as exc:
            if pool is not None:
                store_reviews.mark_failed(pool, review_id, error=str(exc))
            span.record_exception(exc)
            lost = _lost_connection(exc)
            if lost is not None:
                raise lost from exc
            raise
        finally:
            runtime.forget(review_id)
        outcome = _outcome(review_id, state)
        if pool is not None and runtime.shadow_strategies > 0 and not is_shadow:
            _run_shadows(runtime, pool, request, outcome)
        if pool is not None:
            store_reviews.mark_done(
                pool,
                review_id,
                stats={
                    "counts": _verdict_counts(outcome.verified),
                    "steps": sum(len(r.steps) for r in outcome.reviewer_results)
                    + sum(len(r.steps) for _, r in outcome.other_executions),
                    "executions": 1 + len({i for i, _ in outcome.other_executions}),
                },
                cost_tokens=0,
                not_reviewed=[n.model_dump() for n in outcome.snapshot.not_reviewed] + _unreached(outcome),
            )
        return outcome


def _run_shadows(runtime: Runtime, pool: ConnectionPool[Any], request: ReviewRequest, outcome: ReviewOutcome) -> None:
    from agent.shadow import run_shadow_reviews

    context, index = runtime.context_and_index(
        outcome.review_id, request.model_dump(mode="json"), outcome.snapshot.model_dump(mode="json")
    )
    s1 = render_s1(
        title=context.title,
        description=context.description,
        files=context.files,
        config=context.config,
        diff_overview=runtime.diff_overview(context),
    )
    llm, _ = runtime.strategy_llm()
    run_shadow_reviews(
        pool,
        parent_review_id=outcome.review_id,
        base=outcome.strategy,
        context=context,
        diff_index=index,
        n=runtime.shadow_strategies,
        llm=llm,
        s1=s1,
        source=request.source,
    )


def _lost_connection(exc: BaseException) -> StoreError | None:
    """The checkpointer's own connection was cut (a Postgres restart, a failover): a retryable error,
    so the job queue runs the review again and it resumes from its last checkpoint."""
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return StoreError(f"Postgres connection lost during the review: {first_line}")
    return None


def _invoke_or_resume(graph: Any, config: dict[str, Any], request: ReviewRequest, review_id: int) -> dict[str, Any]:
    snapshot = graph.get_state(config)
    if snapshot.next:  # an earlier run of this thread stopped part-way: finish it
        log.info("resuming review %s from its checkpoint at %s", review_id, list(snapshot.next))
        result: dict[str, Any] = graph.invoke(None, config)
        return result
    started: dict[str, Any] = graph.invoke({"review_id": review_id, "request": request.model_dump(mode="json")}, config)
    return started


def pending_review_id(dsn: str, runtime: Runtime, request: ReviewRequest) -> int | None:
    """The review id of an unfinished checkpointed run for a GitLab MR head, if any."""
    if request.source != "gitlab":
        return None
    config = {"configurable": {"thread_id": thread_id_for(request, 0)}}
    with checkpointer_connection(dsn) as conn:
        snap = build_review_graph(runtime, PostgresSaver(conn)).get_state(config)
    if snap.next and snap.values.get("review_id"):
        return int(snap.values["review_id"])
    return None


def _unreached(outcome: ReviewOutcome) -> list[dict[str, str]]:
    return unreached_files(outcome.reviewer_results)


def unreached_files(results: Sequence[ReviewerResult]) -> list[dict[str, str]]:
    """Files a reviewer's step budget or the review deadline did not reach, and files an analyzer's
    budget read only in part, once per file with every reason, so the summary can say so."""
    missed: dict[str, list[str]] = {}
    reasons: dict[str, list[str]] = {}
    for r in results:
        for path, why in r.cut_short.items():
            reasons.setdefault(path, []).append(why)
        for path in r.unreviewed_paths:
            if path not in r.cut_short:
                missed.setdefault(path, []).append(r.reviewer)
    for path, reviewers in missed.items():
        reasons.setdefault(path, []).append(f"step budget of {', '.join(reviewers)} used up")
    return [{"path": p, "reason": "; ".join(rs)} for p, rs in reasons.items()]


def _outcome(review_id: int, state: Mapping[str, Any]) -> ReviewOutcome:
    from agent.graph import verified_from_state

    return ReviewOutcome(
        review_id=review_id,
        verified=verified_from_state(state),
        strategy=Strategy.model_validate(state["strategy"]),
        strategy_source=str(state.get("strategy_source", "rule")),
        snapshot=Snapshot.model_validate(state["snapshot"]),
        reviewer_results=[
            ReviewerResult.model_validate(r) for r in state.get("reviewer_results", []) if not r.get("execution")
        ],
        report=dict(state.get("report", {})),
        other_executions=[
            (int(r["execution"]), ReviewerResult.model_validate(r))
            for r in state.get("reviewer_results", [])
            if r.get("execution")
        ],
    )
