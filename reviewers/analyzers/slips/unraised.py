"""`slips:unraised-exception`: an exception built and dropped.

`ValueError("bad size")` as a statement of its own builds the exception and throws it away: the
check it was meant to end goes on as if nothing were wrong. Reported when a statement is nothing
but a call of

- a builtin exception class (`ValueError`, `KeyError`, `RuntimeWarning`, ...),
- a class this module defines whose bases are exceptions (builtin, or named `...Error`,
  `...Exception`), or
- a class whose name says it is one: a capitalised name ending in `Error`, `Exception` or `Warning`
  (`errors.ValidationError(...)`, `HTTPException(...)`), unless the module defines a function of
  that name.

ruff's PLW0133 finds the first kind only (its preview extends it to the module's own classes).

Not caught: an exception built into a variable and never raised, one returned where the caller
ignores it, a class whose name does not say it is an exception (`Abort(...)`), and a constructor
called for a side effect on purpose (none is known among exception classes).
"""

from __future__ import annotations

import ast
import builtins
import re

from reviewers.analyzers.changed_file import Issue

RULE = "slips:unraised-exception"
BUILTIN_EXCEPTIONS = frozenset(
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), BaseException)
)
_EXCEPTION_NAME = re.compile(r"^[A-Z]\w*(?:Error|Exception|Warning)$")


def _name_of(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _module_classes(nodes: list[ast.AST]) -> tuple[set[str], set[str]]:
    """(exception classes the module defines, other names it defines as functions or classes)."""
    exceptions: set[str] = set()
    others: set[str] = set()
    classes = [n for n in nodes if isinstance(n, ast.ClassDef)]
    for _ in range(3):  # a class derived from one derived from an exception, a few levels deep
        for cls in classes:
            bases = {_name_of(b) for b in cls.bases}
            if bases & (BUILTIN_EXCEPTIONS | exceptions) or any(b and _EXCEPTION_NAME.match(b) for b in bases):
                exceptions.add(cls.name)
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            others.add(node.name)
    others |= {c.name for c in classes if c.name not in exceptions}
    return exceptions, others


def unraised_issues(nodes: list[ast.AST], tree: ast.Module, lines: list[str]) -> list[Issue]:
    exceptions, others = _module_classes(nodes)
    issues: list[Issue] = []
    for node in nodes:
        if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Call):
            continue
        name = _name_of(node.value.func)
        if name is None:
            continue
        if isinstance(node.value.func, ast.Name) and name in others:
            continue  # the module's own function or plain class of that name
        if not (
            name in BUILTIN_EXCEPTIONS or name in exceptions or (_EXCEPTION_NAME.match(name) and name not in others)
        ):
            continue
        issues.append(
            Issue(
                node.lineno,
                RULE,
                "high",
                f"{name}(...) is built but not raised",
                f"The statement builds a `{name}` and drops it: nothing is raised, so the code goes on as if the "
                f"check had passed. Write `raise {name}(...)`.",
                end_line=node.end_lineno,
                kind="unraised-exception",
                confidence="high",
            )
        )
    return issues
