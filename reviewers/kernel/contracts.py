"""The contracts the reviewers consume and produce, defined at the bottom layer.

`agent/` builds a `ReviewContext` (from a local git range, a plain diff, a GitLab merge request or a
replay snapshot), hands each planned reviewer its `PlanItem` and an optional `LLMPort`, and receives
`ReviewerResult`s. Nothing here knows about GitLab, Postgres or the graph.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reviewers.kernel.budget import SearchBudget
from reviewers.paths import language_of

Category = Literal["security", "architecture", "code_quality", "test_impact"]
CATEGORIES: tuple[Category, ...] = ("security", "architecture", "code_quality", "test_impact")
ReviewerName = Category  # one reviewer per category, named alike
REVIEWERS: tuple[ReviewerName, ...] = CATEGORIES

Severity = Literal["info", "low", "medium", "high", "critical"]
SEVERITY_RANK: dict[Severity, int] = {"info": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}
# How sure the rule is that its evidence proves the claim: "high" when the evidence is the defect
# itself (a vendor token, a tainted value reaching a sink), "low" when the rule cannot see enough
# (a bare diff, a heuristic name match) and a person should look before it is posted.
Confidence = Literal["high", "medium", "low"]
CONFIDENCE_RANK: dict[Confidence, int] = {"low": 0, "medium": 1, "high": 2}

FileStatus = Literal["added", "modified", "deleted", "renamed"]
LineKind = Literal["add", "del", "context"]

# --- the diff -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiffLine:
    kind: LineKind
    text: str
    old_line: int | None
    new_line: int | None


@dataclass(frozen=True, slots=True)
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    header: str
    lines: tuple[DiffLine, ...]


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file of a merge request's diff. `collapsed` means the host sent no diff text for it."""

    path: str  # the new path ("/dev/null" never appears: deleted files keep their old path here)
    old_path: str
    status: FileStatus
    hunks: tuple[Hunk, ...] = ()
    is_binary: bool = False
    old_mode: str | None = None
    new_mode: str | None = None
    collapsed: bool = False
    collapsed_reason: str | None = None

    @property
    def language(self) -> str:
        return language_of(self.path)

    @property
    def additions(self) -> int:
        return sum(1 for h in self.hunks for ln in h.lines if ln.kind == "add")

    @property
    def deletions(self) -> int:
        return sum(1 for h in self.hunks for ln in h.lines if ln.kind == "del")

    def added_lines(self) -> dict[int, str]:
        """New-file line number → text, for every added line."""
        return {ln.new_line: ln.text for h in self.hunks for ln in h.lines if ln.kind == "add" and ln.new_line}

    def new_lines(self) -> dict[int, LineKind]:
        """New-file line number → "add" or "context", for every line the diff shows on the new side."""
        out: dict[int, LineKind] = {}
        for h in self.hunks:
            for ln in h.lines:
                if ln.new_line is not None:
                    out[ln.new_line] = ln.kind
        return out


# --- repository configuration (`.reviewloop.toml`) -------------------------------------------------


class LayerRule(BaseModel):
    """A named layer: the paths that belong to it and the layers it may import."""

    model_config = ConfigDict(extra="forbid")
    name: str
    paths: list[str]
    may_import: list[str] = Field(default_factory=list)


class AgreementConfig(BaseModel):
    """How a review with a model looks for agreement: `strategies` independent executions under the
    most different strategies it sampled, and a model-only finding needs `min_support` of them to go
    straight to a thread (fewer: a human looks first). `strategies = 1` is a single execution, and
    a `min_support` above the executions that ran asks for all of them."""

    model_config = ConfigDict(extra="forbid")
    strategies: int = Field(default=3, ge=1, le=8)
    min_support: int = Field(default=2, ge=1, le=8)


class RepoConfig(BaseModel):
    """What a repository says about its own review, from `.reviewloop.toml` (all optional)."""

    model_config = ConfigDict(extra="forbid")
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    reviewers: list[ReviewerName] = Field(default_factory=lambda: list(REVIEWERS))
    min_severity: Severity = "low"
    layers: list[LayerRule] = Field(default_factory=list)
    instructions: dict[str, str] = Field(default_factory=dict)  # glob → free text for reviewers
    resolve_outdated: bool = True
    # A merge request gets at most this many threads; the rest are counted in the summary note,
    # because a wall of comments gets skimmed or muted.
    max_discussions: int = Field(default=10, ge=0, le=100)
    # Reviewer steps for the whole review, one file per step, spent by the strategy's plan items first
    # come first served: the strategy model is told it (s1) and a model's plan posts what its steps
    # visit within it (`agent.plan_posting`). None: each planned reviewer's own step budget.
    review_budget: int | None = Field(default=None, ge=1, le=1000)
    agreement: AgreementConfig = Field(default_factory=AgreementConfig)

    def wants(self, path: str) -> bool:
        """Whether a path is in scope by the include/exclude globs."""
        included = any(fnmatch.fnmatch(path, g) for g in self.include)
        return included and not any(fnmatch.fnmatch(path, g) for g in self.exclude)

    def instructions_for(self, path: str) -> list[str]:
        return [text for glob, text in self.instructions.items() if fnmatch.fnmatch(path, glob)]


# --- the repository at the head commit -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SearchHit:
    path: str
    line: int
    text: str


class Workspace(Protocol):
    """Read-only access to the repository at the head commit. Never executes anything."""

    def read_file(self, path: str) -> str | None:
        """The file's text at head (bytes that are not UTF-8 replaced by U+FFFD), or None when absent,
        binary or unreadable."""
        ...

    def unreadable_reason(self, path: str) -> tuple[CoverageReason, str] | None:
        """Why `read_file` gives None for a path that exists at head (too large, binary, a link), as a
        reason and its detail; None when it reads, or does not exist."""
        ...

    def list_paths(self) -> list[str]:
        """Every file path at head (may be only the changed files when the context is a bare diff)."""
        ...

    def search(self, pattern: str, *, max_hits: int = 50, budget: SearchBudget | None = None) -> list[SearchHit]:
        """Lines matching a regular expression, across the files at head. With `budget` (a model's
        search), the pattern runs on RE2 and each line matched is charged its characters: past the
        budget the search ends with the hits it has and counts what it left (`SearchBudget`)."""
        ...


@dataclass
class ReviewContext:
    """Everything a reviewer may look at. `workspace` holds the files at head."""

    title: str
    description: str
    files: list[FileChange]
    workspace: Workspace
    config: RepoConfig = field(default_factory=RepoConfig)
    project: str | None = None
    mr_iid: int | None = None
    head_sha: str | None = None
    base_sha: str | None = None
    # a reading of `clock` after which reviewers take no further step (None = no deadline): one review
    # must not hold a worker for hours, and what the deadline cut off is named, not dropped
    deadline: float | None = None
    # the clock the deadline is read on (seconds, monotonic); a test passes its own
    clock: Callable[[], float] = time.monotonic

    def past_deadline(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def seconds_left(self) -> float | None:
        """Seconds until the deadline (0 once past it); None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - self.clock())

    def changed(self, path: str) -> FileChange | None:
        for f in self.files:
            if f.path == path:
                return f
        return None


# --- coverage: what a review did not read in full --------------------------------------------------

# Why a changed file was not analyzed in full; a closed set, so a CI job or a dashboard can count and
# filter them, with the particulars in `NotReviewed.detail`:
#   budget       an analyzer's own budget stopped part-way (a secrets scan's character budget)
#   size         over the size a file is analyzed at
#   encoding     not UTF-8: read with undecodable bytes replaced
#   generated    machine-written (a generator's marker, minified lines, a lock file)
#   vendored     third-party code kept in the tree (`vendor/` at the root, `_vendor/`, `node_modules/`, …)
#   binary       no text to read
#   parse-error  the parser refused it (detail: the syntax)
#   deadline     the review's deadline came first
#   unavailable  the host sent no diff or no file for it
#   analyzer-error  an analyzer failed on it
CoverageReason = Literal[
    "budget", "size", "encoding", "generated", "vendored", "binary", "parse-error", "deadline", "unavailable",
    "analyzer-error", "excluded",
]  # fmt: skip
COVERAGE_REASONS: tuple[CoverageReason, ...] = (
    "budget", "size", "encoding", "generated", "vendored", "binary", "parse-error", "deadline", "unavailable",
    "analyzer-error", "excluded",
)  # fmt: skip


def _reason_in_words(text: str) -> CoverageReason:
    """The reason a sentence stands for (a host's words; a review stored before reasons were a closed set)."""
    lowered = text.lower()
    for words, reason in (
        (("deadline",), "deadline"),
        (("binary",), "binary"),
        (("generated", "minified"), "generated"),
        (("vendored", "third-party"), "vendored"),
        (("budget",), "budget"),
        (("too large", "too_large", "bytes", "over "), "size"),
        (("utf-8", "encoding"), "encoding"),
    ):
        if any(w in lowered for w in words):
            return reason  # type: ignore[return-value]
    return "unavailable"


class NotReviewed(BaseModel):
    """A changed file that was not analyzed in full, why (`reason`), and what was and was not done
    (`detail`, in words). A review whose list is empty read every changed file in full."""

    path: str
    reason: CoverageReason
    detail: str = ""

    @model_validator(mode="before")
    @classmethod
    def _from_free_text(cls, data: Any) -> Any:
        # Reviews stored before the reason was a closed set hold a sentence there: keep it as detail.
        if isinstance(data, Mapping) and isinstance(data.get("reason"), str):
            reason = data["reason"]
            if reason not in COVERAGE_REASONS:
                return {**data, "reason": _reason_in_words(reason), "detail": data.get("detail") or reason}
        return data

    @classmethod
    def from_words(cls, path: str, words: str) -> NotReviewed:
        """An entry from a sentence (a host's own account of a file it sent no diff for), its reason
        read from the words."""
        return cls(path=path, reason=_reason_in_words(words), detail=words)

    def describe(self) -> str:
        """One line for a summary or a terminal: the reason, then the detail."""
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


def merge_not_reviewed(items: Sequence[NotReviewed]) -> list[NotReviewed]:
    """One entry per (path, reason), the parts of their details joined once each, in first-seen order."""
    merged: dict[tuple[str, str], list[str]] = {}
    for item in items:
        details = merged.setdefault((item.path, item.reason), [])
        details += [part for part in item.detail.split("; ") if part and part not in details]
    return [
        NotReviewed(path=path, reason=reason, detail="; ".join(details))  # type: ignore[arg-type]
        for (path, reason), details in merged.items()
    ]


# --- plan, findings, steps -------------------------------------------------------------------------


class PlanItem(BaseModel):
    """One reviewer's part of the strategy z."""

    model_config = ConfigDict(extra="ignore")
    reviewer: ReviewerName
    focus_paths: list[str] = Field(default_factory=list, max_length=20)
    checks: str = Field(default="", max_length=300)
    step_budget: int = Field(default=6, ge=1, le=30)


class Agreement(BaseModel):
    """How many of a review's independent executions reported a finding, of how many, and how many
    it takes (`AgreementConfig.min_support`, at most the executions run)."""

    support: int = Field(ge=1)
    executions: int = Field(ge=2)
    required: int = Field(ge=1)


class Suggestion(BaseModel):
    """An exact fix of a finding: new-file lines `start_line`..`end_line` at head, as they read there
    (`original`), replaced by `replacement` ("" deletes them). Only a tool's safe fix becomes one
    (e.g. ruff's "safe" applicability): a suggestion never changes behaviour beyond its finding."""

    start_line: int = Field(ge=1)
    end_line: int = Field(ge=1)
    original: str
    replacement: str


class Finding(BaseModel):
    """A problem a reviewer reports. Lines are new-file lines at the head commit."""

    path: str
    line: int = Field(ge=1)
    end_line: int = Field(ge=1)
    category: Category
    severity: Severity
    title: str = Field(max_length=200)
    body: str = Field(max_length=4000)
    evidence: str = Field(default="", max_length=2000)
    fingerprint: str = ""
    reviewer: ReviewerName
    rule: str = ""  # "bandit:B602", "ruff:F401", "layers:forbidden-import", "llm", ...
    confidence: Confidence = "medium"  # the rule's own certainty; see `Confidence`
    # Set by `agent.agreement` when a review ran several executions: how many reported this finding.
    agreement: Agreement | None = None
    # The weakness a security finding is an instance of, as "CWE-89"; None for other categories.
    cwe: str | None = Field(default=None, pattern=r"^CWE-[0-9]{1,5}$")
    # A mechanical, exact fix a reviewer can apply in one click (a GitLab suggestion block); None
    # for every finding whose fix needs judgement.
    suggestion: Suggestion | None = None


ToolName = Literal["read_file", "search", "run_analyzer", "list_tests", "report", "finish"]
# A step is a tool call, or a model answer that could not be used at all (it still costs its step).
StepTool = ToolName | Literal["model_error"]


class Step(BaseModel):
    """One step of a reviewer's loop, as the self-judgment and the traces see it."""

    index: int
    tool: StepTool
    args: dict[str, Any] = Field(default_factory=dict)
    observation: str = ""  # short summary of what the tool returned
    valid: bool = True
    new_findings: int = 0
    paths: list[str] = Field(default_factory=list)


class ReviewerResult(BaseModel):
    reviewer: ReviewerName
    findings: list[Finding] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    used_model: bool = False
    error: str | None = None  # a stage that fell back says why
    # why the model's steps did not complete (unreachable, failing, out of its deadline); None when they
    # did or no model ran. The analyzers' findings stand either way.
    model_error: str | None = None
    # the changed files this reviewer reads that it did not analyze in full, each with its reason
    not_reviewed: list[NotReviewed] = Field(default_factory=list)


# --- the LLM port ----------------------------------------------------------------------------------


class ChatMessage(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


M = TypeVar("M", bound=BaseModel)


class LLMPort(Protocol):
    """A language model that answers chat messages with JSON validated against a pydantic model.

    Implementations raise `LLMOutputError` when the answer fails validation after one retry that
    carries the validation error, and `LLMUnavailableError` when the server cannot be reached.

    `json_schema`, when given, is what decoding is constrained to (grammar-guided in process,
    `response_format` on a server): a narrowing of `schema` for this one call, such as the changed
    files as an enum. It must admit only answers that `schema` accepts; `schema` still validates.
    A schema that cannot constrain decoding raises `LLMSchemaError`.
    """

    @property
    def model_name(self) -> str: ...

    def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: type[M],
        *,
        purpose: str,
        json_schema: Mapping[str, Any] | None = None,
    ) -> M: ...

    def complete_text(self, messages: Sequence[ChatMessage], *, purpose: str, max_tokens: int = 512) -> str: ...


# Characters that would end or reorder a line of a prompt: controls (a newline, which GitLab allows in
# a path), line and paragraph separators, bidi overrides and isolates, zero-width characters.
_LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    """`text` (a path, a name from the repository) on one line of a prompt: every character that could
    start a new line or reorder what a reader sees is written as an escape (`\\n`, `\\u202e`)."""
    return _LINE_BREAKING.sub(lambda m: _ESCAPES.get(m.group(0), f"\\u{ord(m.group(0)):04x}"), text)


def render_files_overview(files: Sequence[FileChange], *, limit: int = 60) -> str:
    """A one-line-per-file overview shared by the strategy prompt and the reviewers' prompt prefix;
    paths are escaped onto their line (`one_line`)."""
    lines = []
    for f in files[:limit]:
        extra = " (binary)" if f.is_binary else " (diff not available)" if f.collapsed else ""
        rename = f" (from {one_line(f.old_path)})" if f.status == "renamed" else ""
        lines.append(f"{f.status} {one_line(f.path)}{rename} [{f.language}] +{f.additions} -{f.deletions}{extra}")
    if len(files) > limit:
        rest = files[limit:]
        lines.append(
            f"... and {len(rest)} more files (+{sum(f.additions for f in rest)} -{sum(f.deletions for f in rest)})"
        )
    return "\n".join(lines)


JSONMapping = Mapping[str, Any]
