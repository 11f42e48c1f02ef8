"""The four reviewers by name, and the one entry point the agent calls."""

from __future__ import annotations

from reviewers.architecture import ARCHITECTURE
from reviewers.code_quality import CODE_QUALITY
from reviewers.kernel.contracts import LLMPort, PlanItem, ReviewContext, ReviewerName, ReviewerResult
from reviewers.kernel.errors import InputError
from reviewers.loop import AnalyzerPass, run_analyzer_pass, run_loop
from reviewers.reviewer import ReviewerSpec
from reviewers.security import SECURITY
from reviewers.test_impact import TEST_IMPACT

REVIEWER_SPECS: dict[ReviewerName, ReviewerSpec] = {
    spec.name: spec for spec in (SECURITY, ARCHITECTURE, CODE_QUALITY, TEST_IMPACT)
}
REVIEWER_DESCRIPTIONS: dict[ReviewerName, str] = {name: spec.description for name, spec in REVIEWER_SPECS.items()}


def run_reviewer(
    name: ReviewerName,
    context: ReviewContext,
    plan: PlanItem,
    llm: LLMPort | None,
    *,
    shared_prefix: str | None = None,
    model_step_budget: int | None = None,
    analyzer_budget: int | None = None,
    prior: AnalyzerPass | None = None,
) -> ReviewerResult:
    """Run one reviewer under its plan item. `llm=None` runs the analyzers only. `shared_prefix` is
    the MR context every reviewer's prompt starts with (`render_review_prefix(context)` when None);
    pass the same string to all four so a server-side prefix cache is hit. `model_step_budget` bounds
    the model's steps when it is not the plan's budget (one of several executions of a review).
    `analyzer_budget` is for the replay environment only (`reviewers.loop.run_loop`). `prior`: this
    reviewer's analyzer pass when it already ran (`run_analyzers`); None runs it first."""
    spec = _spec(name)
    if plan.reviewer != name:
        raise InputError(f"the plan item is for the {plan.reviewer} reviewer, not {name}")
    return run_loop(
        spec,
        context,
        plan,
        llm,
        shared_prefix=shared_prefix,
        model_step_budget=model_step_budget,
        analyzer_budget=analyzer_budget,
        prior=prior,
    )


def run_analyzers(name: ReviewerName, context: ReviewContext) -> AnalyzerPass:
    """One reviewer's analyzers on every changed file it reads, with no model and no plan: the pass
    the review runs before any model is asked anything (`reviewers.loop.AnalyzerPass`)."""
    return run_analyzer_pass(_spec(name), context)


def _spec(name: ReviewerName) -> ReviewerSpec:
    spec = REVIEWER_SPECS.get(name)
    if spec is None:
        raise InputError(f"unknown reviewer {name!r}; known: {', '.join(REVIEWER_SPECS)}")
    return spec
