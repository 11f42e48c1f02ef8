"""What makes a reviewer: a name, words for the prompts, the files it reads, and its analyzer.

The loop (`reviewers.loop`) is shared; a reviewer only says what its analyzer finds in one changed
file. This module also turns analyzer issues into `Finding`s, which is where reviews are kept quiet:
two analyzers reporting one problem become one finding, which names every report it stands for.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.contracts import (
    CONFIDENCE_RANK,
    SEVERITY_RANK,
    CoverageReason,
    Finding,
    ReviewContext,
    ReviewerName,
    Suggestion,
)

# What a model may report on one file (its own reports, not the analyzers'): a model that leaves more
# than a handful gets skimmed, so the tool tells it to report what matters most. The analyzers'
# findings are never capped: the merge request's comment budget decides which become threads.
MAX_MODEL_REPORTS_PER_FILE = 5
# Two analyzers' reports of the same kind of problem this close together are one statement.
MERGE_DISTANCE = 2
MAX_EVIDENCE_LINES = 5


@dataclass
class Analysis:
    """What an analyzer found in one file, and what it could not do: `problems` (an analyzer that
    failed, named as an "analyzer-error") and `incomplete` (what it read only in part or not at all,
    as (reason, detail): a budget, a parse error naming the syntax); both are named in the review."""

    issues: list[Issue] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    incomplete: list[tuple[CoverageReason, str]] = field(default_factory=list)


Analyzer = Callable[[ChangedFile], Analysis]


@dataclass(frozen=True)
class ReviewerSpec:
    name: ReviewerName
    description: str  # one line, for the strategy prompt
    instructions: str  # what this reviewer looks for, for its own prompt
    supports: Callable[[str], bool]  # whether the analyzer can read a path (by language and role)
    make_analyzer: Callable[[ReviewContext], Analyzer]  # one per review: analyzers may cache across files
    # warm the analyzers for the files they will read (one tool process instead of one per file)
    prefetch: Callable[[ReviewContext, Sequence[str]], None] | None = None
    # what is safe on a file the full analyzer must not read (generated, oversized, not UTF-8): its
    # text (decoded with replacement, or the diff's new side) in, issues and what was done out
    safe_analyzer: Callable[[ChangedFile], tuple[list[Issue], str]] | None = None


def merge_issues(issues: list[Issue], lines: Sequence[str] | None = None) -> list[Issue]:
    """One issue per place. An issue on a line already reported, or of a kind already reported a
    line or two away, folds into the earlier one (analyzers list their most precise issues first);
    the survivor takes the higher severity, and a more severe problem of another kind takes the lead.

    Nothing folded is lost (issue 40: a Slack token beside a Stripe key became one finding naming one,
    and two adjacent unused imports one that lost its fix): the survivor's body names every other
    member by line, title and rule, and the members' suggestions become one suggestion that applies
    all of them (`combined_suggestion`, over `lines`, the file's text at head) where they do not
    overlap; otherwise the body says which fix is offered and which are not."""
    kept: list[Issue] = []
    folded: list[list[Issue]] = []
    for issue in issues:
        twin = next(
            (
                i
                for i, k in enumerate(kept)
                if k.line == issue.line
                or (issue.kind and k.kind == issue.kind and abs(k.line - issue.line) <= MERGE_DISTANCE)
            ),
            None,
        )
        if twin is None:
            kept.append(issue)
            folded.append([])
            continue
        lead = kept[twin]
        if lead.cwe is None and issue.cwe is not None:  # the weakness survives the merge
            lead = kept[twin] = replace(lead, cwe=issue.cwe)
        if SEVERITY_RANK[issue.severity] > SEVERITY_RANK[lead.severity]:
            if issue.kind != lead.kind:
                kept[twin], issue = issue, lead
            else:
                kept[twin] = replace(lead, severity=issue.severity)
        elif (
            issue.rule == lead.rule
            and issue.severity == lead.severity
            and CONFIDENCE_RANK[issue.confidence] > CONFIDENCE_RANK[lead.confidence]
        ):
            # the same rule a line or two apart: the sure one leads (a name bound nowhere next to one
            # a config file's loader supplies), or a certain defect would be listed under a doubtful one
            kept[twin], issue = issue, lead
        if kept[twin].cwe is None and issue.cwe is not None:  # the weakness survives the merge
            kept[twin] = replace(kept[twin], cwe=issue.cwe)
        folded[twin].append(issue)
    return [_with_members(issue, members, lines) for issue, members in zip(kept, folded, strict=True)]


def _member_label(issue: Issue) -> str:
    return f"line {issue.line}: {issue.title} ({issue.rule})"


def _with_members(lead: Issue, members: list[Issue], lines: Sequence[str] | None) -> Issue:
    """The lead of a merged group, its body naming each other member, its suggestion applying every
    member's fix (or saying which it does not)."""
    if not members:
        return lead
    own = (lead.rule, lead.line, lead.title)
    others = list(dict.fromkeys(_member_label(m) for m in members if (m.rule, m.line, m.title) != own))
    same_problem = list(dict.fromkeys(m.rule for m in members if m.line == lead.line and m.rule != lead.rule))
    body = lead.body
    elsewhere = [label for label in others if not label.startswith(f"line {lead.line}: ")]
    if same_problem:
        body += f" (Also reported by {', '.join(same_problem)}.)"
    if elsewhere:
        body += f" Also here: {'; '.join(elsewhere)}."
    group = [lead, *members]
    fixes = [i for i in group if i.suggestion is not None]
    fix = combined_suggestion([i.suggestion for i in fixes if i.suggestion is not None], lines)
    if fix is None and fixes:
        unfixed = [f"line {i.line} ({i.rule})" for i in fixes]
        body += f" Their fixes overlap, so none is offered as one change: {', '.join(unfixed)}."
    elif fix is not None and len(fixes) < len(group):
        # a member without a fix of its own is not fixed by the others' (two analyzers' reports of
        # one problem on one line are one problem: its fix fixes both)
        unfixed_places = {(i.line, i.rule) for i in group if i.suggestion is None}
        fixed_lines = {i.line for i in fixes}
        open_ = [f"line {line} ({rule})" for line, rule in sorted(unfixed_places) if line not in fixed_lines]
        if open_:
            body += f" The suggested change does not fix {', '.join(open_)}."
    return replace(lead, body=body, suggestion=fix)


def combined_suggestion(fixes: Sequence[Suggestion], lines: Sequence[str] | None) -> Suggestion | None:
    """One suggestion that applies every fix in `fixes` (replacements of whole new-file lines), or
    None when there is none, when two overlap (unless they are the same fix), or when the lines
    between them are not known."""
    unique = sorted(dict.fromkeys((f.start_line, f.end_line, f.original, f.replacement) for f in fixes))
    if not unique:
        return None
    if len(unique) == 1:
        start, end, original, replacement = unique[0]
        return Suggestion(start_line=start, end_line=end, original=original, replacement=replacement)
    if lines is None or any(b[0] <= a[1] for a, b in itertools.pairwise(unique)):
        return None
    first, last = unique[0][0], unique[-1][1]
    if last > len(lines):
        return None
    pieces: list[str] = []
    at = first
    for start, end, _original, replacement in unique:
        pieces += lines[at - 1 : start - 1]  # the unchanged lines between two fixes
        if replacement:
            pieces.append(replacement)
        at = end + 1
    original = "\n".join(lines[first - 1 : last])
    return Suggestion(start_line=first, end_line=last, original=original, replacement="\n".join(pieces))


def evidence_at(file: ChangedFile, line: int, end_line: int) -> str:
    last = min(end_line, line + MAX_EVIDENCE_LINES - 1)
    return "\n".join(file.line_text(n) for n in range(line, last + 1))


def findings_from_issues(reviewer: ReviewerName, file: ChangedFile, issues: list[Issue]) -> list[Finding]:
    """Findings for one file, merged (`merge_issues`), every one of them: how many become threads is
    the merge request's comment budget's to decide, and what it leaves out is listed in the summary
    (issue 40: a per-file cap of five dropped the sixth and seventh request-to-sink flow unseen)."""
    merged = merge_issues([i for i in issues if 1 <= i.line <= max(len(file.lines), 1)], file.lines)
    findings: list[Finding] = []
    for issue in merged:
        end_line = max(issue.line, issue.end_line or issue.line)
        evidence = evidence_at(file, issue.line, end_line)
        findings.append(
            Finding(
                path=file.path,
                line=issue.line,
                end_line=end_line,
                category=reviewer,
                severity=issue.severity,
                title=issue.title[:200],
                body=issue.body[:4000],
                evidence=evidence[:2000],
                fingerprint=make_fingerprint(
                    path=file.path, category=reviewer, rule=issue.rule, evidence=evidence, title=issue.title
                ),
                reviewer=reviewer,
                rule=issue.rule,
                confidence=issue.confidence,
                cwe=issue.cwe,
                suggestion=issue.suggestion,
            )
        )
    return sorted(findings, key=lambda f: f.line)
