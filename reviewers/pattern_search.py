"""A search pattern from a model, run with a time budget: the `search` tool's regular expressions.

The model writes the pattern, and a prompt injection in the code under review can write the model's
next call: a pattern such as `(a|a)*$` passes any cheap syntactic filter and takes exponential time
on a line of a's (1.6 s on 25 characters, doubling per character, issue 11). Python's `re` cannot be
interrupted, so patterns run on the `regex` package, whose matching takes a `timeout`: each line gets
SEARCH_TIME_BUDGET_S, and the first line that runs out refuses the pattern with an `InputError` the
toolbox turns into an invalid step.

A line budget alone bounds only the worst line: `a*a*a*a*[bc]` costs 0.63 s on a long line of a's, under
the line budget, and fifty such lines took 33 s (issue 21). So the model's `search` tool also
passes a `SearchBudget` for the whole call (SEARCH_CALL_BUDGET_S, less when the review's deadline is
nearer): each line may run only for what is left of it, and the call is refused once it is spent. The
analyzers search with their own patterns (escaped names, linear to match) through the same workspaces
and pass no call budget: a large repository, or a machine under load, must not get them refused.

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

from reviewers.kernel.budget import BudgetExhaustedError, SearchBudget
from reviewers.kernel.errors import InputError

# re's own parser and opcodes read a pattern's structure (private modules, typed as Any)
sre_parse: Any = importlib.import_module("re._parser")
sre: Any = importlib.import_module("re._constants")

SEARCH_TIME_BUDGET_S = 1.0  # one line of code takes microseconds to match; a second on one line is backtracking
# One model search over a workspace's search scope (at most a few hundred files, prefiltered by the
# pattern's literal) takes well under 0.1 s with an ordinary pattern; two seconds leave room for load.
SEARCH_CALL_BUDGET_S = 2.0


class PatternSearch:
    """A compiled pattern; `matches` raises InputError when one line takes longer than the line budget,
    or, with a call `budget`, once the lines matched so far have spent it."""

    def __init__(
        self,
        pattern: str,
        *,
        literal_on_error: bool = False,
        budget_s: float = SEARCH_TIME_BUDGET_S,
        budget: SearchBudget | None = None,
    ):
        self.pattern = pattern
        self.budget_s = budget_s
        self.budget = budget
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
        if self.budget is not None:
            return self._matches_within_call_budget(line, self.budget)
        try:
            return self.compiled.search(line, timeout=self.budget_s) is not None
        except TimeoutError:
            raise InputError(
                f"search pattern {self.pattern!r} ran out of its {self.budget_s:g} s budget on one line; "
                "use a simpler one"
            ) from None

    def _matches_within_call_budget(self, line: str, budget: SearchBudget) -> bool:
        timeout = min(self.budget_s, budget.timeout_s(self.pattern))
        started = budget.clock()
        try:
            found = self.compiled.search(line, timeout=timeout) is not None
        except TimeoutError:
            budget.charge(started)
            if budget.remaining_s() <= 0 or timeout < self.budget_s:
                raise BudgetExhaustedError(
                    f"search pattern {self.pattern!r} ran out of its {budget.seconds:g} s budget for one search; "
                    "use a simpler one"
                ) from None
            raise InputError(
                f"search pattern {self.pattern!r} ran out of its {self.budget_s:g} s budget on one line; "
                "use a simpler one"
            ) from None
        budget.charge(started)
        return found


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
