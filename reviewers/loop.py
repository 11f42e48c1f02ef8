"""The bounded tool-using loop every reviewer runs, with or without a model.

The analyzers are not rationed: they read every changed file this reviewer reads (that the
repository configuration wants, that exist at head), in diff order, before any model step and
outside any step budget, and report what they find — with or without a model, whatever the plan
says. Their findings never depend on what a model does (a model that finishes at once, or is
steered by text in the code to do so, loses none of them). They run as a pass of their own
(`run_analyzer_pass`; the review graph runs it for every reviewer before the strategy is asked of a
model, under the analyzers' own deadline), so a model that is slow or never answers cannot use up
their time; only their own deadline stops them, and the files it cut off are named.

A file the full analyzer must not read — generated or minified, over `MAX_ANALYZED_BYTES`, not
UTF-8, or one the workspace cannot read as text (over its own size limit) — gets what is safe
(`ReviewerSpec.safe_analyzer`: the security reviewer's secrets scan, on its text decoded with
replacement or on the diff's new side) and is named in `not_reviewed` with the reason.

Targets are the changed files the plan item focuses on (in its order; a focus entry may be a path,
a glob or a directory), or every analyzed file in diff order when it names none: the plan decides
where the model's steps go, never which files the analyzers see.

With a model, it then adds: up to `plan.step_budget` steps, each a `ToolCall` the model writes
(validated through `LLMPort.complete_json` and decoded under that step's `tool_call_json_schema`:
its tools, its files), starting from what the analyzers found. A call the tools reject is an
invalid step; an answer that fails validation twice (`LLMOutputError`) is a failed step — each
costs one step and the loop goes on with the rest of the budget. Only a model that cannot be
reached (or refuses the request), that fails `MAX_FAILED_STEPS_IN_A_ROW` steps in a row, or that
repeats a call it already made (a small model loops: the same observation comes back and it asks
again) ends the model's part early; `error` says so.
Every tool result goes back to the model fenced as untrusted data (`reviewers.prompts`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, Field

from reviewers.analyzers.bumps import bumped_copy, bumped_packages
from reviewers.analyzers.changed_file import ChangedFile, new_side_text, unanalyzable
from reviewers.kernel.contracts import (
    CoverageReason,
    FileChange,
    Finding,
    LLMPort,
    NotReviewed,
    PlanItem,
    ReviewContext,
    ReviewerName,
    ReviewerResult,
    Step,
    StepTool,
    merge_not_reviewed,
)
from reviewers.kernel.errors import InputError, LLMError, LLMOutputError
from reviewers.prompts import (
    call_message,
    failed_step_messages,
    initial_messages,
    observation_message,
    render_review_prefix,
    render_task,
)
from reviewers.reviewer import ReviewerSpec, findings_from_issues
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


EXCLUDED_DETAIL = "excluded by the repository's configuration (.reviewloop.toml include/exclude)"


@dataclass(frozen=True, slots=True)
class SetAside:
    """A changed file the full analyzer does not read: why, and the text a safe scan may read
    (None: there is none)."""

    path: str
    reason: CoverageReason
    detail: str
    text: str | None


def _set_aside(
    change: FileChange,
    text: str | None,
    unreadable: tuple[CoverageReason, str] | None,
    bumped: dict[str, tuple[str, str]] | None = None,
) -> SetAside | None:
    """Why the full analyzer must not read this file (None: it may). `bumped`: the packages whose
    pins the change moves (`bumped_packages`), whose kept copies are third-party code."""
    if text is None:
        if unreadable is None:
            return None  # not at head, nothing to read: a pure rename or mode change
        reason, detail = unreadable
        if reason == "binary":
            return SetAside(change.path, reason, detail, None)
        new_side = new_side_text(change) if change.hunks else None
        return SetAside(change.path, reason, detail, new_side)
    unreadable = unanalyzable(change.path, text)
    if unreadable is None and bumped and (copy := bumped_copy(change.path, bumped)) is not None:
        return SetAside(change.path, "vendored", f"third-party code the change updates ({copy})", text)
    return None if unreadable is None else SetAside(change.path, *unreadable, text)


def reviewable_paths(spec: ReviewerSpec, context: ReviewContext) -> tuple[list[str], list[SetAside]]:
    """(changed files this reviewer's analyzer reads in full, in diff order; those it must not,
    with why)."""
    eligible: list[str] = []
    aside: list[SetAside] = []
    bumped = bumped_packages(context.files)
    for f in context.files:
        if f.status == "deleted" or f.is_binary or not spec.supports(f.path):
            continue
        if not context.config.wants(f.path):
            # the repository's include/exclude: still scanned for secrets and named, never silently skipped
            if spec.safe_analyzer is not None:
                aside.append(SetAside(f.path, "excluded", EXCLUDED_DETAIL, context.workspace.read_file(f.path)))
            continue
        text = context.workspace.read_file(f.path)
        skipped = _set_aside(f, text, context.workspace.unreadable_reason(f.path) if text is None else None, bumped)
        if skipped is not None:
            aside.append(skipped)
        elif text is not None:
            eligible.append(f.path)
    return eligible, aside


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


def _scan_set_aside(box: Toolbox, aside: list[SetAside]) -> list[NotReviewed]:
    """The safe scan (if this reviewer has one) on each file set aside; each is named with what was
    and was not done."""
    named: list[NotReviewed] = []
    for skipped in aside:
        done = f"not analyzed by the {box.spec.name} reviewer"
        change = box.context.changed(skipped.path)
        if box.spec.safe_analyzer is not None and skipped.text is not None and change is not None:
            file = ChangedFile(change, skipped.text)
            issues, done = box.spec.safe_analyzer(file)
            box._add(findings_from_issues(box.spec.name, file, issues))
        named.append(NotReviewed(path=skipped.path, reason=skipped.reason, detail=f"{skipped.detail}; {done}"))
    return named


def _run_analyzers(box: Toolbox, steps: list[Step], paths: list[str]) -> dict[str, str]:
    """The fixed executor: one `run_analyzer` step per file, in the change's own order, while the
    review's deadline lasts. Returns each file's analyzer output, for the model's first prompt."""
    seen: dict[str, str] = {}
    for path in paths:
        if past_deadline(box.context):
            break
        outcome = box.analyze(path)
        steps.append(_step(len(steps), "run_analyzer", outcome, {"path": path}))
        seen[path] = outcome.observation
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
    if past_deadline(box.context):
        return answered, f"the model's deadline passed before its first step; {STANDS}"
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


class AnalyzerPass(BaseModel):
    """What one reviewer's analyzers did on the changed files it reads, before any model step: the
    findings, the `run_analyzer` steps, each file's analyzer output (for the model's first prompt),
    and what was not analyzed in full. The review graph runs this pass for every reviewer before the
    strategy is asked of a model, under a deadline of its own, so no model — slow, hung, or steered
    by the change — can keep the analyzers from running (issue 40: a strategy step that used the
    whole deadline left a review with no findings); `run_loop` then adds the model's steps to it."""

    reviewer: ReviewerName
    eligible: list[str] = Field(default_factory=list)  # the files the analyzer reads in full, diff order
    set_aside: list[str] = Field(default_factory=list)  # those it must not (their safe scan ran)
    to_analyze: list[str] = Field(default_factory=list)  # what the pass was asked to analyze
    analyzed: list[str] = Field(default_factory=list)
    observations: dict[str, str] = Field(default_factory=dict)  # path → the analyzer's output
    findings: list[Finding] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    not_reviewed: list[NotReviewed] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def run_analyzer_pass(
    spec: ReviewerSpec, context: ReviewContext, *, choose: Callable[[list[str]], list[str]] | None = None
) -> AnalyzerPass:
    """The analyzers of one reviewer on every changed file it reads (or on what `choose` picks of
    them: the replay environment's analyzer budget), and the safe scan on the files set aside."""
    eligible, aside = reviewable_paths(spec, context)
    to_analyze = eligible if choose is None else choose(eligible)
    if spec.prefetch is not None and to_analyze:
        spec.prefetch(context, to_analyze)
    box = Toolbox(spec, context, [])
    steps: list[Step] = []
    notes: list[str] = []
    not_reviewed = _scan_set_aside(box, aside)
    if aside:
        notes.append(
            f"read in part only ({', '.join(sorted({a.reason for a in aside}))}): {_named([a.path for a in aside])}"
        )
    observations = _run_analyzers(box, steps, to_analyze)
    unreached = [p for p in to_analyze if p not in box.analyzed]
    if unreached:
        why = f"the review deadline came before the {spec.name} reviewer's analyzers reached it"
        not_reviewed += [NotReviewed(path=p, reason="deadline", detail=why) for p in unreached]
        notes.append(f"review deadline reached; not analyzed: {_named(unreached)}")
    not_reviewed += box.not_reviewed
    notes += [f"{n.path}: {n.describe()}" for n in box.not_reviewed]
    return AnalyzerPass(
        reviewer=spec.name,
        eligible=eligible,
        set_aside=[a.path for a in aside],
        to_analyze=to_analyze,
        analyzed=list(box.analyzed),
        observations=observations,
        findings=list(box.findings.values()),
        steps=steps,
        not_reviewed=not_reviewed,
        notes=notes,
    )


def run_loop(
    spec: ReviewerSpec,
    context: ReviewContext,
    plan: PlanItem,
    llm: LLMPort | None,
    *,
    shared_prefix: str | None,
    model_step_budget: int | None = None,
    analyzer_budget: int | None = None,
    prior: AnalyzerPass | None = None,
) -> ReviewerResult:
    """`model_step_budget` (default: the plan's) bounds the model's own steps; a review that runs
    several executions splits its budget among them, while each still has every analyzer's findings.
    0 runs the analyzers only (a reviewer the model's plan left out, run for its static findings).

    `prior`: this reviewer's analyzer pass, already run (`run_analyzer_pass`; the review graph runs
    it before the strategy); None runs it here first.

    `analyzer_budget` is the learning loop's replay environment's model of limited review capacity,
    never serving's: the analyzers then read only the plan's first that many targets (in the change's
    order), and every other file is named with the reason "budget"."""
    if prior is None:
        choose = None
        if analyzer_budget is not None:

            def choose(eligible: list[str]) -> list[str]:
                chosen = set(plan_targets(plan, eligible)[0][: max(0, analyzer_budget)])
                return [p for p in eligible if p in chosen]

        prior = run_analyzer_pass(spec, context, choose=choose)
    elif prior.reviewer != spec.name:
        raise InputError(f"the analyzer pass is the {prior.reviewer} reviewer's, not {spec.name}'s")
    eligible = prior.eligible
    targets, unmatched = plan_targets(plan, eligible)
    box = Toolbox(spec, context, targets)
    box.findings = {f.fingerprint: f for f in prior.findings}
    box.analyzed = list(prior.analyzed)
    box.looked_at = set(prior.analyzed)
    steps = list(prior.steps)
    notes = list(prior.notes)
    used_model = False
    model_error: str | None = None
    if plan.focus_paths and not targets:
        notes.append(f"no focus path is a changed file the {spec.name} reviewer reads: {', '.join(unmatched)}")
    if llm is not None and targets and model_step_budget != 0:
        # the model's own files first, so what it is asked about is not crowded out by the rest
        seen = prior.observations
        results = [seen[p] for p in targets if p in seen] + [o for p, o in seen.items() if p not in targets]
        used_model, failure = _run_model(
            box,
            steps,
            llm,
            plan=plan,
            shared_prefix=shared_prefix or render_review_prefix(context),
            analyzer_results=results,
            budget=plan.step_budget if model_step_budget is None else max(1, model_step_budget),
        )
        if failure is not None:
            notes.append(failure)
            model_error = failure
    # a file the deadline kept from the analyzers that the model then had analyzed is no longer missing
    not_reviewed = [n for n in prior.not_reviewed if not (n.reason == "deadline" and n.path in box.analyzed)]
    over_budget = [p for p in eligible if p not in prior.to_analyze]
    if over_budget:
        why = f"the replay environment's analyzer budget of {analyzer_budget} file(s) did not reach it"
        not_reviewed += [NotReviewed(path=p, reason="budget", detail=why) for p in over_budget]
    not_reviewed += box.not_reviewed
    notes += [f"{n.path}: {n.describe()}" for n in box.not_reviewed]
    order = {p: i for i, p in enumerate([*eligible, *prior.set_aside])}
    return ReviewerResult(
        reviewer=spec.name,
        findings=sorted(box.findings.values(), key=lambda f: (order.get(f.path, len(order)), f.line)),
        steps=steps,
        used_model=used_model,
        error="; ".join(notes) or None,
        model_error=model_error,
        not_reviewed=merge_not_reviewed(not_reviewed),
    )
