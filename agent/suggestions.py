"""GitLab suggestion blocks: a finding's exact fix, applicable in one click on the merge request.

A block (```` ```suggestion:-N+M ````) replaces the commented line, N lines above it and M below,
with its content; an empty block deletes them. It is offered only when it applies cleanly at the
head commit on lines the change added: every line it replaces is an added line of the diff, and
reads there exactly as the fix expects. Otherwise the finding is posted without one.
"""

from __future__ import annotations

import re

from reviewers.kernel.contracts import FileChange, Suggestion


def applies_cleanly(suggestion: Suggestion, change: FileChange | None, *, anchor_line: int) -> bool:
    """Whether the fix's lines are added lines of this diff, as they read at head, around `anchor_line`."""
    if change is None or not suggestion.start_line <= anchor_line <= suggestion.end_line:
        return False
    added = change.added_lines()
    lines = [added.get(n) for n in range(suggestion.start_line, suggestion.end_line + 1)]
    if any(line is None for line in lines):
        return False
    return "\n".join(line or "" for line in lines) == suggestion.original


def suggestion_block(suggestion: Suggestion, *, anchor_line: int) -> str:
    """The markdown block, fenced longer than any backtick run in the code so the code stays inert."""
    longest = max((len(run) for run in re.findall(r"`+", suggestion.replacement)), default=0)
    fence = "`" * max(3, longest + 1)
    above, below = anchor_line - suggestion.start_line, suggestion.end_line - anchor_line
    content = suggestion.replacement + "\n" if suggestion.replacement else ""
    return f"{fence}suggestion:-{above}+{below}\n{content}{fence}"
