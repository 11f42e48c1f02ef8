"""The bounded tool-using loop every reviewer runs, with or without a model.

Targets are the changed files the plan item focuses on (in its order; a focus entry may be a path,
a glob or a directory), or every changed file in diff order when it names none — keeping only files
the repository configuration wants, that exist at head, that this reviewer's analyzer reads, and
that are not generated or minified (those are named in `error`).

With a model, each step is a `ToolCall` the model writes (validated through `LLMPort.complete_json`,
decoded under that step's `tool_call_json_schema`); a call the tools reject is an invalid step. If
the model fails (`LLMError`), the rest of the budget goes to the fixed executor and `error` says so.

Without a model — and as that fallback — the fixed executor spends exactly one step per target on
`run_analyzer`, in target order, and reports the analyzer's findings as part of that step (no separate
report steps). So the step budget decides how many files are reviewed: a strategy that puts the
risky files first finds more within its budget. Files the budget did not reach are named in `error`.
The loop never records more than `plan.step_budget` steps.
"""

from __future__ import annotations

import fnmatch

from reviewers.analyzers.changed_file import looks_generated
from reviewers.contracts import LLMPort, PlanItem, ReviewContext, ReviewerResult, Step, ToolName
from reviewers.errors import LLMError
from reviewers.prompts import call_message, initial_messages, observation_message, render_review_prefix, render_task
from reviewers.reviewer import ReviewerSpec
from reviewers.tool_schema import tool_call_json_schema
from reviewers.tools import Toolbox, ToolCall, ToolOutcome

MAX_NAMED_UNREVIEWED = 10  # the error names this many files, then counts the rest


def _named(paths: list[str]) -> str:
    more = f" and {len(paths) - MAX_NAMED_UNREVIEWED} more" if len(paths) > MAX_NAMED_UNREVIEWED else ""
    return ", ".join(paths[:MAX_NAMED_UNREVIEWED]) + more


def _focus_matches(path: str, focus: str) -> bool:
    return path == focus or fnmatch.fnmatch(path, focus) or path.startswith(focus.rstrip("/") + "/")


def reviewable_paths(spec: ReviewerSpec, context: ReviewContext) -> tuple[list[str], list[str]]:
    """(changed files this reviewer reads, in diff order; those skipped as generated or minified)."""
    eligible: list[str] = []
    generated: list[str] = []
    for f in context.files:
        if f.status == "deleted" or f.is_binary or not context.config.wants(f.path) or not spec.supports(f.path):
            continue
        text = context.workspace.read_file(f.path)
        if text is None:
            continue
        (generated if looks_generated(text) else eligible).append(f.path)
    return eligible, generated


def plan_targets(plan: PlanItem, eligible: list[str]) -> tuple[list[str], list[str]]:
    """(the files to review in order, the focus entries that matched none of them)."""
    if not plan.focus_paths:
        return eligible, []
    targets: list[str] = []
    unmatched: list[str] = []
    for focus in plan.focus_paths:
        matched = [p for p in eligible if _focus_matches(p, focus)]
        if not matched:
            unmatched.append(focus)
        targets.extend(p for p in matched if p not in targets)
    return targets, unmatched


def _step(index: int, tool: ToolName, outcome: ToolOutcome, args: dict[str, object]) -> Step:
    return Step(
        index=index,
        tool=tool,
        args=args,
        observation=outcome.summary,
        valid=outcome.valid,
        new_findings=len(outcome.new_findings),
        paths=outcome.paths,
    )


def _run_fixed(box: Toolbox, steps: list[Step], budget: int) -> None:
    for path in box.targets:
        if len(steps) >= budget:
            return
        if path not in box.analyzed:
            steps.append(_step(len(steps), "run_analyzer", box.run_analyzer(path), {"path": path}))


def _run_model(
    box: Toolbox, steps: list[Step], llm: LLMPort, *, plan: PlanItem, shared_prefix: str
) -> tuple[bool, str | None]:
    """Steps chosen by the model. Returns (whether the model answered at least once, why it failed)."""
    task = render_task(
        instructions=box.spec.instructions,
        plan=plan,
        targets=box.targets,
        repo_instructions=list(
            dict.fromkeys(text for path in box.targets for text in box.context.config.instructions_for(path))
        ),
    )
    messages = initial_messages(shared_prefix=shared_prefix, task=task)
    answered = False
    while len(steps) < plan.step_budget:
        try:
            # Decoding is held to this step's possible calls: its tools, its files, targets not analyzed yet.
            schema = tool_call_json_schema(
                paths=box.targets, analyzer_paths=[t for t in box.targets if t not in box.analyzed]
            )
            call = llm.complete_json(messages, ToolCall, purpose=f"reviewer.{box.spec.name}", json_schema=schema)
        except LLMError as exc:
            return (
                answered,
                f"model failed at step {len(steps) + 1} ({type(exc).__name__}: {exc}); analyzers used instead",
            )
        answered = True
        outcome = box.execute(call)
        steps.append(_step(len(steps), call.tool, outcome, call.args()))
        if call.tool == "finish":
            break
        messages += [
            call_message(call),
            observation_message(outcome.observation, steps_left=plan.step_budget - len(steps)),
        ]
    return answered, None


def run_loop(
    spec: ReviewerSpec, context: ReviewContext, plan: PlanItem, llm: LLMPort | None, *, shared_prefix: str | None
) -> ReviewerResult:
    eligible, generated = reviewable_paths(spec, context)
    targets, unmatched = plan_targets(plan, eligible)
    if spec.prefetch is not None and targets:
        spec.prefetch(context, targets[: plan.step_budget])
    box = Toolbox(spec, context, targets)
    steps: list[Step] = []
    notes: list[str] = []
    if generated:
        notes.append(f"skipped as generated or minified: {_named(generated)}")
    used_model = False
    if plan.focus_paths and not targets:
        notes.append(f"no focus path is a changed file the {spec.name} reviewer reads: {', '.join(unmatched)}")
    if llm is not None and targets:
        used_model, failure = _run_model(
            box, steps, llm, plan=plan, shared_prefix=shared_prefix or render_review_prefix(context)
        )
        if failure is not None:
            notes.append(failure)
            _run_fixed(box, steps, plan.step_budget)
    else:
        _run_fixed(box, steps, plan.step_budget)
    unreviewed = [t for t in targets if t not in box.looked_at]
    if unreviewed:
        why = f"step budget {plan.step_budget} used up" if len(steps) >= plan.step_budget else "the model finished"
        notes.append(f"{why}; not reviewed: {_named(unreviewed)}")
    notes += list(dict.fromkeys(box.problems))
    return ReviewerResult(
        reviewer=spec.name,
        findings=sorted(box.findings.values(), key=lambda f: (targets.index(f.path), f.line)),
        steps=steps,
        used_model=used_model,
        error="; ".join(notes) or None,
        unreviewed_paths=unreviewed,
    )
