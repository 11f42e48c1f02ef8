"""The bounded tool-using loop every reviewer runs, with or without a model.

Targets are the changed files the plan item focuses on (in its order; a focus entry may be a path,
a glob or a directory), or every changed file in diff order when it names none — keeping only files
the repository configuration wants, that exist at head, that this reviewer's analyzer reads, and
that are not generated or minified (those are named in `error`).

The analyzers always run first, with or without a model: the fixed executor spends exactly one step
per target on `run_analyzer`, in target order, and reports the analyzer's findings as part of that
step. So the step budget decides how many files are analyzed — a strategy that puts the risky files
first finds more within its budget — and the static findings never depend on what a model does
(a model that finishes at once, or is steered by text in the code to do so, loses none of them).

With a model, it then adds: up to `plan.step_budget` more steps, each a `ToolCall` the model writes
(validated through `LLMPort.complete_json` and decoded under that step's `tool_call_json_schema`:
its tools, its files, targets not analyzed yet), starting from what the analyzers found. A call the
tools reject is an invalid step; an answer that fails validation twice (`LLMOutputError`) is a
failed step — each costs one step and the loop goes on with the rest of the budget. Only a model
that cannot be reached (or refuses the request), that fails `MAX_FAILED_STEPS_IN_A_ROW` steps in
a row, or that repeats a call it already made (a small model loops: the same observation comes back
and it asks again) ends the model's part early; `error` says so.
Every tool result goes back to the model fenced as untrusted data (`reviewers.prompts`).
Files no step reached are named in `error`.
"""

from __future__ import annotations

import fnmatch

from reviewers.analyzers.changed_file import looks_generated
from reviewers.kernel.contracts import LLMPort, PlanItem, ReviewContext, ReviewerResult, Step, StepTool
from reviewers.kernel.errors import LLMError, LLMOutputError
from reviewers.prompts import (
    call_message,
    failed_step_messages,
    initial_messages,
    observation_message,
    render_review_prefix,
    render_task,
)
from reviewers.reviewer import ReviewerSpec
from reviewers.tool_schema import tool_call_json_schema
from reviewers.tools import Toolbox, ToolCall, ToolOutcome

MAX_NAMED_UNREVIEWED = 10  # the error names this many files, then counts the rest
# One unusable answer is a bad turn; this many in a row is a model (or server) that cannot do the job,
# and its remaining steps would only burn time.
MAX_FAILED_STEPS_IN_A_ROW = 3
STANDS = "the analyzers' findings stand"


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


def _step(index: int, tool: StepTool, outcome: ToolOutcome, args: dict[str, object]) -> Step:
    return Step(
        index=index,
        tool=tool,
        args=args,
        observation=outcome.summary,
        valid=outcome.valid,
        new_findings=len(outcome.new_findings),
        paths=outcome.paths,
    )


def past_deadline(context: ReviewContext) -> bool:
    return context.past_deadline()


def _run_analyzers(box: Toolbox, steps: list[Step], budget: int) -> list[str]:
    """The fixed executor: one `run_analyzer` step per target while the budget and the review's
    deadline last. Returns the analyzer output, one block per file, for the model's first prompt.

    The plan's order chooses which targets the budget reaches; they are analyzed in the change's own
    order, so what an analyzer reports once per merge request (test impact's grouped untested-code
    finding, placed at the first file that has some) does not move with the order a model wrote."""
    seen: list[str] = []
    chosen = [p for p in box.targets if p not in box.analyzed][: max(0, budget - len(steps))]
    in_diff = {f.path: i for i, f in enumerate(box.context.files)}
    for path in sorted(chosen, key=lambda p: in_diff.get(p, len(in_diff))):
        if len(steps) >= budget or past_deadline(box.context):
            break
        outcome = box.run_analyzer(path)
        steps.append(_step(len(steps), "run_analyzer", outcome, {"path": path}))
        seen.append(outcome.observation)
    return seen


def _run_model(
    box: Toolbox,
    steps: list[Step],
    llm: LLMPort,
    *,
    plan: PlanItem,
    shared_prefix: str,
    analyzer_results: list[str],
    budget: int,
) -> tuple[bool, str | None]:
    """Up to `budget` steps chosen by the model, after the analyzer steps already in `steps`.
    Returns (whether the model answered at least once, why it stopped early)."""
    task = render_task(
        instructions=box.spec.instructions,
        plan=plan,
        targets=box.targets,
        repo_instructions=list(
            dict.fromkeys(text for path in box.targets for text in box.context.config.instructions_for(path))
        ),
        analyzer_results=analyzer_results,
    )
    messages = initial_messages(shared_prefix=shared_prefix, task=task)
    answered = False
    failed_in_a_row = 0
    made: set[tuple[str, tuple[tuple[str, str], ...]]] = set()  # the calls so far, to stop a loop
    budget_end = len(steps) + budget
    while len(steps) < budget_end and not past_deadline(box.context):
        try:
            # Decoding is held to this step's possible calls: its tools, its files, targets not analyzed yet.
            schema = tool_call_json_schema(
                paths=box.targets, analyzer_paths=[t for t in box.targets if t not in box.analyzed]
            )
            call = llm.complete_json(messages, ToolCall, purpose=f"reviewer.{box.spec.name}", json_schema=schema)
        except LLMOutputError as exc:
            # One unusable answer (an over-long title, broken JSON twice) is one lost step; the next
            # turn may well be fine, and the rest of the budget is still the model's.
            failed = ToolOutcome(f"model answer unusable: {exc}", valid=False)
            steps.append(_step(len(steps), "model_error", failed, {}))
            failed_in_a_row += 1
            if failed_in_a_row >= MAX_FAILED_STEPS_IN_A_ROW:
                why = f"{failed_in_a_row} unusable answers in a row"
                return answered, f"model failed at step {len(steps)} ({why}; LLMOutputError: {exc}); {STANDS}"
            messages += failed_step_messages(str(exc), steps_left=budget_end - len(steps))
            continue
        except LLMError as exc:
            # The server is gone or refuses the request: further calls would fail the same way.
            return answered, f"model failed at step {len(steps) + 1} ({type(exc).__name__}: {exc}); {STANDS}"
        answered = True
        failed_in_a_row = 0
        signature = (call.tool, tuple(sorted((k, repr(v)) for k, v in call.args().items())))
        if signature in made:
            return answered, f"model repeated its {call.tool} call at step {len(steps) + 1}; its steps end there"
        made.add(signature)
        outcome = box.execute(call)
        steps.append(_step(len(steps), call.tool, outcome, call.args()))
        if call.tool == "finish":
            break
        messages += [
            call_message(call),
            observation_message(call.tool, outcome.observation, steps_left=budget_end - len(steps)),
        ]
    return answered, None


def run_loop(
    spec: ReviewerSpec,
    context: ReviewContext,
    plan: PlanItem,
    llm: LLMPort | None,
    *,
    shared_prefix: str | None,
    model_step_budget: int | None = None,
) -> ReviewerResult:
    """`model_step_budget` (default: the plan's) bounds the model's own steps; a review that runs
    several executions splits its budget among them, while each still runs every analyzer. 0 runs
    the analyzers only (a reviewer the model's plan left out, run for its static findings)."""
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
    analyzer_results = _run_analyzers(box, steps, plan.step_budget)
    if llm is not None and targets and model_step_budget != 0:
        used_model, failure = _run_model(
            box,
            steps,
            llm,
            plan=plan,
            shared_prefix=shared_prefix or render_review_prefix(context),
            analyzer_results=analyzer_results,
            budget=plan.step_budget if model_step_budget is None else max(1, model_step_budget),
        )
        if failure is not None:
            notes.append(failure)
    unreviewed = [t for t in targets if t not in box.looked_at]
    cut_short = dict(box.cut_short)
    if unreviewed:
        if past_deadline(context):
            why = "review deadline reached"
            cut_short.update(dict.fromkeys(unreviewed, f"{why} before the {spec.name} reviewer got to it"))
        else:
            why = f"step budget {plan.step_budget} used up"
        notes.append(f"{why}; not reviewed: {_named(unreviewed)}")
    notes += [f"{path}: {why}" for path, why in box.cut_short.items()]
    notes += list(dict.fromkeys(box.problems))
    return ReviewerResult(
        reviewer=spec.name,
        findings=sorted(box.findings.values(), key=lambda f: (targets.index(f.path), f.line)),
        steps=steps,
        used_model=used_model,
        error="; ".join(notes) or None,
        unreviewed_paths=unreviewed,
        cut_short=cut_short,
    )
