"""The two things the guard-removal scan speaks of: a guard, and a call (a sink) with the guards
that dominate it."""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Guard:
    family: str  # a key of `families.FAMILIES`
    classes: frozenset[str]  # the sink classes it protects
    names: frozenset[str]  # the names it constrains; empty: everything in its scope
    line: int  # where it is, in the version of the file it was read from
    text: str  # its code, stripped
    key: str = ""  # which option of a strict family (`resolve_entities`, `no_network`)
    strength: tuple[int, int] = (0, 0)  # within a family, larger is stricter (a regex's anchors)
    leaves: bool = False  # failing it leaves the function (`raise`, `return`), not just a loop's turn


@dataclass(frozen=True, slots=True)
class Sink:
    """A call (or a comparison, or a view's reach) and the guards that dominate it."""

    classes: frozenset[str]
    callee: str  # the call's family: `yaml.safe_load` and `yaml.load` are one
    call: ast.Call | None  # the call itself (its positional arguments tell two calls of one callee apart)
    names: frozenset[str]  # the names its arguments are made of, with their origins
    line: int
    guards: tuple[Guard, ...]
    end_line: int = 0  # the last line of the call (of a view, its `def` line; it starts at its decorators)
    start_line: int = 0

    @property
    def args(self) -> str:
        if self.call is None:
            return ""
        try:
            return ", ".join(ast.unparse(a) for a in self.call.args)
        except (RecursionError, ValueError, AttributeError):  # a tree too deep (or too new) to print
            return f"<{len(self.call.args)} arguments>"

    @property
    def span(self) -> tuple[int, int]:
        return (self.start_line or self.line, max(self.end_line, self.line))


def dotted(expr: ast.expr) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        inner = dotted(expr.value)
        return f"{inner}.{expr.attr}" if inner else expr.attr
    if isinstance(expr, ast.Call):
        return dotted(expr.func)
    return ""
