"""The per-step tool-call schema: what it admits, what it refuses, and that the loop sends it."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from reviewers import run_reviewer
from reviewers.kernel.contracts import PlanItem, ReviewContext
from reviewers.tool_schema import TOOL_NAMES, tool_call_json_schema
from reviewers.tools import ToolCall

A = "import os\n\ndef clean(cmd):\n    os.system(cmd)\n"
B = "import subprocess\n\ndef pack(name):\n    subprocess.run(name, shell=True)\n"

REPORT = {
    "tool": "report",
    "path": "app/a.py",
    "line": 4,
    "end_line": 4,
    "severity": "high",
    "title": "Command injection",
    "body": "cmd reaches a shell",
    "evidence": "    os.system(cmd)",
}


def admitted(schema: dict[str, Any], value: dict[str, Any]) -> bool:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def test_the_schema_admits_each_tool_with_its_own_fields_over_the_target_paths() -> None:
    schema = tool_call_json_schema(paths=["app/a.py", "app/b.py"])
    valid = [
        {"tool": "read_file", "path": "app/b.py", "start": 1, "end": 20},
        {"tool": "search", "pattern": "os\\.system"},
        {"tool": "run_analyzer", "path": "app/a.py"},
        {"tool": "list_tests", "path": "app/a.py"},
        REPORT,
        {"tool": "finish"},
    ]
    for call in valid:
        assert admitted(schema, call), call
        ToolCall.model_validate(call)  # everything the schema admits is a ToolCall
    assert {alt["properties"]["tool"]["const"] for alt in schema["anyOf"]} == set(TOOL_NAMES)
    refused = [
        {"tool": "run_analyzer", "path": "../../etc/passwd"},  # not a target
        {"tool": "read_file", "path": "app/a.py", "start": 0, "end": 3},  # lines start at 1
        {"tool": "report", **{k: v for k, v in REPORT.items() if k not in ("tool", "evidence")}},  # no evidence
        {"tool": "finish", "reason": "done"},  # fields of no tool
        {"tool": "shell", "cmd": "ls"},  # not a tool
        {"tool": "report", **{k: v for k, v in REPORT.items() if k != "tool"}, "severity": "fatal"},
    ]
    for call in refused:
        assert not admitted(schema, call), call


def test_tools_without_a_path_to_take_are_left_out() -> None:
    done = tool_call_json_schema(paths=["app/a.py"], analyzer_paths=[])
    assert "run_analyzer" not in {alt["properties"]["tool"]["const"] for alt in done["anyOf"]}
    one_left = tool_call_json_schema(paths=["app/a.py", "app/b.py"], analyzer_paths=["app/b.py", "elsewhere.py"])
    assert admitted(one_left, {"tool": "run_analyzer", "path": "app/b.py"})
    assert not admitted(one_left, {"tool": "run_analyzer", "path": "app/a.py"})
    no_files = tool_call_json_schema(paths=[])
    assert [alt["properties"]["tool"]["const"] for alt in no_files["anyOf"]] == ["search", "finish"]
    with pytest.raises(ValueError, match="no tool call is possible"):
        tool_call_json_schema(paths=[], tools=["run_analyzer", "report"])


def test_the_loop_sends_each_step_its_schema(build_context: Any, scripted_llm: Any) -> None:
    """The analyzer pass reads every file, whatever the plan's budget (2 here); the model's steps are
    decoded under a schema that offers run_analyzer for no file (none is left to analyze)."""
    files = {"app/a.py": A, "app/b.py": B, "app/c.py": A.replace("a", "c")}
    context: ReviewContext = build_context({}, files)
    llm = scripted_llm([{"tool": "read_file", "path": "app/c.py", "start": 1, "end": 2}, {"tool": "finish"}])
    run_reviewer("security", context, PlanItem(reviewer="security", step_budget=2), llm)
    first, second = llm.json_schemas
    assert first == second == tool_call_json_schema(paths=list(files), analyzer_paths=[])
    assert not admitted(second, {"tool": "run_analyzer", "path": "app/c.py"})
    assert admitted(second, {"tool": "read_file", "path": "app/a.py", "start": 1, "end": 4})
