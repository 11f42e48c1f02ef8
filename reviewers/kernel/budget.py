"""A time budget spent by one call: the seconds a model's `search` may take, across every line it matches.

A per-line budget bounds only the worst line: `a*a*a*a*[bc]` costs 0.63 s on a 400-character line, under a
1 s line budget, and fifty such lines held a reviewer for 33 s (issue 21). So the search tool hands the
workspace one `SearchBudget` per call; the match loop asks it how long the next line may take
(`timeout_s`, passed to the regex engine as its timeout) and charges what the line took (`charge`).
The clock is a parameter, so a test can spend the budget without waiting for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from reviewers.kernel.errors import InputError


class BudgetExhaustedError(InputError):
    """A search ran past its per-call budget: the pattern's fault (an invalid step), never retried."""


@dataclass
class SearchBudget:
    """`seconds` of matching for one search call, measured with `clock` (seconds, monotonic)."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    spent: float = field(default=0.0, init=False)

    def remaining_s(self) -> float:
        return self.seconds - self.spent

    def timeout_s(self, pattern: str) -> float:
        """How long the next match may run; raises `BudgetExhaustedError` when nothing is left."""
        left = self.remaining_s()
        if left <= 0:
            raise BudgetExhaustedError(
                f"search pattern {pattern!r} ran out of its {self.seconds:g} s budget for one search; use a simpler one"
            )
        return left

    def charge(self, started: float) -> None:
        """Charge the time since `started` (a reading of `clock`)."""
        self.spent += max(0.0, self.clock() - started)
