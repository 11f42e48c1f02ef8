"""A time budget spent by one call: the seconds a model's `search` may take, across every line it matches.

A per-line budget bounds only the worst line: `a*a*a*a*[bc]` costs 0.63 s on a 400-character line, under a
1 s line budget, and fifty such lines held a reviewer for 33 s (issue 21). So the search tool hands the
workspace one `SearchBudget` per call; the match loop asks it how long the next line may take
(`timeout_s`, passed to the regex engine as its timeout) and charges what the line took (`charge`).
The clock is a parameter, so a test can spend the budget without waiting for it.

Files a workspace must fetch to search (GitLab's, over HTTP) are counted apart, as reads: up to
`max_reads` per call (`may_read`); past it the search covers the files it already holds and says how
many it left unread (`unread`). Their time is not charged to the matching seconds: a plain pattern
over a large folder was refused when it was (issue 40), though the pattern was not at fault.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from reviewers.kernel.errors import InputError

# Files one search call may fetch: a model's search scope is the changed files' folders, at most 200
# files (agent/gitlab/workspace.py); the changed files are read already, and 50 more HTTP reads are
# a few seconds on a LAN. The rest of the scope is left unread and named.
SEARCH_CALL_MAX_READS = 50


class BudgetExhaustedError(InputError):
    """A search ran past its per-call budget: the pattern's fault (an invalid step), never retried."""


@dataclass
class SearchBudget:
    """`seconds` of matching for one search call, measured with `clock` (seconds, monotonic)."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    max_reads: int = SEARCH_CALL_MAX_READS
    spent: float = field(default=0.0, init=False)
    reads: int = field(default=0, init=False)
    unread: int = field(default=0, init=False)

    def may_read(self) -> bool:
        """Whether the search may fetch one more file; counts it when so, and counts it unread when not."""
        if self.reads >= self.max_reads:
            self.unread += 1
            return False
        self.reads += 1
        return True

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
