"""The verifier: every finding gets a verdict (REAL, FALSE_POSITIVE, DUPLICATE, NEEDS_HUMAN_REVIEW)
and a reason that names its evidence, before anything is reported.

Deterministic checks come first, because they are cheap and cannot be argued with by text in the
merge request:

1. the fingerprint is new (in this run, among this MR's open threads);
2. the evidence is in the file at head, line for line, and the finding moves to where it is;
   that line is in or next to a changed hunk, and, for a rule that judges a line alone, its code is
   new: not the code of a line the merge request deleted with only a comment, indentation or place
   changed (`agent.verdicts.unchanged`), nor, for ruff's rules, a complaint the base version of the
   file already had in the same scope (`agent.verdicts.preexisting`);
3. the head tree supports the claim (`agent.verdicts.claims`): the "removed" symbol is gone, the
   "untested" code has no test, the injection sink receives more than constants;
4. this project's people have not rejected this finding, its rule or its path (`agent.verdicts.feedback`:
   people, not votes; a high or critical security finding they rejected goes to a human instead);
5. one root cause reported by several analyzers is one finding (`agent.verdicts.duplicates`);
6. a low-confidence rule goes to a human, listed in the summary rather than posted as a thread; so
   does a rule that was mostly wrong on real history it had not been tuned to, until this project's
   people accept it (`agent.verdicts.track_record`); and, by default (`posting="proven"`), so does
   every rule that has not earned a thread: not yet proven right on code it was not tuned on, not a
   defect in the text itself, not request data reaching an injection sink (`agent.verdicts.posting`);
7. a ruff finding that repeats the project's own habit — the same rule, on the same name where it names
   one, in at least three other files of the same kind the change did not touch — goes to a human:
   the project's convention, not the change's slip (`agent.verdicts.convention`).

Then agreement across strategy executions, when a caller supplies it; then an optional model
judgment, which sees the diff hunk and may only demote a finding, never promote one; then
calibration from feedback: a reviewer/category pair whose findings people mostly reject (several
people, not one person's many votes) goes to a human instead of straight to a thread.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from agent.diff import DiffIndex
from agent.verdicts.claims import HeadTree, removed_symbol_still_defined, tested_after_all
from agent.verdicts.convention import ProjectConventions, project_convention
from agent.verdicts.duplicates import MODEL_RULES, claimed_family, group_root_causes, rule_name
from agent.verdicts.evidence import Anchor, anchor_evidence, anchored
from agent.verdicts.feedback import MIN_PEOPLE, PeopleVotes, rejected_before, rejected_by_people
from agent.verdicts.judge import ModelJudgment, judge_messages
from agent.verdicts.posting import Posting, injection_taint, unbound_name, unearned_voice
from agent.verdicts.preexisting import base_python, preexisting_flow, preexisting_ruff
from agent.verdicts.sinks import sink_gets_constants
from agent.verdicts.track_record import Record, accepted_by_people, unproven_rule, usually_wrong
from agent.verdicts.unchanged import DeletedCode, unchanged_code
from reviewers.analyzers.secrets import token_digest
from reviewers.kernel.contracts import SEVERITY_RANK, Finding, LLMPort, Workspace
from reviewers.kernel.errors import LLMError, LLMOutputError

Verdict = Literal["REAL", "FALSE_POSITIVE", "DUPLICATE", "NEEDS_HUMAN_REVIEW"]
VERDICTS: tuple[Verdict, ...] = ("REAL", "FALSE_POSITIVE", "DUPLICATE", "NEEDS_HUMAN_REVIEW")

HUNK_SLACK = 3  # a finding may sit on a line next to the change (e.g. the def above an added body)
CALIBRATION_MIN_VOTES = 5  # fewer votes say nothing about a reviewer's precision
CALIBRATION_MIN_RATE = 0.35  # below this accepted share, a finding goes to a human first
MAX_PARALLEL_JUDGMENTS = 8  # model judgments are independent; a model server batches them

"""Agreement across strategy executions: a verdict and reason for a finding from how many
executions reported it, or None to leave it alone (analyzer findings, a single execution)."""


@dataclass(frozen=True)
class VerifiedFinding:
    finding: Finding
    verdict: Verdict
    reason: str


@dataclass
class VerifierInputs:
    """What the verifier knows beyond the findings themselves."""

    workspace: Workspace
    diff_index: DiffIndex
    open_fingerprints: set[str] = field(default_factory=set)  # already posted on this MR
    # fingerprint → people who rejected it (more 👎 than 👍 among people)
    rejected_fingerprints: Mapping[str, int] = field(default_factory=dict)
    acceptance: Mapping[tuple[str, str], tuple[int, int, int]] = field(
        default_factory=dict
    )  # (reviewer, category) → (findings accepted, findings rejected, people who rejected them)
    people_votes: PeopleVotes = field(default_factory=PeopleVotes)  # people 👎/👍 by rule and by path
    min_severity: str = "low"
    # rule → its record on held-out history; None: the record shipped with reviewloop
    track_record: Mapping[str, Record] | None = None
    # "proven": only rules that earned a thread post (`agent.verdicts.posting`); "all": every rule no
    # record holds back
    posting: Posting = "proven"


def _where(finding: Finding) -> str:
    return f"{finding.path}:{finding.line}"


def _passed(finding: Finding, moved_from: int | None) -> str:
    moved = f" (moved from line {moved_from}, where it was reported)" if moved_from is not None else ""
    return f"evidence found at {_where(finding)} at head{moved}, inside the change"


def _check(
    finding: Finding, inputs: VerifierInputs, seen: set[str], tree: HeadTree, deleted: DeletedCode
) -> VerifiedFinding | tuple[Finding, str]:
    """A verdict for a finding that fails a deterministic check, else the finding anchored on its
    evidence with the reason it passed."""
    fp = finding.fingerprint
    if fp in seen:
        return VerifiedFinding(finding, "DUPLICATE", f"the same finding ({fp}) was already reported in this review")
    if fp in inputs.open_fingerprints:
        return VerifiedFinding(finding, "DUPLICATE", f"already posted on this merge request ({fp})")
    head_text = tree.text(finding.path)
    anchor = anchor_evidence(finding, head_text)
    if not isinstance(anchor, Anchor):
        return VerifiedFinding(finding, "FALSE_POSITIVE", anchor.reason)
    placed = anchored(finding, anchor)
    if not inputs.diff_index.in_or_near_hunk(placed.path, placed.line, slack=HUNK_SLACK):
        return VerifiedFinding(placed, "FALSE_POSITIVE", f"{_where(placed)} is not in or next to the change")
    change = inputs.diff_index.file(placed.path)
    unchanged = (
        unchanged_code(placed, head_text=head_text, diff_index=inputs.diff_index, deleted=deleted)
        or preexisting_ruff(placed, head_text=head_text, change=change)
        or preexisting_flow(placed, head_text=head_text, change=change, read_file=tree.text)
    )
    if unchanged:
        return VerifiedFinding(placed, "FALSE_POSITIVE", unchanged)
    contradicted = (
        removed_symbol_still_defined(placed, tree)
        or tested_after_all(placed, tree)
        or sink_gets_constants(placed, family=claimed_family(placed), head_text=head_text)
    )
    if contradicted:
        return VerifiedFinding(placed, "FALSE_POSITIVE", contradicted)
    rejected = rejected_before(placed, inputs.rejected_fingerprints) or rejected_by_people(placed, inputs.people_votes)
    if rejected:
        return VerifiedFinding(placed, *rejected)
    return placed, _passed(placed, finding.line if placed.line != finding.line else None)


def _fold_duplicates(passed: list[tuple[Finding, str]]) -> tuple[list[tuple[Finding, str]], list[VerifiedFinding]]:
    """One lead per root cause (naming the others), and a DUPLICATE verdict for each other report."""
    reasons = {id(f): why for f, why in passed}
    leads: list[tuple[Finding, str]] = []
    duplicates: list[VerifiedFinding] = []
    for lead, others in group_root_causes([f for f, _ in passed]):
        why = reasons[id(lead)]
        if others:
            names = ", ".join(dict.fromkeys(rule_name(o) for o in others))
            why = f"{why}; also reported by {names}"
            lead = lead.model_copy(update={"body": f"{lead.body} (Also reported by {names}.)"[:4000]})
            for other in others:
                duplicates.append(
                    VerifiedFinding(
                        other,
                        "DUPLICATE",
                        f"same root cause as {rule_name(lead)} at {_where(lead)}; kept as one finding there, "
                        f"also reported by {rule_name(other)}",
                    )
                )
        leads.append((lead, why))
    return leads, duplicates


MAX_PLACES_NAMED = 10  # the other files a repeated finding's thread names; the count says the rest


def _fold_repeats(items: list[tuple[Finding, str]]) -> tuple[list[tuple[Finding, str]], list[VerifiedFinding]]:
    """One thread for one mistake repeated: the same rule saying the same thing (an import one cleanup
    left unused in seventeen modules, one pasted zero-width space in two lists of a file) is posted
    once, at its first place, naming the others; each other place is a DUPLICATE of it. A security
    finding keeps a thread at every place: each sink is its own fix and its own risk; but one
    credential pasted in several places (a token in a config file and the README that copies it)
    is one leak and one revocation, so the same vendor token is said once. A model's findings are
    each their own."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for n, (finding, _) in enumerate(items):
        if finding.rule in MODEL_RULES:
            continue
        if finding.category != "security":
            groups.setdefault((finding.rule, finding.title, ""), []).append(n)
        elif finding.rule == "secrets:known-prefix" and (digest := token_digest(finding.evidence)) is not None:
            groups.setdefault((finding.rule, finding.title, digest), []).append(n)
    followers = {  # the first place of a repeat → the other places (in other files or the same one)
        members[0]: members[1:] for members in groups.values() if len(members) > 1
    }
    folded = {n for others in followers.values() for n in others}
    kept: list[tuple[Finding, str]] = []
    repeats: list[VerifiedFinding] = []
    for n, (finding, why) in enumerate(items):
        if n in folded:
            continue
        others = [items[m][0] for m in followers.get(n, [])]
        if others:
            places = ", ".join(_where(o) for o in others[:MAX_PLACES_NAMED])
            more = f" and {len(others) - MAX_PLACES_NAMED} more" if len(others) > MAX_PLACES_NAMED else ""
            finding = finding.model_copy(
                update={"body": f"{finding.body} The same in {len(others)} other place(s): {places}{more}."[:4000]}
            )
            why = f"{why}; repeated at {len(others)} other place(s), said once"
            repeats += [
                VerifiedFinding(
                    o, "DUPLICATE", f"the same {rule_name(o)} finding as at {_where(finding)}: one thread for one cause"
                )
                for o in others
            ]
        kept.append((finding, why))
    return kept, repeats


def calibrate(finding: Finding, acceptance: Mapping[tuple[str, str], tuple[int, int, int]]) -> str | None:
    """A reason to send the finding to a human when its reviewer/category is mostly rejected, by at
    least MIN_PEOPLE people: one person's many 👎 do not lower a reviewer's standing."""
    accepted, rejected, rejecters = acceptance.get((finding.reviewer, finding.category), (0, 0, 0))
    votes = accepted + rejected
    if votes >= CALIBRATION_MIN_VOTES and accepted / votes < CALIBRATION_MIN_RATE and rejecters >= MIN_PEOPLE:
        return (
            f"{finding.reviewer}/{finding.category} findings were accepted {accepted} of {votes} times"
            f" ({rejecters} people rejected them)"
        )
    return None


def agreement_shortfall(finding: Finding) -> str | None:
    """Why a model-only finding goes to a human for want of agreement: fewer of the review's independent
    executions reported it than required (`agent.agreement` annotates; None when not measured)."""
    a = finding.agreement
    if a is None or finding.rule != "llm" or a.support >= a.required:
        return None
    return f"reported by {a.support} of {a.executions} independent reviews (different strategies); {a.required} needed"


JUDGMENT_UNAVAILABLE = "model judgment unavailable"  # a verdict reason's words when the judge could not answer


@dataclass
class _ModelGone:
    """The first judgment that found the model unreachable (or refusing), so the rest of the review's
    judgments do not each wait out the same timeout: a model that never answers would otherwise hold
    the verifier for (findings / MAX_PARALLEL_JUDGMENTS) × the model's timeout."""

    failure: str | None = None


def _judge(
    finding: Finding, llm: LLMPort, diff_index: DiffIndex, gone: _ModelGone | None = None
) -> tuple[Verdict, str] | None:
    """The model's demotion of a finding, None to keep it, or what stands when the model failed: an
    analyzer's finding stays REAL with a note (static findings never depend on the model), a model's
    own finding goes to a human (nothing but the model vouches for it)."""
    failure = gone.failure if gone is not None else None
    if failure is None:
        try:
            judged = llm.complete_json(judge_messages(finding, diff_index), ModelJudgment, purpose="verify")
        except LLMError as exc:
            failure = type(exc).__name__
            if gone is not None and not isinstance(exc, LLMOutputError):  # one bad answer is not a gone model
                gone.failure = failure
    if failure is not None:
        failed = f"{JUDGMENT_UNAVAILABLE} ({failure})"
        if finding.rule == "llm":
            return "NEEDS_HUMAN_REVIEW", f"{failed}: a model's finding no judgment confirmed goes to a human"
        return "REAL", failed
    if judged.verdict == "REAL":  # the model may only demote
        return None
    if finding.rule != "llm" and judged.verdict == "FALSE_POSITIVE":
        # A static analyzer's finding rests on code the model cannot change; a model (perhaps steered
        # by text in the merge request) may send it to a human, never make it disappear.
        return "NEEDS_HUMAN_REVIEW", f"the model disputes a {finding.rule or 'static'} finding: {judged.reason}"
    return judged.verdict, f"model: {judged.reason}"


def _low_confidence(finding: Finding) -> str | None:
    if finding.confidence != "low":
        return None
    return f"{rule_name(finding)} is a low-confidence rule: listed for a human in the summary, not posted as a thread"


def _unearned(finding: Finding, inputs: VerifierInputs) -> str | None:
    if inputs.posting == "all":
        return None
    # An empty record switches holding back off (Settings.hold_by_track_record); what proves a rule
    # is still the shipped record.
    return unearned_voice(finding, inputs.people_votes, inputs.track_record or None)


def _convention(finding: Finding, inputs: VerifierInputs, conventions: ProjectConventions) -> str | None:
    if accepted_by_people(finding.rule, inputs.people_votes):
        return None  # this project's people want the rule's threads, habit or not
    return project_convention(finding, conventions)


def verify_findings(
    findings: Sequence[Finding], inputs: VerifierInputs, llm: LLMPort | None = None
) -> list[VerifiedFinding]:
    """A verdict with a reason for every finding, highest severity first."""
    out: list[VerifiedFinding] = []
    passed: list[tuple[Finding, str]] = []
    seen: set[str] = set()
    changes = [c for c in (inputs.diff_index.file(p) for p in inputs.diff_index.paths()) if c is not None]
    tree = HeadTree(inputs.workspace, changes=changes)
    deleted = DeletedCode(changes)
    conventions = ProjectConventions(
        inputs.workspace,
        changed=[c.path for c in changes],
        read_text=tree.text,
        base_text=lambda path: base_python(tree.text(path), inputs.diff_index.file(path)),
    )
    ordered = sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.path, f.line))
    for finding in ordered:
        checked = _check(finding, inputs, seen, tree, deleted)
        seen.add(finding.fingerprint)
        if isinstance(checked, VerifiedFinding):
            out.append(checked)
        else:
            passed.append(checked)
    leads, duplicates = _fold_duplicates(passed)
    out += duplicates
    to_judge: list[tuple[Finding, str]] = []
    for finding, why in leads:
        demoted = (
            _low_confidence(finding)
            # an F821 of the shape that is broken as written is not the shape its record was made of; request
            # data reaching an injection sink is a REAL high by design (issue 22), as the posting tier has it
            or (
                None
                if unbound_name(finding) or injection_taint(finding)
                else unproven_rule(finding, inputs.people_votes, inputs.track_record)
            )
            or _unearned(finding, inputs)
            or _convention(finding, inputs, conventions)
        )
        if demoted is not None:
            out.append(VerifiedFinding(finding, "NEEDS_HUMAN_REVIEW", demoted))
            continue
        short = agreement_shortfall(finding)
        if short is not None:
            out.append(VerifiedFinding(finding, "NEEDS_HUMAN_REVIEW", short))
            continue
        to_judge.append((finding, why))
    to_judge, repeats = _fold_repeats(to_judge)
    out += repeats
    judgments: list[tuple[Verdict, str] | None] = [None] * len(to_judge)
    if llm is not None and to_judge:
        # Each judgment runs in the caller's context (a copy per thread), so its span joins the review's trace.
        contexts = [contextvars.copy_context() for _ in to_judge]
        gone = _ModelGone()
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_JUDGMENTS, len(to_judge))) as pool:
            judgments = list(
                pool.map(
                    lambda ctx, item: ctx.run(_judge, item[0], llm, inputs.diff_index, gone),
                    contexts,
                    to_judge,
                )
            )
    for (finding, why), judged in zip(to_judge, judgments, strict=True):
        verdict: Verdict = "REAL"
        reason = why
        if judged is not None:
            verdict = judged[0]
            reason = f"{why}; {judged[1]}" if verdict == "REAL" else judged[1]
        if verdict == "REAL":
            calibrated = calibrate(finding, inputs.acceptance)
            if calibrated is not None:
                verdict, reason = "NEEDS_HUMAN_REVIEW", calibrated
        out.append(VerifiedFinding(finding, verdict, reason))
    out = [_fold_usually_wrong(v, inputs) for v in out]
    return sorted(out, key=lambda v: (-SEVERITY_RANK[v.finding.severity], v.finding.path, v.finding.line))


def _fold_usually_wrong(v: VerifiedFinding, inputs: VerifierInputs) -> VerifiedFinding:
    """A listed finding of a rule that is usually wrong here, marked to be counted in the summary
    rather than listed (`track_record.usually_wrong`); every other verdict as it was."""
    if v.verdict != "NEEDS_HUMAN_REVIEW":
        return v
    why = usually_wrong(v.finding, inputs.people_votes, inputs.track_record)
    return v if why is None else VerifiedFinding(v.finding, v.verdict, f"{v.reason}; {why}")


def below_min_severity(finding: Finding, min_severity: str) -> bool:
    floor = next((rank for name, rank in SEVERITY_RANK.items() if name == min_severity), 1)
    return SEVERITY_RANK[finding.severity] < floor
