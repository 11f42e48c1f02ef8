"""The JSON schema a reviewer's next tool call is decoded under, built for one step.

`ToolCall` (pydantic) is every call any reviewer could make; this schema is the calls that make
sense now: one alternative per tool, with only that tool's fields, every field required, and paths
as an enum of the files this reviewer reviews. A tool whose every target is used up is left out
(`run_analyzer` once each target was analyzed). A model decoded under it (xgrammar in process,
`response_format` on vLLM) cannot name a file outside the change or a tool that does not exist, so
its steps go to the review rather than to invalid calls.

Everything the schema admits validates as a `ToolCall`; the toolbox still checks every call, since
a server may ignore the schema. Free text is bounded well below `ToolCall`'s own limits, to what a
finding needs: a small model otherwise rambles inside a string until `max_tokens` cuts the call off.
The in-process backend holds strings to these bounds at no compile cost; a server is sent the
schema without them (`agent.llm.structured.decoding_schema`) and `ToolCall` checks its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

from reviewers.kernel.contracts import Severity, ToolName
from reviewers.tools import MAX_PATTERN_CHARS

TOOL_NAMES: tuple[ToolName, ...] = get_args(ToolName)

# Characters of free text a call may write: a finding's title is a line, its body a short paragraph,
# its evidence a few lines of code; a search pattern is one regular expression (the tools' own bound).
MAX_TITLE_CHARS = 120
MAX_BODY_CHARS = 400
MAX_EVIDENCE_CHARS = 240


def _text(max_chars: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_chars}


_LINE: dict[str, Any] = {"type": "integer", "minimum": 1}


def _call(tool: ToolName, fields: dict[str, dict[str, Any]]) -> dict[str, Any]:
    properties: dict[str, Any] = {"tool": {"const": tool}, **fields}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def tool_call_json_schema(
    *,
    paths: Sequence[str],
    analyzer_paths: Sequence[str] | None = None,
    tools: Sequence[ToolName] = TOOL_NAMES,
) -> dict[str, Any]:
    """The schema of the next call: `tools` (in this order), path-taking ones only over `paths`.

    `analyzer_paths` narrows `run_analyzer` further (the targets not analyzed yet; None = `paths`).
    A tool with no path left to take is dropped; `ValueError` when no tool is left at all.
    """
    targets = list(dict.fromkeys(p for p in paths if p))
    analyzable = targets if analyzer_paths is None else [p for p in dict.fromkeys(analyzer_paths) if p in targets]
    target: dict[str, Any] = {"enum": targets}
    alternatives: list[dict[str, Any]] = []
    for tool in dict.fromkeys(tools):
        if tool == "read_file" and targets:
            alternatives.append(_call(tool, {"path": target, "start": _LINE, "end": _LINE}))
        elif tool == "search":
            alternatives.append(_call(tool, {"pattern": _text(MAX_PATTERN_CHARS)}))
        elif tool == "run_analyzer" and analyzable:
            alternatives.append(_call(tool, {"path": {"enum": analyzable}}))
        elif tool == "list_tests" and targets:
            alternatives.append(_call(tool, {"path": target}))
        elif tool == "report" and targets:
            fields = {
                "path": target,
                "line": _LINE,
                "end_line": _LINE,
                "severity": {"enum": list(get_args(Severity))},
                "title": _text(MAX_TITLE_CHARS),
                "body": _text(MAX_BODY_CHARS),
                "evidence": _text(MAX_EVIDENCE_CHARS),
            }
            alternatives.append(_call(tool, fields))
        elif tool == "finish":
            alternatives.append(_call(tool, {}))
    if not alternatives:
        raise ValueError(f"no tool call is possible with tools {list(tools)} and {len(targets)} path(s)")
    return {"title": "ToolCall", "anyOf": alternatives}
