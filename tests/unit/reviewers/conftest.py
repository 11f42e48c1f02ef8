"""Helpers for the reviewer tests: a review context from two small file trees, and a scripted model.

The diff is computed with difflib and parsed by the project's own parser, so the tests see exactly
the `FileChange`s a real review would.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from agent.diff import parse_unified_diff
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.kernel.contracts import ChatMessage, M, RepoConfig, ReviewContext


def unified_diff(base: dict[str, str], head: dict[str, str]) -> str:
    """`git diff` text for the files that differ between two trees."""
    out: list[str] = []
    for path in sorted(set(base) | set(head)):
        old, new = base.get(path), head.get(path)
        if old == new:
            continue
        out.append(f"diff --git a/{path} b/{path}")
        if old is None:
            out.append("new file mode 100644")
        if new is None:
            out.append("deleted file mode 100644")
        lines = difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            "/dev/null" if old is None else f"a/{path}",
            "/dev/null" if new is None else f"b/{path}",
            n=3,
        )
        out.extend(line.rstrip("\n") for line in lines)
    return "\n".join(out) + "\n"


ContextBuilder = Callable[..., ReviewContext]


@pytest.fixture
def build_context() -> ContextBuilder:
    def build(
        base: dict[str, str],
        head: dict[str, str],
        *,
        config: RepoConfig | None = None,
        diff_only: bool = False,
        title: str = "A change",
        description: str = "",
    ) -> ReviewContext:
        files = parse_unified_diff(unified_diff(base, head))
        workspace = SnapshotWorkspace.from_changes(files) if diff_only else SnapshotWorkspace(head)
        return ReviewContext(
            title=title, description=description, files=files, workspace=workspace, config=config or RepoConfig()
        )

    return build


class ScriptedLLM:
    """An LLMPort that answers from a script: each entry is a dict (a tool call) or an exception."""

    def __init__(self, script: Sequence[dict[str, Any] | Exception]) -> None:
        self.script = list(script)
        self.calls: list[list[ChatMessage]] = []
        self.purposes: list[str] = []
        self.json_schemas: list[Mapping[str, Any] | None] = []  # what each call constrained decoding to

    @property
    def model_name(self) -> str:
        return "scripted"

    def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: type[M],
        *,
        purpose: str,
        json_schema: Mapping[str, Any] | None = None,
    ) -> M:
        self.calls.append(list(messages))
        self.purposes.append(purpose)
        self.json_schemas.append(json_schema)
        answer = self.script.pop(0) if self.script else {"tool": "finish"}
        if isinstance(answer, Exception):
            raise answer
        return schema.model_validate(answer)

    def complete_text(self, messages: Sequence[ChatMessage], *, purpose: str, max_tokens: int = 512) -> str:
        raise AssertionError("reviewers only ask for JSON")


@pytest.fixture
def scripted_llm() -> type[ScriptedLLM]:
    return ScriptedLLM
