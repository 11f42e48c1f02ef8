"""What one call of a model's `search` may spend: characters matched and files fetched, counted, never timed.

A budget in seconds gave a busy machine another review than an idle one: the same pattern over the same
files was answered on one and refused on the other (issue 21 measured `a*a*a*a*[bc]` at 0.08 s a line
idle; under load it ran out). So a call is bounded by work, not by the clock. Its patterns run on a
linear-time engine (`reviewers.pattern_search`: RE2, whose cost per character is bounded by the
compiled pattern's size, which is capped too), so the characters a call matches bound its time, and
the budget counts them: up to `max_chars` per call (`may_scan`, charged line by line). Past it the
search ends with the hits it has and counts the files of its scope it did not search in full
(`unsearched`); the same search over the same files stops at the same line on any machine.

Files a workspace must fetch to search (GitLab's, over HTTP) are counted apart, as reads: up to
`max_reads` per call (`may_read`); past it the search covers the files it already holds and says how
many it left unread (`unread`). A plain pattern over a large folder is not the pattern's fault, so
neither budget refuses the call (issue 40): the search says what it did not cover.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Files one search call may fetch: a model's search scope is the changed files' folders, at most 200
# files (agent/gitlab/workspace.py); the changed files are read already, and 50 more HTTP reads are
# a few seconds on a LAN. The rest of the scope is left unread and named.
SEARCH_CALL_MAX_READS = 50
# Characters one search call may match: a scope of 200 files of 5,000 characters (an ordinary module),
# every line of each matched (no literal lets the prefilter skip a file). A pattern at the engine's size
# cap (`reviewers.pattern_search.MODEL_PATTERN_MAX_MEM`) costs RE2 about 0.3 s per million characters
# on a loaded 2-core machine, an ordinary one a hundredth of that; a search past it says what it left.
SEARCH_CALL_MAX_CHARS = 1_000_000


@dataclass
class SearchBudget:
    """The work one search call may do: `max_chars` characters matched, `max_reads` files fetched."""

    max_chars: int = SEARCH_CALL_MAX_CHARS
    max_reads: int = SEARCH_CALL_MAX_READS
    scanned: int = field(default=0, init=False)
    reads: int = field(default=0, init=False)
    unread: int = field(default=0, init=False)
    unsearched: int = field(default=0, init=False)

    def may_read(self) -> bool:
        """Whether the search may fetch one more file; counts it when so, and counts it unread when not."""
        if self.reads >= self.max_reads:
            self.unread += 1
            return False
        self.reads += 1
        return True

    def may_scan(self, chars: int) -> bool:
        """Whether one more line of `chars` characters may be matched; charges it when so."""
        if self.scanned + chars > self.max_chars:
            return False
        self.scanned += chars
        return True

    def left_unsearched(self, files: int) -> None:
        """Counts `files` of the scope as not searched in full: the scan budget ran out before them."""
        self.unsearched += files
