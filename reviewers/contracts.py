"""The contracts the reviewers consume and produce, defined at the bottom layer.

`agent/` builds a `ReviewContext` (from a local git range, a plain diff, a GitLab merge request or a
replay snapshot), hands each planned reviewer its `PlanItem` and an optional `LLMPort`, and receives
`ReviewerResult`s. Nothing here knows about GitLab, Postgres or the graph.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field

Category = Literal["security", "architecture", "code_quality", "test_impact"]
CATEGORIES: tuple[Category, ...] = ("security", "architecture", "code_quality", "test_impact")
ReviewerName = Category  # one reviewer per category, named alike
REVIEWERS: tuple[ReviewerName, ...] = CATEGORIES

Severity = Literal["info", "low", "medium", "high", "critical"]
SEVERITY_RANK: dict[Severity, int] = {"info": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}

FileStatus = Literal["added", "modified", "deleted", "renamed"]
LineKind = Literal["add", "del", "context"]

LANGUAGE_BY_SUFFIX: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".kt": "kotlin",
    ".rb": "ruby",
    ".php": "php",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".cs": "csharp",
    ".sh": "shell",
    ".sql": "sql",
    ".yml": "yaml",
    ".yaml": "yaml",
    ".toml": "toml",
    ".json": "json",
    ".md": "markdown",
    ".rst": "rst",
    ".txt": "text",
    ".html": "html",
    ".css": "css",
    ".tf": "terraform",
}


def language_of(path: str) -> str:
    """The language of a path by its suffix, or "other"."""
    name = path.rsplit("/", 1)[-1]
    if name == "Dockerfile" or name.startswith("Dockerfile."):
        return "dockerfile"
    dot = name.rfind(".")
    return LANGUAGE_BY_SUFFIX.get(name[dot:].lower(), "other") if dot >= 0 else "other"


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
        """The file's text at head, or None when absent, binary or unreadable."""
        ...

    def list_paths(self) -> list[str]:
        """Every file path at head (may be only the changed files when the context is a bare diff)."""
        ...

    def search(self, pattern: str, *, max_hits: int = 50) -> list[SearchHit]:
        """Lines matching a regular expression, across the files at head."""
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

    def changed(self, path: str) -> FileChange | None:
        for f in self.files:
            if f.path == path:
                return f
        return None


# --- plan, findings, steps -------------------------------------------------------------------------


class PlanItem(BaseModel):
    """One reviewer's part of the strategy z."""

    model_config = ConfigDict(extra="ignore")
    reviewer: ReviewerName
    focus_paths: list[str] = Field(default_factory=list, max_length=20)
    checks: str = Field(default="", max_length=300)
    step_budget: int = Field(default=6, ge=1, le=30)


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


ToolName = Literal["read_file", "search", "run_analyzer", "list_tests", "report", "finish"]


class Step(BaseModel):
    """One step of a reviewer's loop, as the self-judgment and the traces see it."""

    index: int
    tool: ToolName
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
    unreviewed_paths: list[str] = Field(default_factory=list)  # focus paths the step budget did not reach


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


def render_files_overview(files: Sequence[FileChange], *, limit: int = 60) -> str:
    """A one-line-per-file overview shared by the strategy prompt and the reviewers' prompt prefix."""
    lines = []
    for f in files[:limit]:
        extra = " (binary)" if f.is_binary else " (diff not available)" if f.collapsed else ""
        rename = f" (from {f.old_path})" if f.status == "renamed" else ""
        lines.append(f"{f.status} {f.path}{rename} [{f.language}] +{f.additions} -{f.deletions}{extra}")
    if len(files) > limit:
        rest = files[limit:]
        lines.append(
            f"... and {len(rest)} more files (+{sum(f.additions for f in rest)} -{sum(f.deletions for f in rest)})"
        )
    return "\n".join(lines)


JSONMapping = Mapping[str, Any]
