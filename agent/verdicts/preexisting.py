"""ruff findings the file already had before the merge request.

A change that edits a line does not make what was already wrong on it new: `if annotation == str:`
turned into `elif annotation == str:` by a branch added above it, a renamed variable in a loop that
already left one unused, a re-wrapped call. `agent.verdicts.unchanged` catches a line whose code did
not change at all; this catches a line whose code changed while ruff's complaint about it did not.

The check runs ruff on the file as it was at the base (rebuilt from the head text and the diff,
`reviewers.analyzers.base_tree.reverse_patch`) and counts, on each side, the diagnostics of the
finding's rule with the same message in the same function or class. When the head has no more of
them than the base had, the finding is about code that was already there, and a careful reviewer
would not raise it on this merge request. When the head has more, every one is kept: which of them
is the new one cannot be told, and precision here must not cost a real finding.

A syntax error in a file that did not parse before the change either (Python 2 source in a project
that converts it at install, a template with placeholders) is not the change's break: the file never
ran on this Python, and the change's error is one more line of it.

The price, knowingly paid: a change that fixes one instance and writes another of the same rule and
message in the same scope is not reported. Only ruff's rules are judged this way (they are cheap to
run twice, and each names its rule and message); the taint rules follow data that a small edit can
re-route.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from reviewers.analyzers.base_tree import reverse_patch
from reviewers.analyzers.flow.rules import SINKS
from reviewers.analyzers.pysyntax import parse_python
from reviewers.analyzers.python_security import request_flows
from reviewers.analyzers.ruff import run_ruff_json
from reviewers.kernel.contracts import FileChange, Finding
from reviewers.kernel.errors import AnalyzerError, PythonSyntaxError

RUFF_PREFIX = "ruff:"
SYNTAX_ERROR = "invalid-syntax"
_FLOW_RULES = frozenset(s.rule for s in SINKS.values())


def preexisting_ruff(finding: Finding, *, head_text: str | None, change: FileChange | None) -> str | None:
    """Why the finding is about code the base already had (None: it may be new)."""
    if not finding.rule.startswith(RUFF_PREFIX) or head_text is None or change is None:
        return None
    base_text = _base_python(head_text, change)
    if base_text is None:
        return None
    code = finding.rule.removeprefix(RUFF_PREFIX)
    try:
        head = run_ruff_json(head_text, path=change.path)
        base = run_ruff_json(base_text, path=change.old_path or change.path)
    except AnalyzerError:
        return None
    if code == SYNTAX_ERROR and _does_not_parse(head) and _does_not_parse(base):
        # the file did not parse before the change either (Python 2 source, a template): the change
        # did not break it, and its own error is one more line of a file that never ran on this Python
        return "the file did not parse before this change either; the change did not break it"
    try:
        head_scopes = _scopes(parse_python(head_text, change.path))
        base_scopes = _scopes(parse_python(base_text, change.old_path or change.path))
    except PythonSyntaxError:
        return None
    mine = [d for d in head if d.get("code") == code and _row(d) == finding.line]
    if not mine:
        return None
    key = (code, _message(mine[0]), head_scopes(finding.line))
    before = Counter(_key(d, base_scopes) for d in base)[key]
    after = Counter(_key(d, head_scopes) for d in head)[key]
    if before == 0 or after > before:
        return None
    where = key[2] or "the module"
    return (
        f"ruff's {code} ({key[1]}) was already reported {before}x in {where} before this change; "
        "the change keeps it, it does not add it"
    )


def _does_not_parse(diagnostics: list[dict[str, Any]]) -> bool:
    return any((d.get("code") or d.get("name")) == SYNTAX_ERROR for d in diagnostics)


def base_python(head_text: str | None, change: FileChange | None) -> str | None:
    """A modified Python file as it was at the base, rebuilt from the diff (None: added, not Python,
    or the patch does not reverse)."""
    if head_text is None or change is None:
        return None
    return _base_python(head_text, change)


def _base_python(head_text: str, change: FileChange) -> str | None:
    if change.status not in ("modified", "renamed") or not change.hunks or not change.path.endswith(".py"):
        return None
    return reverse_patch(head_text, change)


def _row(diagnostic: dict[str, Any]) -> int:
    location = diagnostic.get("location") or {}
    return int(location.get("row", 0) or 0)


# A message that names a line ("Redefinition of unused `Iterable` from line 4") names it on each side
# of the change; an edit above moves the number, not the complaint.
_LINE_NUMBER = re.compile(r"\bline \d+")


def _message(diagnostic: dict[str, Any]) -> str:
    return _LINE_NUMBER.sub("line N", str(diagnostic.get("message", "")))


def _key(diagnostic: dict[str, Any], scope_of: Callable[[int], str]) -> tuple[str, str, str]:
    return str(diagnostic.get("code")), _message(diagnostic), scope_of(_row(diagnostic))


def _scopes(tree: ast.Module) -> Callable[[int], str]:
    """line → the qualified name of the innermost function or class around it ("" at module level)."""
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                spans.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")

    def scope_of(line: int) -> str:
        inside = [(start, name) for start, end, name in spans if start <= line <= end]
        return max(inside)[1] if inside else ""

    return scope_of


def preexisting_flow(
    finding: Finding, *, head_text: str | None, change: FileChange | None, read_file: Callable[[str], str | None]
) -> str | None:
    """Why a taint finding's flow was already in the base (None: the change may have made it).

    A flow that passes through a changed line is not new when the base had the same flow — the
    same origin reaching the same sink call, in as many places: `run(app_path)` turned into
    `return run(app_path)`. The base is this file rebuilt from the diff, read with the other
    modules at head, so a flow the change routed through another file still counts as new."""
    if finding.rule not in _FLOW_RULES or finding.confidence != "high" or head_text is None or change is None:
        return None
    base_text = _base_python(head_text, change)
    if base_text is None:
        return None
    head = request_flows(head_text, change.path, read_file)
    mine = {key for key, first, last in head if first <= finding.line <= last}
    if not mine:
        return None
    base = Counter(key for key, _, _ in request_flows(base_text, change.old_path or change.path, read_file))
    after = Counter(key for key, _, _ in head)
    if all(base[key] >= after[key] for key in mine):
        origin, sink = next(iter(mine))[1:3]
        return f"{origin} already reached {sink} this way before the change; the change did not make the flow"
    return None
