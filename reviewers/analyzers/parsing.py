"""Python parsing for analyzers that fall back to line rules: a syntax tree, or None.

`reviewers.analyzers.pysyntax.parse_python` reads every Python version and says why it could not;
these are its forms for callers that only need to know whether there is a tree (an import scan, a
test lookup, a settings value). A changed file's own tree, and the reason it has none, come from
`ChangedFile.python_tree` and `ChangedFile.python_syntax_error`.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from reviewers.analyzers.pysyntax import parse_python, parse_python_expression
from reviewers.kernel.errors import PythonSyntaxError


def parse_module(text: str, *, filename: str = "<reviewed>") -> ast.Module | None:
    """The module's syntax tree, or None when the text is not Python of any version."""
    try:
        return parse_python(text, filename)
    except PythonSyntaxError:
        return None


def parse_expression(text: str) -> ast.Expression | None:
    """One expression's syntax tree, or None."""
    try:
        return parse_python_expression(text)
    except PythonSyntaxError:
        return None


def child_blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The blocks of statements directly inside a statement: its body, else and finally blocks,
    each handler's and each case's."""
    blocks = [block for name in ("body", "orelse", "finalbody") if isinstance(block := getattr(stmt, name, None), list)]
    blocks += [handler.body for handler in getattr(stmt, "handlers", [])]
    blocks += [case.body for case in getattr(stmt, "cases", [])]
    return [[s for s in block if isinstance(s, ast.stmt)] for block in blocks]


def all_statements(body: Sequence[ast.stmt]) -> list[ast.stmt]:
    """Every statement of a block, nested ones included, in source order, without visiting
    expressions: imports and definitions are statements, and a walk of every node costs several
    times more on a big module."""
    out: list[ast.stmt] = []
    stack: list[ast.stmt] = list(reversed(body))
    while stack:
        stmt = stack.pop()
        out.append(stmt)
        stack.extend(reversed([s for block in child_blocks(stmt) for s in block]))
    return out
