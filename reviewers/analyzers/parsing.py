"""Python parsing for every analyzer: one lock, warnings off, failures as None.

Reviewers run in threads, and CPython 3.11 (at least up to 3.11.7, the version this project runs
on) can fail `ast.parse` with "SystemError: AST constructor recursion depth mismatch" when two
threads parse at once (python/cpython gh-106905). Parsing is fast next to the analyzers' own work,
so it is serialised here; drop the lock once every supported Python carries the fix.
"""

from __future__ import annotations

import ast
import threading
import warnings

_PARSE_LOCK = threading.Lock()
# What a parse of arbitrary text may raise: bad syntax, NUL bytes, nesting too deep for the parser.
PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError, SystemError)


def parse_module(text: str, *, filename: str = "<reviewed>") -> ast.Module | None:
    """The module's syntax tree, or None when the text is not Python that parses."""
    try:
        with _PARSE_LOCK, warnings.catch_warnings():
            # Invalid escape sequences in the reviewed code are its problem, not a test failure here.
            warnings.simplefilter("ignore")
            return ast.parse(text, filename=filename)
    except PARSE_ERRORS:
        return None


def parse_expression(text: str) -> ast.Expression | None:
    """One expression's syntax tree, or None."""
    try:
        with _PARSE_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text, mode="eval")
    except PARSE_ERRORS:
        return None
