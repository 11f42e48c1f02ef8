"""A search pattern from a model, run with a time budget: the `search` tool's regular expressions.

The model writes the pattern, and a prompt injection in the code under review can write the model's
next call: a pattern such as `(a|a)*$` passes any cheap syntactic filter and takes exponential time
on a line of a's (1.6 s on 25 characters, doubling per character, issue 11). Python's `re` cannot be
interrupted, so patterns run on the `regex` package, whose matching takes a `timeout`: each line gets
SEARCH_TIME_BUDGET_S, and the first line that runs out refuses the pattern with an `InputError` the
toolbox turns into an invalid step. The budget is per line, not per search: a catastrophic pattern
explodes on one line, while an ordinary one over a large repository (or on a machine under load) takes
a long time only in total, and must not be refused for that — the analyzers search with their own
patterns through the same workspaces.

`PatternSearch.may_match(text)` is a prefilter: the longest run of characters every match contains
(`required_literal`), looked for with `in` over a whole file before its lines are matched one by
one. A 10,000-line merge request's reviewers run about 60 searches; without it they were half the
review's time.
"""

from __future__ import annotations

import importlib
import re
import warnings
from typing import Any

import regex

from reviewers.kernel.errors import InputError

# re's own parser and opcodes read a pattern's structure (private modules, typed as Any)
sre_parse: Any = importlib.import_module("re._parser")
sre: Any = importlib.import_module("re._constants")

SEARCH_TIME_BUDGET_S = 1.0  # one line of code takes microseconds to match; a second on one line is backtracking


class PatternSearch:
    """A compiled pattern; `matches` raises InputError when one line takes longer than the budget."""

    def __init__(self, pattern: str, *, literal_on_error: bool = False, budget_s: float = SEARCH_TIME_BUDGET_S):
        self.pattern = pattern
        self.budget_s = budget_s
        try:
            self.compiled = regex.compile(pattern)
        except regex.error as exc:
            if not literal_on_error:
                raise InputError(f"invalid search pattern {pattern!r}: {exc}") from exc
            self.compiled = regex.compile(regex.escape(pattern))
        self.literal = required_literal(self.compiled.pattern)

    def may_match(self, text: str) -> bool:
        """False only when no line of `text` can match (it lacks the pattern's required literal)."""
        return self.literal in text

    def matches(self, line: str) -> bool:
        try:
            return self.compiled.search(line, timeout=self.budget_s) is not None
        except TimeoutError:
            raise InputError(
                f"search pattern {self.pattern!r} ran out of its {self.budget_s:g} s budget on one line; "
                "use a simpler one"
            ) from None


def required_literal(pattern: str) -> str:
    """The longest run of characters that every match of `pattern` contains, '' when none is certain.

    Read from `re`'s parse tree: literal runs in the pattern's top-level sequence, inside groups and
    inside repeats of at least one. Alternations, optional parts, classes, lookarounds and anything
    case-insensitive give nothing; a pattern `re` cannot parse (syntax only `regex` has) gives ''.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        return ""
    if tree.state.flags & re.IGNORECASE:
        return ""
    runs: list[str] = []
    _literal_runs(list(tree), runs)
    return max(runs, key=len, default="")


def _literal_runs(items: list[tuple[Any, Any]], runs: list[str]) -> None:
    current: list[str] = []
    for op, arg in items:
        if op is sre.LITERAL:
            current.append(chr(arg))
            continue
        if current:
            runs.append("".join(current))
            current = []
        if op is sre.SUBPATTERN:
            _group, add_flags, _del_flags, body = arg
            if not add_flags & re.IGNORECASE:
                _literal_runs(list(body), runs)
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            low, _high, body = arg
            if low >= 1:
                _literal_runs(list(body), runs)
        elif op is sre.ATOMIC_GROUP:
            _literal_runs(list(arg), runs)
    if current:
        runs.append("".join(current))
