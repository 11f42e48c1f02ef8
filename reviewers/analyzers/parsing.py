"""Python parsing for analyzers that fall back to line rules: a syntax tree, or None.

`reviewers.analyzers.pysyntax.parse_python` reads every Python version and says why it could not;
these are its forms for callers that only need to know whether there is a tree (an import scan, a
test lookup, a settings value). A changed file's own tree, and the reason it has none, come from
`ChangedFile.python_tree` and `ChangedFile.python_syntax_error`.
"""

from __future__ import annotations

import ast

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
