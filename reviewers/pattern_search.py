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
"""

from __future__ import annotations

import regex

from reviewers.kernel.errors import InputError

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

    def matches(self, line: str) -> bool:
        try:
            return self.compiled.search(line, timeout=self.budget_s) is not None
        except TimeoutError:
            raise InputError(
                f"search pattern {self.pattern!r} ran out of its {self.budget_s:g} s budget on one line; "
                "use a simpler one"
            ) from None
