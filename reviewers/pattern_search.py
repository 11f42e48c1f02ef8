"""A search pattern from a model, run with a time budget: the `search` tool's regular expressions.

The model writes the pattern, and a prompt injection in the code under review can write the model's
next call: a pattern such as `(a|a)*$` passes any cheap syntactic filter and takes exponential time
on a line of a's (1.6 s on 25 characters, doubling per character, issue 11). Python's `re` cannot be
interrupted, so patterns run on the `regex` package, whose matching takes a `timeout`: one search
gets SEARCH_TIME_BUDGET_S over all the lines it tries, and a search that runs out is refused with
an `InputError` the toolbox turns into an invalid step.
"""

from __future__ import annotations

import time

import regex

from reviewers.kernel.errors import InputError

SEARCH_TIME_BUDGET_S = 1.0  # a search over a few hundred files takes milliseconds; a second is plenty
MIN_CALL_TIMEOUT_S = 0.001


class PatternSearch:
    """A compiled pattern and the time left to it; `matches` raises InputError once that is spent."""

    def __init__(self, pattern: str, *, literal_on_error: bool = False, budget_s: float = SEARCH_TIME_BUDGET_S):
        self.pattern = pattern
        self.budget_s = budget_s
        try:
            self.compiled = regex.compile(pattern)
        except regex.error as exc:
            if not literal_on_error:
                raise InputError(f"invalid search pattern {pattern!r}: {exc}") from exc
            self.compiled = regex.compile(regex.escape(pattern))
        self.deadline = time.monotonic() + budget_s

    def matches(self, line: str) -> bool:
        remaining = self.deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            return self.compiled.search(line, timeout=max(remaining, MIN_CALL_TIMEOUT_S)) is not None
        except TimeoutError:
            raise InputError(
                f"search pattern {self.pattern!r} ran out of its {self.budget_s:g} s budget; use a simpler one"
            ) from None
