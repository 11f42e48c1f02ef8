"""Running a review end to end: the runtime behind the graph's ports, and the entry points.

`run_review` reviews any source (local range, diff, replay, GitLab MR) through the checkpointed
graph and returns the verified findings; the worker's job calls `review_gitlab_merge_request`
(agent/gitlab/review.py), which loads the merge request and runs it through `run_review`. A run
whose checkpoint shows unfinished nodes (a killed worker, a failed reviewer) is resumed rather than
started again, under the same review row.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from opentelemetry import trace
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from agent.context import ReviewRequest, Snapshot
from agent.graph import build_review_graph, serving_s1
from agent.runtime import Runtime, verdict_counts
from agent.store import migrate
from agent.store import reviews as store_reviews
from agent.strategy import Strategy
from agent.verifier import JUDGMENT_UNAVAILABLE, VerifiedFinding
from reviewers.kernel.contracts import NotReviewed, ReviewerResult, merge_not_reviewed
from reviewers.kernel.errors import StoreError

log = logging.getLogger(__name__)
tracer = trace.get_tracer("reviewloop.pipeline")


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
    strategy_note: str | None = None  # why a model's strategy was not used (source "fallback")
    below_min_severity: dict[str, Any] | None = None  # {"min_severity", "count"}: left out by the config's floor


def thread_id_for(request: ReviewRequest, review_id: int) -> str:
    """Checkpoint thread: repository, MR and head commit for GitLab; the review row otherwise."""
    if request.source == "gitlab":
        return f"gitlab:{request.project}:{request.mr_iid}:{request.head}"
    return f"review:{review_id}"


def _postgres_saver(conn: psycopg.Connection[Any]) -> Any:
    """LangGraph's Postgres checkpointer, imported when a review is checkpointed: a local review
    without a database (a CI job on every push) does not pay for loading it."""
    from langgraph.checkpoint.postgres import PostgresSaver

    return PostgresSaver(conn)


def checkpointer_connection(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)


def setup_checkpointer(dsn: str) -> None:
    """Create LangGraph's checkpoint tables (idempotent); part of `reviewloop db upgrade`. Under the
    migration lock: replicas and one-off commands starting together on a fresh database race here."""
    with migrate.migration_lock(dsn), checkpointer_connection(dsn) as conn:
        _postgres_saver(conn).setup()


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
                    graph = build_review_graph(runtime, _postgres_saver(conn))
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
        outcome = outcome_from_state(review_id, state)
        if pool is not None and runtime.shadow_strategies > 0 and not is_shadow:
            _run_shadows(runtime, pool, request, outcome)
        if pool is not None:
            store_reviews.mark_done(
                pool,
                review_id,
                stats={
                    "counts": verdict_counts(outcome.verified),
                    "steps": sum(len(r.steps) for r in outcome.reviewer_results)
                    + sum(len(r.steps) for _, r in outcome.other_executions),
                    "executions": 1 + len({i for i, _ in outcome.other_executions}),
                },
                cost_tokens=0,
                not_reviewed=[n.model_dump() for n in not_reviewed_of(outcome)],
            )
        return outcome


def _run_shadows(runtime: Runtime, pool: ConnectionPool[Any], request: ReviewRequest, outcome: ReviewOutcome) -> None:
    from agent.shadow import run_shadow_reviews

    context, index = runtime.context_and_index(
        outcome.review_id, request.model_dump(mode="json"), outcome.snapshot.model_dump(mode="json")
    )
    s1 = serving_s1(runtime, context)  # the same s1 the strategy node rendered for this review
    llm = runtime.strategy_llm().llm
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
        snap = build_review_graph(runtime, _postgres_saver(conn)).get_state(config)
    if snap.next and snap.values.get("review_id"):
        return int(snap.values["review_id"])
    return None


def unreached_files(results: Sequence[ReviewerResult]) -> list[NotReviewed]:
    """The changed files the reviewers did not analyze in full, once per file and reason, with what
    each reviewer did and did not do."""
    return merge_not_reviewed([n for r in results for n in r.not_reviewed])


def not_reviewed_of(outcome: ReviewOutcome) -> list[NotReviewed]:
    """Every changed file the review did not analyze in full, with its reason: what the source could
    not give (binary, no diff) and what the reviewers set aside or did not reach."""
    return merge_not_reviewed([*outcome.snapshot.not_reviewed, *unreached_files(outcome.reviewer_results)])


def model_not_completed(outcome: ReviewOutcome) -> list[str]:
    """Each model step of the review that did not complete, with why: the strategy, a reviewer's steps,
    the verifier's judgment. Empty when no model was asked or every step completed. The analyzers'
    findings are in the review either way (they ran first, `agent.graph`). Each entry starts with the
    step's name and a colon (the summary note counts them by step, `agent.summary`)."""
    gaps: list[str] = []
    if outcome.strategy_source == "fallback":
        gaps.append(f"strategy: {outcome.strategy_note or 'the model gave no usable strategy'}; the rules planned")
    results = [*outcome.reviewer_results, *(r for _, r in outcome.other_executions)]
    for reviewer, error in dict.fromkeys((r.reviewer, r.model_error) for r in results if r.model_error):
        gaps.append(f"{reviewer} reviewer: {error}")
    unjudged = [v for v in outcome.verified if JUDGMENT_UNAVAILABLE in v.reason]
    if unjudged:
        said = unjudged[0].reason
        gaps.append(
            f"verifier: {said[said.index(JUDGMENT_UNAVAILABLE) :]} for {len(unjudged)} finding(s);"
            " their static verdicts stand"
        )
    return gaps


def outcome_meta(outcome: ReviewOutcome) -> dict[str, Any]:
    """The report's `model` entry when a model was asked (none for a review by the rules alone):
    whether every model step completed, and each one that did not, by name; and how many findings
    the configuration's severity floor left out, when it left any."""
    meta: dict[str, Any] = {}
    if outcome.below_min_severity:
        meta["below_min_severity"] = outcome.below_min_severity
    if outcome.strategy_source == "rule":
        return meta
    gaps = model_not_completed(outcome)
    return {**meta, "model": {"completed": not gaps, "not_completed": gaps}}


def outcome_from_state(review_id: int, state: Mapping[str, Any]) -> ReviewOutcome:
    """The review as the graph's state holds it (after the verifier: the reporter reads it too)."""
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
        strategy_note=state.get("strategy_note"),
        below_min_severity=state.get("below_min_severity"),
        other_executions=[
            (int(r["execution"]), ReviewerResult.model_validate(r))
            for r in state.get("reviewer_results", [])
            if r.get("execution")
        ],
    )
