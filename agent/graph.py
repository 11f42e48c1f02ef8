"""The review graph (LangGraph): load_context → analyzers → strategy → reviewers (fan-out) → verifier → reporter.

The analyzers run first, every enabled reviewer's on every changed file it reads, under a deadline of
their own and before any model is asked anything; the strategy and the model's steps then have a
deadline of their own. Whatever the model does — answer slowly, never answer, plan nothing — the
analyzers' findings are in the review (issue 40: a strategy step that used the whole deadline once
left a review with no findings at all).

With a model, the strategy node keeps several diverse strategies (`agent.agreement`), the fan-out
runs the planned reviewers under each (one "execution" per strategy, the model's step budget shared
among them), and the verifier counts how many executions report each model-only finding.

The state holds plain data only (the snapshot, z, the reviewers' results, verdicts), so Postgres
checkpoints it after every node and a failed or killed run resumes where it stopped: finished
nodes, and finished reviewers of a fan-out, are not run again. Everything with side effects or
network access is reached through the `ReviewRuntime` port, which `agent.runtime` implements.
"""

from __future__ import annotations

import contextvars
import operator
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypedDict, cast

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy, Send
from opentelemetry import trace

from agent.agreement import annotate_support, diverse_strategies, execution_step_budget
from agent.llm.deadline import model_deadline
from agent.plan_posting import OUTSIDE_PLAN_REASON, plan_visits, split_by_plan
from agent.repo_config import MANDATORY_REVIEWER
from agent.strategy import (
    Strategy,
    StrategySource,
    generate_strategy,
    rule_based_strategy,
    with_analyzer_coverage,
)
from agent.strategy_prompt import render_s1
from agent.verifier import VerifiedFinding, VerifierInputs, below_min_severity, verify_findings
from reviewers.kernel.contracts import (
    Finding,
    LLMPort,
    PlanItem,
    ReviewContext,
    ReviewerName,
    ReviewerResult,
)
from reviewers.kernel.errors import ReviewloopError
from reviewers.loop import AnalyzerPass
from reviewers.prompts import render_review_prefix, untrusted
from reviewers.registry import REVIEWER_SPECS

if TYPE_CHECKING:
    from agent.embeddings import Embedder
    from agent.strategy_model import StrategyModel

tracer = trace.get_tracer("reviewloop.graph")


class ReviewState(TypedDict, total=False):
    review_id: int
    request: dict[str, Any]
    snapshot: dict[str, Any]
    strategy: dict[str, Any]
    strategy_source: str
    strategy_note: str | None
    model_version_id: int | None
    executions: list[dict[str, Any]]  # the strategies the reviewers run under; [strategy] without agreement
    # Plan items of reviewers a model's plan left out, run with their analyzers only (`with_analyzer_coverage`)
    analyzers_only: list[dict[str, Any]]
    # reviewer → its analyzer pass (`reviewers.loop.AnalyzerPass`), run before the strategy
    analyzer_passes: dict[str, dict[str, Any]]
    reviewer_results: Annotated[list[dict[str, Any]], operator.add]  # each with its "execution" index
    verdicts: list[dict[str, Any]]
    below_min_severity: dict[str, Any] | None  # {"min_severity", "count"} of findings under the floor
    report: dict[str, Any]
    # The model's own plan, before serving widened it to full analyzer coverage: what decides which
    # findings are posted (agent.plan_posting; None with the rule-based strategy).
    model_plan: dict[str, Any] | None


class ReviewerTask(TypedDict):
    review_id: int
    reviewer: ReviewerName
    plan: dict[str, Any]
    request: dict[str, Any]
    snapshot: dict[str, Any]
    strategy_text: str
    execution: int
    model_step_budget: int | None
    prior: dict[str, Any] | None  # the reviewer's analyzer pass, when it ran


class ReviewRuntime(Protocol):
    """The ports the graph's nodes use; `agent.runtime.Runtime` is the production implementation."""

    @property
    def llm(self) -> LLMPort | None: ...

    @property
    def embedder(self) -> Embedder | None: ...

    def load_snapshot(self, state: ReviewState) -> dict[str, Any]: ...

    def context(self, review_id: int, request: Mapping[str, Any], snapshot: Mapping[str, Any]) -> ReviewContext: ...

    def history(self, context: ReviewContext) -> Mapping[str, float]: ...

    def rule_votes(self, context: ReviewContext) -> Mapping[str, tuple[int, int]]: ...

    def strategy_llm(self) -> StrategyModel: ...

    def start_deadline(self, context: ReviewContext) -> None: ...

    def run_analyzers(self, name: ReviewerName, context: ReviewContext) -> AnalyzerPass: ...

    @property
    def stores_reviews(self) -> bool: ...

    def save_strategy(
        self,
        review_id: int,
        strategy: Strategy,
        source: StrategySource,
        note: str | None,
        *,
        model_version_id: int | None = None,
        s1: str = "",
    ) -> None: ...

    def run_reviewer(
        self,
        name: ReviewerName,
        context: ReviewContext,
        plan: PlanItem,
        *,
        shared_prefix: str,
        model_step_budget: int | None = None,
        prior: AnalyzerPass | None = None,
    ) -> ReviewerResult: ...

    def verifier_inputs(self, review_id: int, context: ReviewContext) -> VerifierInputs: ...

    def report(self, state: ReviewState, verified: Sequence[VerifiedFinding]) -> dict[str, Any]: ...


def _is_retryable(exc: Exception) -> bool:
    return isinstance(exc, ReviewloopError) and exc.retryable


NETWORK_RETRY = RetryPolicy(max_attempts=3, initial_interval=0.5, retry_on=_is_retryable)


def shared_prefix(context: ReviewContext, strategy_text: str) -> str:
    """The MR context every reviewer's prompt starts with, identical across reviewers (prefix cache):
    the reviewers' own rendering, in which the title, description and diff are fenced as data. The
    strategy is fenced too: its paths are the change's (a path may hold a newline and an instruction)
    and a model wrote its words after reading the change."""
    return f"{render_review_prefix(context)}\n\n{untrusted('Review strategy', strategy_text)}\n"


def build_review_graph(runtime: ReviewRuntime, checkpointer: BaseCheckpointSaver[Any] | None = None) -> Any:
    """Compile the review graph over a runtime; with a checkpointer, runs are resumable by thread id."""

    def span_attrs(state: Mapping[str, Any]) -> dict[str, Any]:
        req = state.get("request", {})
        return {
            "reviewloop.review_id": int(state.get("review_id", 0)),
            "reviewloop.project": str(req.get("project", "")),
            "reviewloop.mr_iid": int(req.get("mr_iid") or 0),
        }

    def load_context(state: ReviewState) -> dict[str, Any]:
        with tracer.start_as_current_span("load_context", attributes=span_attrs(state)) as span:
            snapshot = runtime.load_snapshot(state)
            span.set_attribute("reviewloop.files", snapshot.get("diff", "").count("diff --git"))
            return {"snapshot": snapshot}

    def analyzers(state: ReviewState) -> dict[str, Any]:
        with tracer.start_as_current_span("analyzers", attributes=span_attrs(state)) as span:
            context = runtime.context(state["review_id"], state["request"], state["snapshot"])
            runtime.start_deadline(context)  # the analyzers' own: no model has taken any of it
            names = analyzed_reviewers(context)
            # each in the caller's context (a copy per thread), so the analyzers' spans join the review's trace
            contexts = [contextvars.copy_context() for _ in names]
            with ThreadPoolExecutor(max_workers=max(1, len(names)), thread_name_prefix="analyzers") as pool:
                passes = list(
                    pool.map(lambda ctx, name: ctx.run(runtime.run_analyzers, name, context), contexts, names)
                )
            span.set_attribute("reviewloop.reviewers", names)
            span.set_attribute("reviewloop.findings", sum(len(p.findings) for p in passes))
            return {"analyzer_passes": {p.reviewer: p.model_dump(mode="json") for p in passes}}

    def strategy(state: ReviewState) -> dict[str, Any]:
        with tracer.start_as_current_span("strategy", attributes=span_attrs(state)) as span:
            review_id = state["review_id"]
            context = runtime.context(review_id, state["request"], state["snapshot"])
            runtime.start_deadline(context)  # the model's own deadline, for its strategy and its steps
            history = runtime.history(context)
            writer = runtime.strategy_llm()
            llm, version_id = writer.llm, writer.version_id
            # The strategy prompt is for the model that writes z, and is kept with a stored review so
            # that training prompts match serving ones; a review with neither (no model, --no-store)
            # does not render it (a tenth of a second on a 10,000-line change).
            s1 = serving_s1(runtime, context, history=history) if llm is not None or runtime.stores_reviews else ""
            with model_deadline(context.seconds_left()):
                z, source, note = generate_strategy(
                    llm,
                    s1=s1,
                    files=context.files,
                    config=context.config,
                    history=history,
                    decisions_only=writer.decisions_only,
                )
            analyzers_only: list[PlanItem] = []
            model_plan = z.model_dump(mode="json") if source == "model" else None
            if source == "model":  # static findings never depend on the model's plan: coverage is kept
                rules = rule_based_strategy(context.files, context.config, history)
                z, analyzers_only = with_analyzer_coverage(z, rules)
            analyzers_only += unplanned_analyzers(z, analyzers_only, context)
            span.set_attribute("reviewloop.analyzers_only", [p.reviewer for p in analyzers_only])
            version_id = version_id if source == "model" else None
            runtime.save_strategy(review_id, z, source, note, model_version_id=version_id, s1=s1)
            if version_id is not None:
                span.set_attribute("reviewloop.model_version_id", version_id)
            span.set_attribute("reviewloop.strategy_source", source)
            if note:  # why the model's strategy was not used, kept with the trace like a reviewer's fallback
                span.set_attribute("reviewloop.fallback", note)
            span.set_attribute("reviewloop.planned_reviewers", [p.reviewer for p in z.plan])
            executions = [z]
            wanted = context.config.agreement.strategies
            if source == "model" and wanted > 1 and z.plan:
                try:
                    with model_deadline(context.seconds_left()):
                        executions = diverse_strategies(
                            z,
                            llm=llm,
                            s1=s1,
                            files=context.files,
                            config=context.config,
                            n=wanted,
                            embedder=runtime.embedder,
                        )
                except ReviewloopError as exc:  # an embedder that cannot load: one execution, said on the span
                    span.set_attribute("reviewloop.agreement_skipped", str(exc))
            span.set_attribute("reviewloop.executions", len(executions))
            return {
                "executions": [e.model_dump(mode="json") for e in executions],
                "strategy": z.model_dump(mode="json"),
                "strategy_source": source,
                "strategy_note": note,
                "model_version_id": version_id,
                "analyzers_only": [p.model_dump(mode="json") for p in analyzers_only],
                "model_plan": model_plan,
            }

    def fan_out(state: ReviewState) -> list[Send] | str:
        executions = [Strategy.model_validate(e) for e in state.get("executions") or [state["strategy"]]]
        analyzers_only = [PlanItem.model_validate(p) for p in state.get("analyzers_only") or []]
        passes = state.get("analyzer_passes") or {}
        sent = {p.reviewer for p in analyzers_only} | {p.reviewer for z in executions for p in z.plan}
        # a reviewer whose analyzers found something or could not read a file is reported, planned or not
        analyzers_only += [
            PlanItem(reviewer=cast(ReviewerName, name))
            for name, done in passes.items()
            if name not in sent and (done.get("findings") or done.get("not_reviewed"))
        ]
        if not any(z.plan for z in executions) and not analyzers_only:
            return "verifier"
        shared = len(executions) > 1  # several executions share the model's budget of one

        def send(item: PlanItem, z: Strategy, execution: int, model_step_budget: int | None) -> Send:
            task = ReviewerTask(
                review_id=state["review_id"],
                reviewer=item.reviewer,
                plan=item.model_dump(mode="json"),
                request=state["request"],
                snapshot=state["snapshot"],
                strategy_text=z.render(),
                execution=execution,
                model_step_budget=model_step_budget,
                prior=passes.get(item.reviewer),
            )
            return Send("reviewer", task)

        coverage = [send(item, executions[0], 0, 0) for item in analyzers_only]  # 0: its analyzers only
        return coverage + [
            send(item, z, index, execution_step_budget(item.step_budget, len(executions)) if shared else None)
            for index, z in enumerate(executions)
            for item in z.plan
        ]

    def reviewer(task: ReviewerTask) -> dict[str, Any]:
        attrs = {**span_attrs(task), "reviewloop.reviewer": task["reviewer"]}
        with tracer.start_as_current_span(f"reviewer {task['reviewer']}", attributes=attrs) as span:
            context = runtime.context(task["review_id"], task["request"], task["snapshot"])
            plan = PlanItem.model_validate(task["plan"])
            execution = task.get("execution", 0)
            span.set_attribute("reviewloop.execution", execution)
            prior = task.get("prior")
            with model_deadline(context.seconds_left()):
                result = runtime.run_reviewer(
                    task["reviewer"],
                    context,
                    plan,
                    shared_prefix=shared_prefix(context, task["strategy_text"]),
                    model_step_budget=task.get("model_step_budget"),
                    prior=AnalyzerPass.model_validate(prior) if prior else None,
                )
            span.set_attribute("reviewloop.findings", len(result.findings))
            span.set_attribute("reviewloop.steps", len(result.steps))
            if result.error:
                span.set_attribute("reviewloop.fallback", result.error)
            return {"reviewer_results": [{**result.model_dump(mode="json"), "execution": execution}]}

    def verifier(state: ReviewState) -> dict[str, Any]:
        with tracer.start_as_current_span("verifier", attributes=span_attrs(state)) as span:
            review_id = state["review_id"]
            context = runtime.context(review_id, state["request"], state["snapshot"])
            inputs = runtime.verifier_inputs(review_id, context)
            findings = findings_by_agreement(state, context.config.agreement.min_support, runtime.embedder)
            floor = context.config.min_severity
            below = [f for f in findings if below_min_severity(f, floor)]
            findings = [f for f in findings if not below_min_severity(f, floor)]
            with model_deadline(context.seconds_left()):  # the judge's calls are the model's too
                verified = verify_findings(findings, inputs, runtime.llm)
            if state.get("model_plan"):  # train = serve: the learned plan decides what is posted
                verified = posted_by_plan(state, verified, review_budget=context.config.review_budget)
                span.set_attribute(
                    "reviewloop.listed_outside_plan", sum(v.reason == OUTSIDE_PLAN_REASON for v in verified)
                )
            counts: dict[str, int] = {}
            for v in verified:
                counts[v.verdict] = counts.get(v.verdict, 0) + 1
            for verdict, n in counts.items():
                span.set_attribute(f"reviewloop.verdicts.{verdict}", n)
            return {
                "verdicts": [
                    {"finding": v.finding.model_dump(mode="json"), "verdict": v.verdict, "reason": v.reason}
                    for v in verified
                ],
                # left out by the configuration's severity floor: not verified, counted so the report says so
                "below_min_severity": {"min_severity": floor, "count": len(below)} if below else None,
            }

    def reporter(state: ReviewState) -> dict[str, Any]:
        with tracer.start_as_current_span("reporter", attributes=span_attrs(state)):
            return {"report": runtime.report(state, verified_from_state(state))}

    graph = StateGraph(ReviewState)
    graph.add_node("load_context", load_context, retry_policy=NETWORK_RETRY)
    graph.add_node("analyzers", analyzers, retry_policy=NETWORK_RETRY)
    graph.add_node("strategy", strategy, retry_policy=NETWORK_RETRY)
    graph.add_node("reviewer", cast(Any, reviewer), retry_policy=NETWORK_RETRY)
    graph.add_node("verifier", verifier, retry_policy=NETWORK_RETRY)
    graph.add_node("reporter", reporter, retry_policy=NETWORK_RETRY)
    graph.add_edge(START, "load_context")
    graph.add_edge("load_context", "analyzers")
    graph.add_edge("analyzers", "strategy")
    graph.add_conditional_edges("strategy", fan_out, ["reviewer", "verifier"])
    graph.add_edge("reviewer", "verifier")
    graph.add_edge("verifier", "reporter")
    graph.add_edge("reporter", END)
    return graph.compile(checkpointer=checkpointer)


class HistorySource(Protocol):
    def history(self, context: ReviewContext) -> Mapping[str, float]: ...

    def rule_votes(self, context: ReviewContext) -> Mapping[str, tuple[int, int]]: ...


def serving_s1(runtime: HistorySource, context: ReviewContext, *, history: Mapping[str, float] | None = None) -> str:
    """The strategy prompt serving renders (the strategy node and the shadows): the one renderer, fed
    the project's feedback history (team votes keyed by kind of finding, as the learning environment
    keys them) and the repository's review budget."""
    return render_s1(
        title=context.title,
        description=context.description,
        files=context.files,
        config=context.config,
        history=runtime.history(context) if history is None else history,
        rule_votes=runtime.rule_votes(context),
        review_budget=context.config.review_budget,
    )


def unplanned_analyzers(z: Strategy, already: Sequence[PlanItem], context: ReviewContext) -> list[PlanItem]:
    """An analyzers-only item for each enabled reviewer that no plan runs but whose analyzer reads a
    changed file: static analysis is not rationed by the plan (a docs-only change still gets its
    secrets scan), and what a reviewer could not read is named only if the reviewer runs."""
    planned = {p.reviewer for p in z.plan} | {p.reviewer for p in already}
    present = [f.path for f in context.files if f.status != "deleted" and not f.is_binary]
    wanted = [p for p in present if context.config.wants(p)]
    return [
        PlanItem(reviewer=name)
        for name in context.config.reviewers
        if name not in planned
        # the mandatory reviewer's secrets scan reads excluded files too (agent.repo_config)
        and any(REVIEWER_SPECS[name].supports(p) for p in (present if name == MANDATORY_REVIEWER else wanted))
    ]


def analyzed_reviewers(context: ReviewContext) -> list[ReviewerName]:
    """The enabled reviewers whose analyzers read a changed file (the pass that runs before any model)."""
    readable = [
        f.path for f in context.files if f.status != "deleted" and not f.is_binary and context.config.wants(f.path)
    ]
    return [name for name in context.config.reviewers if any(REVIEWER_SPECS[name].supports(p) for p in readable)]


def findings_by_agreement(state: Mapping[str, Any], min_support: int, embedder: Embedder | None) -> list[Finding]:
    """The reviewers' findings; with several executions, one per problem and annotated with how many
    executions reported it (`agent.agreement`)."""
    results = state.get("reviewer_results", [])
    count = len(state.get("executions") or [None])
    per_execution: list[list[Finding]] = [[] for _ in range(count)]
    for r in results:
        per_execution[min(int(r.get("execution", 0)), count - 1)] += [Finding.model_validate(f) for f in r["findings"]]
    if count < 2:
        return per_execution[0]
    try:
        return annotate_support(per_execution, min_support=min_support, embedder=embedder)
    except ReviewloopError:  # the embedder failed: word overlap still tells close texts apart
        return annotate_support(per_execution, min_support=min_support, embedder=None)


def readable_by_reviewer(state: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per reviewer, the changed files its analyzers read in full (first execution), in diff order: what
    a plan's steps can visit, as the replay environment counts them."""
    readable: dict[str, list[str]] = {}
    for r in state.get("reviewer_results", []):
        if int(r.get("execution", 0)) != 0:
            continue
        paths = readable.setdefault(str(r["reviewer"]), [])
        for step in r.get("steps") or []:
            if step.get("tool") == "run_analyzer" and step.get("paths") and step["paths"][0] not in paths:
                paths.append(step["paths"][0])
    return readable


def posted_by_plan(
    state: Mapping[str, Any], verified: Sequence[VerifiedFinding], *, review_budget: int | None
) -> list[VerifiedFinding]:
    """The model's plan decides which REAL findings become threads (`agent.plan_posting`), its steps
    within the repository's review budget: those outside it, and above no floor, go to the summary's
    list with the reason — never dropped."""
    z = Strategy.model_validate(state["model_plan"])
    visits = plan_visits(z, readable_by_reviewer(state), review_budget=review_budget)
    posted = {id(f) for f in split_by_plan([v.finding for v in verified], visits).posted}
    return [
        v
        if v.verdict != "REAL" or id(v.finding) in posted
        else VerifiedFinding(v.finding, "NEEDS_HUMAN_REVIEW", OUTSIDE_PLAN_REASON)
        for v in verified
    ]


def verified_from_state(state: Mapping[str, Any]) -> list[VerifiedFinding]:
    return [
        VerifiedFinding(Finding.model_validate(v["finding"]), v["verdict"], v["reason"])
        for v in state.get("verdicts", [])
    ]
