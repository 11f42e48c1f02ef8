"""What makes a reviewer: a name, words for the prompts, the files it reads, and its analyzer.

The loop (`reviewers.loop`) is shared; a reviewer only says what its analyzer finds in one changed
file. This module also turns analyzer issues into `Finding`s, which is where reviews are kept quiet:
two analyzers reporting one problem become one finding, and a file gets at most a handful.
"""

from __future__ import annotations

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
)

# A reviewer that leaves more than a handful of comments on one file gets skimmed or muted; the
# strongest few carry the message.
MAX_FINDINGS_PER_FILE = 5
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


def merge_issues(issues: list[Issue]) -> list[Issue]:
    """One issue per problem. An issue on a line already reported, or of a kind already reported a
    line or two away, folds into the earlier one (analyzers list their most precise issues first);
    the survivor takes the higher severity, and a more severe problem of another kind takes the lead."""
    kept: list[Issue] = []
    folded: list[list[str]] = []
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
        folded[twin].append(issue.rule)
    out: list[Issue] = []
    for issue, rules in zip(kept, folded, strict=True):
        extra = [r for r in dict.fromkeys(rules) if r != issue.rule]
        # a suggestion fixes its own issue only: merged with another problem, it is not offered
        merged = replace(issue, suggestion=None) if rules else issue
        out.append(replace(merged, body=f"{issue.body} (Also reported by {', '.join(extra)}.)") if extra else merged)
    return out


def evidence_at(file: ChangedFile, line: int, end_line: int) -> str:
    last = min(end_line, line + MAX_EVIDENCE_LINES - 1)
    return "\n".join(file.line_text(n) for n in range(line, last + 1))


def findings_from_issues(reviewer: ReviewerName, file: ChangedFile, issues: list[Issue]) -> list[Finding]:
    """Findings for one file: merged, the strongest first, at most MAX_FINDINGS_PER_FILE."""
    merged = merge_issues([i for i in issues if 1 <= i.line <= max(len(file.lines), 1)])
    merged.sort(key=lambda i: (-SEVERITY_RANK[i.severity], i.line))
    findings: list[Finding] = []
    for issue in merged[:MAX_FINDINGS_PER_FILE]:
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
