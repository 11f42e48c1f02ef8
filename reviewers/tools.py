"""The tools a reviewer calls, and the one pydantic model a model uses to call them.

Every call is validated here, not trusted: a path must be in the workspace (and, to run the analyzer
or report, be a changed file this reviewer reads), a search pattern must compile on the linear-time
engine (`reviewers.pattern_search`) and its call stays within a budget of work, a reported finding
must carry a path, a line and its evidence. A call that fails these checks is an invalid step —
recorded, observed by the model, and costing its step. The toolbox also holds the findings of the
run, deduplicated by fingerprint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.symbols import public_definitions
from reviewers.analyzers.tests_lookup import TestIndex
from reviewers.fingerprint import make_fingerprint
from reviewers.kernel.budget import SearchBudget
from reviewers.kernel.contracts import Finding, NotReviewed, ReviewContext, Severity, ToolName, one_line
from reviewers.kernel.errors import InputError
from reviewers.reviewer import MAX_MODEL_REPORTS_PER_FILE, Analyzer, ReviewerSpec, findings_from_issues

MAX_READ_LINES = 80  # one read shows a screenful; longer reads crowd out the rest of the prompt
MAX_SEARCH_HITS = 20
MAX_PATTERN_CHARS = 200
MAX_OBSERVATION_CHARS = 1500  # what the model sees of one tool result
MAX_SUMMARY_CHARS = 240  # what a Step keeps for the self-judgment and the traces


class ToolCall(BaseModel):
    """One tool call, as the model writes it. Only the fields of the chosen tool are read:
    read_file(path, start, end) · search(pattern) · run_analyzer(path) · list_tests(path) ·
    report(path, line, end_line, severity, title, body, evidence) · finish()."""

    # Extra keys (a "reason", a "thought") are dropped rather than failing the call: they carry nothing
    # the tools use, and a failed call costs the model its whole turn.
    model_config = ConfigDict(extra="ignore")
    tool: ToolName
    path: str | None = Field(default=None, max_length=500)
    start: int | None = None
    end: int | None = None
    pattern: str | None = Field(default=None, max_length=500)
    line: int | None = None
    end_line: int | None = None
    severity: Severity | None = None
    title: str | None = Field(default=None, max_length=200)
    body: str | None = Field(default=None, max_length=2000)
    evidence: str | None = Field(default=None, max_length=2000)

    def args(self) -> dict[str, object]:
        return self.model_dump(exclude_none=True, exclude={"tool"})


@dataclass
class ToolOutcome:
    observation: str
    valid: bool = True
    new_findings: list[Finding] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        first = self.observation.strip().splitlines()[0] if self.observation.strip() else ""
        return first if len(first) <= MAX_SUMMARY_CHARS else first[: MAX_SUMMARY_CHARS - 3] + "..."


def _clip(text: str, limit: int = MAX_OBSERVATION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 20] + "\n... (truncated)"


def _invalid(message: str, *paths: str) -> ToolOutcome:
    return ToolOutcome(f"invalid call: {message}", valid=False, paths=list(paths))


class Toolbox:
    """The tools of one reviewer run over one review context."""

    def __init__(self, spec: ReviewerSpec, context: ReviewContext, targets: list[str]) -> None:
        self.spec = spec
        self.context = context
        self.targets = targets
        self.findings: dict[str, Finding] = {}
        self.analyzed: list[str] = []
        self.looked_at: set[str] = set()
        self.problems: list[str] = []
        self.not_reviewed: list[NotReviewed] = []  # what an analyzer read only in part, or failed on
        self._analyzer: Analyzer | None = None
        self._tests: TestIndex | None = None

    # --- helpers -----------------------------------------------------------------------------------

    def changed_file(self, path: str) -> ChangedFile | None:
        change = self.context.changed(path)
        text = self.context.workspace.read_file(path) if change is not None else None
        return ChangedFile(change, text) if change is not None and text is not None else None

    def _add(self, findings: list[Finding]) -> list[Finding]:
        new = [f for f in findings if f.fingerprint not in self.findings]
        for finding in new:
            self.findings[finding.fingerprint] = finding
        return new

    # --- the tools ---------------------------------------------------------------------------------

    def execute(self, call: ToolCall) -> ToolOutcome:
        if call.tool == "read_file":
            return self.read_file(call.path, call.start, call.end)
        if call.tool == "search":
            return self.search(call.pattern)
        if call.tool == "run_analyzer":
            return self.run_analyzer(call.path)
        if call.tool == "list_tests":
            return self.list_tests(call.path)
        if call.tool == "report":
            return self.report(call)
        return ToolOutcome("finished")

    def read_file(self, path: str | None, start: int | None, end: int | None) -> ToolOutcome:
        if not path:
            return _invalid("read_file needs a path")
        text = self.context.workspace.read_file(path)
        if text is None:
            return _invalid(f"{one_line(path)} is not a file at the head commit", path)
        lines = text.splitlines()
        if not lines:
            self.looked_at.add(path)
            return ToolOutcome(f"{one_line(path)} is empty", paths=[path])
        first = max(1, start or 1)
        last = min(len(lines), end or first + MAX_READ_LINES - 1, first + MAX_READ_LINES - 1)
        if first > max(len(lines), 1):
            return _invalid(f"{one_line(path)} has {len(lines)} lines; line {first} is past the end", path)
        if last < first:
            return _invalid(f"empty range {first}-{end} of {one_line(path)}", path)
        self.looked_at.add(path)
        body = "\n".join(f"{n:>5}  {lines[n - 1]}" for n in range(first, last + 1))
        return ToolOutcome(_clip(f"{one_line(path)} lines {first}-{last} of {len(lines)}:\n{body}"), paths=[path])

    def search(self, pattern: str | None) -> ToolOutcome:
        if not pattern:
            return _invalid("search needs a pattern")
        if len(pattern) > MAX_PATTERN_CHARS:
            return _invalid(f"pattern over {MAX_PATTERN_CHARS} characters; use a simpler one")
        if self.context.past_deadline():
            return _invalid("the review deadline has passed; no more searches")
        # One budget for the whole call, counted in characters matched and files fetched, never in
        # seconds (reviewers/kernel/budget.py): the same search gives the same answer on a busy machine.
        budget = SearchBudget()
        try:
            hits = self.context.workspace.search(pattern, max_hits=MAX_SEARCH_HITS, budget=budget)
        except (InputError, re.error) as exc:
            return _invalid(f"bad pattern: {exc}")
        unread = f" ({budget.unread} files of the search scope not read: over the call's read budget)"
        unread = unread if budget.unread else ""
        if budget.unsearched:
            unread += (
                f" ({budget.unsearched} files of the search scope not searched in full: over the call's budget "
                f"of {budget.max_chars:,} characters matched)"
            )
        if not hits:
            return ToolOutcome(f"no match for {pattern!r}{unread}")
        shown = "\n".join(f"{one_line(h.path)}:{h.line}: {h.text.strip()[:160]}" for h in hits)
        more = (" (more not shown)" if len(hits) >= MAX_SEARCH_HITS else "") + unread
        return ToolOutcome(
            _clip(f"{len(hits)} matches for {pattern!r}{more}:\n{shown}"), paths=sorted({h.path for h in hits})
        )

    def run_analyzer(self, path: str | None) -> ToolOutcome:
        if not path:
            return _invalid("run_analyzer needs a path")
        if path not in self.targets:
            return _invalid(f"{one_line(path)} is not a changed file the {self.spec.name} reviewer reads", path)
        return self.analyze(path)

    def analyze(self, path: str) -> ToolOutcome:
        """The analyzer on one changed file this reviewer reads: `run_analyzer` without the check that
        the file is one of the model's targets (the analyzers read every such file, targets or not)."""
        if path in self.analyzed:
            return ToolOutcome(f"{one_line(path)} was already analyzed", paths=[path])
        file = self.changed_file(path)
        if file is None:
            return _invalid(f"{one_line(path)} has no text at the head commit", path)
        if self._analyzer is None:
            self._analyzer = self.spec.make_analyzer(self.context)
        analysis = self._analyzer(file)
        self.analyzed.append(path)
        self.looked_at.add(path)
        self.problems += analysis.problems
        self.not_reviewed += [NotReviewed(path=path, reason=reason, detail=d) for reason, d in analysis.incomplete]
        self.not_reviewed += [
            NotReviewed(path=path, reason="analyzer-error", detail=f"{self.spec.name}: {problem}")
            for problem in analysis.problems
        ]
        if (unreadable := file.python_syntax_error) is not None and not file.partial:
            # the syntax-tree rules and bandit did not read it (a text rebuilt from hunks is expected not to parse)
            self.not_reviewed.append(NotReviewed(path=path, reason="parse-error", detail=unreadable.reason))
        new = self._add(findings_from_issues(self.spec.name, file, analysis.issues))
        lines = [f"{one_line(f.path)}:{f.line} [{f.severity}] {f.title} ({f.rule})" for f in new]
        head = f"{one_line(path)}: {len(new)} finding(s)" + (
            f"; analyzer problems: {'; '.join(analysis.problems)}" if analysis.problems else ""
        )
        return ToolOutcome(_clip("\n".join([head, *lines])), new_findings=new, paths=[path])

    def list_tests(self, path: str | None) -> ToolOutcome:
        if not path:
            return _invalid("list_tests needs a path")
        text = self.context.workspace.read_file(path)
        if text is None:
            return _invalid(f"{one_line(path)} is not a file at the head commit", path)
        change = self.context.changed(path)
        symbols = [d.name for d in public_definitions(ChangedFile(change, text))] if change is not None else []
        if self._tests is None:
            self._tests = TestIndex(self.context.workspace, should_stop=self.context.past_deadline)
        refs = self._tests.tests_for_path(path, symbols)
        if not refs and self._tests.stopped:
            return ToolOutcome(f"the review deadline stopped the test lookup for {one_line(path)}", paths=[path])
        if not refs:
            return ToolOutcome(f"no test file mentions {one_line(path)}'s module", paths=[path])
        shown = "\n".join(
            f"{one_line(r.path)}:{r.line}: {r.text.strip()[:120]}"
            + (f"  uses: {', '.join(r.tests)}" if r.tests else "")
            for r in refs
        )
        return ToolOutcome(
            _clip(f"{len(refs)} test file(s) mention {one_line(path)}:\n{shown}"), paths=[path, *(r.path for r in refs)]
        )

    def report(self, call: ToolCall) -> ToolOutcome:
        missing = [n for n in ("path", "line", "title", "evidence") if not getattr(call, n)]
        if missing:
            return _invalid(f"report needs {', '.join(missing)}")
        assert call.path is not None and call.line is not None and call.title is not None  # checked above
        if call.path not in self.targets:
            return _invalid(
                f"{one_line(call.path)} is not a changed file the {self.spec.name} reviewer reads", call.path
            )
        if call.line < 1:
            return _invalid("line must be 1 or more", call.path)
        reported = sum(1 for f in self.findings.values() if f.path == call.path and f.rule == "llm")
        if reported >= MAX_MODEL_REPORTS_PER_FILE:
            return _invalid(
                f"you already reported {MAX_MODEL_REPORTS_PER_FILE} findings on {one_line(call.path)}; "
                "report only what matters most"
            )
        evidence = call.evidence or ""
        finding = Finding(
            path=call.path,
            line=call.line,
            end_line=max(call.line, call.end_line or call.line),
            category=self.spec.name,
            severity=call.severity or "medium",
            title=call.title,
            body=call.body or call.title,
            evidence=evidence,
            fingerprint=make_fingerprint(path=call.path, category=self.spec.name, rule="llm", evidence=evidence),
            reviewer=self.spec.name,
            rule="llm",
        )
        new = self._add([finding])
        self.looked_at.add(call.path)
        note = "reported" if new else "already reported"
        return ToolOutcome(
            f"{note}: {one_line(call.path)}:{call.line} {call.title}", new_findings=new, paths=[call.path]
        )
