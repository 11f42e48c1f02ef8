"""Posting one review's results to a merge request, idempotently, and retiring outdated threads.

Every body we post ends with a hidden marker naming the finding's fingerprint (or the summary), and
every post is recorded the moment it succeeds. So a retried job, a re-run or a crash halfway finds
what is already on GitLab, by the store and by the markers in our own notes, and posts only what is
missing. REAL findings become positioned discussions (GitLab's rules: `new_line` alone on an added
line, `old_line` and `new_line` on an unchanged one, both paths always); a line the diff does not
show, or a position GitLab rejects, becomes a thread without a position that quotes `path:line`
and the evidence, flagged as a fallback. NEEDS_HUMAN_REVIEW findings are listed in the one summary
note (those sharing a rule and a reason under one entry), which is created once and then edited in
place. Model and reviewer text is neutralised.

Each merge request gets a comment budget (`max_discussions` threads, from `.reviewloop.toml`): REAL
findings are ranked by severity, then confidence, and those past the budget are listed briefly in
the summary instead. Our open threads already on the merge request count against the budget
first, so a re-run or a new push never takes the total past it. Critical findings post whatever
the budget (`ALWAYS_POSTED`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from agent.context import NotReviewed
from agent.diff import DiffIndex, quote_path
from agent.gitlab.models import DiffPosition, DiffVersions, Discussion, PostedNote, ProjectRef
from agent.sanitize import (
    SUMMARY_MARKER,
    code_block,
    has_summary_marker,
    hidden_marker,
    inline_code,
    neutralise,
    parse_markers,
)
from agent.suggestions import applies_cleanly, suggestion_block
from agent.verdicts.track_record import folded, folded_line
from agent.verifier import Verdict
from reviewers.fingerprint import make_fingerprint, normalise_evidence
from reviewers.kernel.contracts import SEVERITY_RANK, FileChange, Finding, Workspace
from reviewers.kernel.errors import PositionRejectedError

OUTDATED_MARKER = "<!-- reviewloop:outdated -->"
MAX_SUMMARY_CHARS = 30_000  # a summary is ours plus short quoted titles; GitLab allows far more
MAX_EVIDENCE_CHARS = 1500
MAX_NOT_REVIEWED_LISTED = 50  # the rest are counted: the full list is in the review's record and reports
# Findings for a person that share a rule and a reason are one entry: the reason once, then up to this
# many places; the rest are counted (the full list is in the review's record and reports). A vendored
# library's upgrade can bring the same held-back rule twenty times, and twenty copies of one reason
# bury the findings that differ.
MAX_LISTED_PER_REASON = 10
DEFAULT_MAX_DISCUSSIONS = 10  # RepoConfig's default; a wall of threads gets skimmed or muted
CONFIDENCE_RANK = {"low": 0, "medium": 1, "high": 2}
# A cap on threads moves findings to the summary, never below these: a critical finding always posts,
# whatever `max_discussions` says (a budget of 0 must not hide a leaked key).
ALWAYS_POSTED = frozenset({"critical"})
FEEDBACK_HINT = "React with :thumbsup: or :thumbsdown: to tell reviewloop whether this helped."


class PublishingPlatform(Protocol):
    """What the publisher needs of a code host (`agent.gitlab.client.GitLabPlatform` provides it)."""

    def bot_user_id(self) -> int: ...

    def discussions(self, project: ProjectRef, iid: int) -> list[Discussion]: ...

    def post_positioned_discussion(
        self, project: ProjectRef, iid: int, *, body: str, position: DiffPosition
    ) -> PostedNote: ...

    def post_discussion(self, project: ProjectRef, iid: int, *, body: str) -> PostedNote: ...

    def post_note(self, project: ProjectRef, iid: int, *, body: str) -> int: ...

    def edit_note(self, project: ProjectRef, iid: int, note_id: int, *, body: str) -> None: ...

    def reply(self, project: ProjectRef, iid: int, discussion_id: str, *, body: str) -> int: ...

    def resolve_discussion(
        self, project: ProjectRef, iid: int, discussion_id: str, *, resolved: bool = True
    ) -> None: ...


class FindingToPublish(NamedTuple):
    finding_id: int
    finding: Finding
    verdict: Verdict
    reason: str


@dataclass(frozen=True, slots=True)
class PostedThread:
    """Where a fingerprint already lives on the merge request."""

    discussion_id: str
    note_id: int
    fallback: bool = False  # posted without a position


RecordPosted = Callable[[int, str, int, bool], None]
"""(finding_id, discussion_id, note_id, position_fallback) — called right after each post succeeds,
and for findings found already posted, so the store links every finding to its thread."""


@dataclass(frozen=True, slots=True)
class PublishedFinding:
    finding_id: int
    fingerprint: str
    discussion_id: str
    note_id: int
    fallback: bool
    reused: bool  # already on the merge request: recorded, not posted again


@dataclass
class PublishResult:
    published: list[PublishedFinding] = field(default_factory=list)
    needs_human: list[int] = field(default_factory=list)  # finding ids listed in the summary
    over_budget: list[int] = field(default_factory=list)  # REAL finding ids past the comment budget
    summary_note_id: int | None = None
    summary_created: bool = False
    summary_edited: bool = False

    @property
    def posted(self) -> list[PublishedFinding]:
        return [p for p in self.published if not p.reused]

    @property
    def reused(self) -> list[PublishedFinding]:
        return [p for p in self.published if p.reused]

    @property
    def fallbacks(self) -> list[PublishedFinding]:
        return [p for p in self.posted if p.fallback]


def fingerprint_of(finding: Finding) -> str:
    return finding.fingerprint or make_fingerprint(
        path=finding.path, category=finding.category, rule=finding.rule, evidence=finding.evidence, title=finding.title
    )


def position_for(finding: Finding, diff_index: DiffIndex, versions: DiffVersions) -> DiffPosition | None:
    """The position of a finding's line, or the first line of its range the diff shows; None when
    the diff shows none of them (the finding then goes to a fallback thread)."""
    change = diff_index.file(finding.path)
    if change is None or change.is_binary or change.collapsed:
        return None
    for line in range(finding.line, max(finding.line, finding.end_line) + 1):
        kind = diff_index.line_kind(finding.path, line)
        if kind is None:
            continue
        old_line = diff_index.old_line_for(finding.path, line) if kind == "context" else None
        if kind == "context" and old_line is None:
            continue
        return DiffPosition(
            base_sha=versions.base_sha,
            start_sha=versions.start_sha,
            head_sha=versions.head_sha,
            old_path=change.old_path,
            new_path=change.path,
            new_line=line,
            old_line=old_line,
        )
    return None


def _heading(finding: Finding, allowed_urls: Collection[str]) -> str:
    title = neutralise(finding.title.replace("\n", " "), allowed_urls=allowed_urls, max_chars=200)
    return f"**{finding.severity.upper()}** · {finding.category} · {title}"


def _footer(finding: Finding, fingerprint: str) -> str:
    rule = f" · {inline_code(finding.rule)}" if finding.rule else ""
    return f"_reviewloop · {finding.reviewer}{rule}._ {FEEDBACK_HINT}\n\n{hidden_marker(fingerprint)}"


def _evidence(finding: Finding) -> str:
    return code_block(finding.evidence[:MAX_EVIDENCE_CHARS]) if finding.evidence.strip() else ""


def discussion_body(
    finding: Finding,
    fingerprint: str,
    *,
    allowed_urls: Collection[str] = frozenset(),
    anchor_line: int | None = None,
    change: FileChange | None = None,
) -> str:
    """A positioned thread's text; with the thread's line (`anchor_line`) and the file's diff it carries
    the finding's exact fix as a suggestion block, when that applies cleanly there."""
    fix = finding.suggestion
    offer = fix is not None and anchor_line is not None and applies_cleanly(fix, change, anchor_line=anchor_line)
    parts = [
        _heading(finding, allowed_urls),
        neutralise(finding.body, allowed_urls=allowed_urls),
        suggestion_block(fix, anchor_line=anchor_line) if offer and fix and anchor_line else "",
        _footer(finding, fingerprint),
    ]
    return "\n\n".join(p for p in parts if p)


def fallback_body(finding: Finding, fingerprint: str, why: str, *, allowed_urls: Collection[str] = frozenset()) -> str:
    location = inline_code(f"{quote_path(finding.path, ascii_only=False)}:{finding.line}")
    parts = [
        _heading(finding, allowed_urls),
        f"On {location} ({why}):",
        _evidence(finding).rstrip("\n"),
        neutralise(finding.body, allowed_urls=allowed_urls),
        _footer(finding, fingerprint),
    ]
    return "\n\n".join(p for p in parts if p)


def _ours(discussions: Sequence[Discussion], bot_id: int) -> list[Discussion]:
    return [d for d in discussions if d.first_note.author_id == bot_id]


def threads_by_fingerprint(discussions: Sequence[Discussion], bot_id: int) -> dict[str, PostedThread]:
    """Our threads on the merge request keyed by the fingerprints their markers name. Markers in
    notes someone else wrote are ignored, so a pasted marker cannot suppress a finding."""
    out: dict[str, PostedThread] = {}
    for d in _ours(discussions, bot_id):
        for fp in parse_markers(d.first_note.body):
            out.setdefault(fp, PostedThread(d.id, d.first_note.id, fallback=d.first_note.position is None))
    return out


def rank_for_threads(item: FindingToPublish) -> tuple[int, int, str, int]:
    """The order in which REAL findings get the comment budget: most severe, most confident first."""
    f = item.finding
    return (-SEVERITY_RANK[f.severity], -CONFIDENCE_RANK[f.confidence], f.path, f.line)


def _listed(item: FindingToPublish, allowed_urls: Collection[str], *, with_reason: bool) -> str:
    f = item.finding
    title = neutralise(f.title.replace("\n", " "), allowed_urls=allowed_urls, max_chars=200)
    cwe = f" · {f.cwe}" if f.cwe else ""
    where = inline_code(f"{quote_path(f.path, ascii_only=False)}:{f.line}")
    line = f"- {where} {f.severity} · {f.category}{cwe} · {title}"
    if not with_reason:
        return line
    return f"{line} — {neutralise(item.reason.replace(chr(10), ' '), allowed_urls=allowed_urls, max_chars=300)}"


def _listed_by_reason(items: Sequence[FindingToPublish], allowed_urls: Collection[str]) -> list[str]:
    """One line per finding, except that findings of one rule with one reason are grouped: the
    reason once, then their places (at most `MAX_LISTED_PER_REASON`, the rest counted)."""
    groups: dict[tuple[str, str], list[FindingToPublish]] = {}
    for item in items:
        groups.setdefault((item.finding.rule, item.reason), []).append(item)
    lines: list[str] = []
    for (rule, reason), group in groups.items():
        if len(group) == 1:
            lines.append(_listed(group[0], allowed_urls, with_reason=True))
            continue
        why = neutralise(reason.replace(chr(10), " "), allowed_urls=allowed_urls, max_chars=300)
        lines.append(f"- {len(group)} × {inline_code(rule)} — {why}")
        lines += ["  " + _listed(item, allowed_urls, with_reason=False) for item in group[:MAX_LISTED_PER_REASON]]
        if len(group) > MAX_LISTED_PER_REASON:
            lines.append(f"  - … and {len(group) - MAX_LISTED_PER_REASON} more of {inline_code(rule)}")
    return lines


def summary_body(
    summary: str,
    needs_human: Sequence[FindingToPublish],
    *,
    over_budget: Sequence[FindingToPublish] = (),
    max_discussions: int = DEFAULT_MAX_DISCUSSIONS,
    not_reviewed: Sequence[NotReviewed] = (),
    allowed_urls: Collection[str] = frozenset(),
    model_steps_not_completed: Sequence[str] = (),
) -> str:
    parts = [neutralise(summary, allowed_urls=allowed_urls, max_chars=MAX_SUMMARY_CHARS)]
    if over_budget:
        lines = [
            f"**{len(over_budget)} more finding(s)** past this merge request's comment budget of "
            f"{max_discussions} threads (ranked below the posted ones):"
        ]
        lines += [_listed(item, allowed_urls, with_reason=False) for item in over_budget]
        parts.append("\n".join(lines))
    # a rule usually wrong here is counted in one line, not listed (`track_record.usually_wrong`)
    usually_wrong = folded_line([i.finding.rule for i in needs_human if folded(i.reason)])
    needs_human = [i for i in needs_human if not folded(i.reason)]
    if needs_human:
        lines = ["**Needs a human look** (not posted as threads):"]
        lines += _listed_by_reason(needs_human, allowed_urls)
        parts.append("\n".join(lines))
    if usually_wrong is not None:
        parts.append(f"**{usually_wrong[0].upper()}{usually_wrong[1:]}.**")
    if not_reviewed:
        lines = [f"**Not analyzed in full** ({len(not_reviewed)} file(s)):"]
        lines += [
            f"- {inline_code(quote_path(n.path, ascii_only=False))} — {neutralise(n.describe(), max_chars=300)}"
            for n in not_reviewed[:MAX_NOT_REVIEWED_LISTED]
        ]
        if len(not_reviewed) > MAX_NOT_REVIEWED_LISTED:
            lines.append(f"- … and {len(not_reviewed) - MAX_NOT_REVIEWED_LISTED} more")
        parts.append("\n".join(lines))
    if model_steps_not_completed:
        # our own words, though an error may quote a server's (an address, a body): neutralised all the same
        lines = [f"**Model steps not completed** ({len(model_steps_not_completed)}):"]
        lines += [
            f"- {neutralise(gap.replace(chr(10), ' '), allowed_urls=allowed_urls, max_chars=300)}"
            for gap in model_steps_not_completed
        ]
        parts.append("\n".join(lines))
    parts.append(SUMMARY_MARKER)
    return "\n\n".join(p for p in parts if p)


def publish_review(
    platform: PublishingPlatform,
    *,
    project: ProjectRef,
    mr_iid: int,
    versions: DiffVersions,
    diff_index: DiffIndex,
    findings: Sequence[FindingToPublish | tuple[int, Finding, Verdict, str]],
    existing: Mapping[str, PostedThread],
    summary: str | Callable[[PublishResult], str],
    record_posted: RecordPosted,
    not_reviewed: Sequence[NotReviewed] = (),
    allowed_urls: Collection[str] = frozenset(),
    max_discussions: int = DEFAULT_MAX_DISCUSSIONS,
    earlier_listed: Sequence[FindingToPublish] = (),
    earlier_held: Sequence[FindingToPublish] = (),
    model_steps_not_completed: Sequence[str] = (),
) -> PublishResult:
    """Post what is not on the merge request yet: one thread per REAL finding (deduplicated by
    fingerprint against `existing` from the store and the markers in our own threads) up to the
    comment budget, then the summary note (listing the rest), created once and edited in place.

    `summary` may be a function of the result (the opening counts what was posted); `earlier_listed`
    and `earlier_held` are findings of earlier pushes that still stand (`agent.gitlab.mr_state`):
    listed in the summary beside this push's, never posted again. `model_steps_not_completed`: this
    review's model steps that did not complete, each listed with why."""
    items = [FindingToPublish(*f) for f in findings]
    bot_id = platform.bot_user_id()
    discussions = platform.discussions(project, mr_iid)
    known = {**threads_by_fingerprint(discussions, bot_id), **existing}
    result = PublishResult()
    real = sorted((i for i in items if i.verdict == "REAL"), key=rank_for_threads)
    for item in real:
        fp = fingerprint_of(item.finding)
        if fp in known:
            thread = known[fp]
            record_posted(item.finding_id, thread.discussion_id, thread.note_id, thread.fallback)
            result.published.append(
                PublishedFinding(item.finding_id, fp, thread.discussion_id, thread.note_id, thread.fallback, True)
            )
    # Our open threads on the MR (from earlier heads too: the verifier calls those DUPLICATE) use
    # the budget first.
    open_on_mr = {fp for d in _ours(discussions, bot_id) if not d.resolved for fp in parse_markers(d.first_note.body)}
    occupied = open_on_mr | set(existing) | {p.fingerprint for p in result.published}
    slots = max(0, max_discussions - len(occupied))
    over_budget: list[FindingToPublish] = []
    for item in real:
        fp = fingerprint_of(item.finding)
        if fp in known:
            continue
        if slots == 0 and item.finding.severity not in ALWAYS_POSTED:
            over_budget.append(item)
            continue
        slots = max(0, slots - 1)
        posted, fallback = _post_finding(
            platform, project, mr_iid, item.finding, fp, versions, diff_index, allowed_urls
        )
        record_posted(item.finding_id, posted.discussion_id, posted.note_id, fallback)
        known[fp] = PostedThread(posted.discussion_id, posted.note_id, fallback)
        result.published.append(
            PublishedFinding(item.finding_id, fp, posted.discussion_id, posted.note_id, fallback, False)
        )
    needs_human = [i for i in items if i.verdict == "NEEDS_HUMAN_REVIEW"]
    result.needs_human = [i.finding_id for i in needs_human]
    result.over_budget = [i.finding_id for i in over_budget]
    body = summary_body(
        summary(result) if callable(summary) else summary,
        [*needs_human, *earlier_held],
        over_budget=[*over_budget, *earlier_listed],
        max_discussions=max_discussions,
        not_reviewed=not_reviewed,
        allowed_urls=allowed_urls,
        model_steps_not_completed=model_steps_not_completed,
    )
    _publish_summary(platform, project, mr_iid, body, _ours(discussions, bot_id), result)
    return result


def _post_finding(
    platform: PublishingPlatform,
    project: ProjectRef,
    mr_iid: int,
    finding: Finding,
    fingerprint: str,
    versions: DiffVersions,
    diff_index: DiffIndex,
    allowed_urls: Collection[str],
) -> tuple[PostedNote, bool]:
    position = position_for(finding, diff_index, versions)
    why = "the line is outside the diff"
    if position is not None:
        try:
            body = discussion_body(
                finding,
                fingerprint,
                allowed_urls=allowed_urls,
                anchor_line=position.new_line,
                change=diff_index.file(finding.path),
            )
            return platform.post_positioned_discussion(project, mr_iid, body=body, position=position), False
        except PositionRejectedError:
            why = "GitLab did not accept a comment on this line"
    body = fallback_body(finding, fingerprint, why, allowed_urls=allowed_urls)
    return platform.post_discussion(project, mr_iid, body=body), True


def _publish_summary(
    platform: PublishingPlatform,
    project: ProjectRef,
    mr_iid: int,
    body: str,
    ours: Sequence[Discussion],
    result: PublishResult,
) -> None:
    current = next((n for d in ours for n in d.notes[:1] if has_summary_marker(n.body)), None)
    if current is None:
        result.summary_note_id = platform.post_note(project, mr_iid, body=body)
        result.summary_created = True
        return
    result.summary_note_id = current.id
    if current.body != body:
        platform.edit_note(project, mr_iid, current.id, body=body)
        result.summary_edited = True


# --- outdated threads ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenThread:
    """One of our unresolved threads, as the store knows it."""

    discussion_id: str
    fingerprint: str
    path: str
    line: int
    evidence: str
    finding_id: int | None = None


def outdated_reason(
    thread: OpenThread, diff_index: DiffIndex, workspace: Workspace, *, still_found: Collection[str] = ()
) -> str | None:
    """Why a thread's code is gone at the new head, or None when its finding still stands there.

    `diff_index` is the merge request's whole current diff (base to the new head), never just what
    the latest push touched: a push that leaves a file alone leaves its threads alone. A thread is
    outdated only when its own lines changed (its evidence is no longer in the file at head) or its
    file was removed; a finding the new review found again (`still_found`, by fingerprint) stands.
    A thread without evidence, or a file we cannot read, stays open: we never resolve on a guess."""
    if thread.fingerprint in still_found:
        return None
    change = diff_index.file(thread.path)
    path = thread.path
    if change is None:
        renamed = (diff_index.file(p) for p in diff_index.paths())
        moved = next((c for c in renamed if c is not None and c.old_path == thread.path), None)
        if moved is not None:
            change, path = moved, moved.path
    if change is not None and change.status == "deleted":
        return "the file is deleted"
    text = workspace.read_file(path)
    if text is None:
        return "the file is deleted" if workspace.unreadable_reason(path) is None else None
    wanted = normalise_evidence(thread.evidence)
    if not wanted or wanted in normalise_evidence(text):
        return None
    if change is None:
        return "the merge request no longer changes this file"
    return "the code it points at is gone"


def resolve_outdated(
    platform: PublishingPlatform,
    project: ProjectRef,
    mr_iid: int,
    our_open_threads: Sequence[OpenThread],
    new_diff_index: DiffIndex,
    workspace: Workspace,
    *,
    resolve: bool = True,
    still_found: Collection[str] = (),
) -> list[OpenThread]:
    """Resolve (or, with `resolve=False`, reply "outdated" once in) each of our open threads whose
    code is gone at the new head (`outdated_reason`; `new_diff_index` is the MR's whole diff).
    Threads a person already resolved are left alone. Returns the threads acted on, for the store
    to mark outdated."""
    on_gitlab = {d.id: d for d in platform.discussions(project, mr_iid)}
    acted: list[OpenThread] = []
    for thread in our_open_threads:
        discussion = on_gitlab.get(thread.discussion_id)
        if discussion is None or discussion.resolved:
            continue
        reason = outdated_reason(thread, new_diff_index, workspace, still_found=still_found)
        if reason is None:
            continue
        if resolve:
            platform.resolve_discussion(project, mr_iid, thread.discussion_id)
        elif not any(OUTDATED_MARKER in n.body for n in discussion.notes):
            platform.reply(
                project,
                mr_iid,
                thread.discussion_id,
                body=f"This thread looks outdated: {reason}.\n\n{OUTDATED_MARKER}",
            )
        acted.append(thread)
    return acted
