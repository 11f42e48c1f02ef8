"""The workspace of a review that has only a diff: the new side as far as the hunks show it.

A pasted patch or a recorded diff without files still lets reviewers read code at its real line
numbers: every added and context line sits at its new-file line, and lines the diff does not show
are blank, so evidence quoted from the text lines up with the diff and with GitLab positions.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.workspaces.snapshot import reconstruct_new_side
from reviewers.kernel.budget import SearchBudget
from reviewers.kernel.contracts import CoverageReason, FileChange, SearchHit
from reviewers.pattern_search import PatternSearch, search_files


class DiffWorkspace:
    """Implements `reviewers.kernel.contracts.Workspace` over the changed files of a bare diff."""

    def __init__(self, files: Sequence[FileChange]) -> None:
        # Deleted files are absent at head; every other changed path exists, even when its text is unknown.
        self._changes = {f.path: f for f in files if f.status != "deleted"}
        self._texts: dict[str, str] = {
            path: reconstruct_new_side(change)
            for path, change in self._changes.items()
            if change.hunks and not change.is_binary
        }

    def read_file(self, path: str) -> str | None:
        """The known lines of a changed file, with blank lines where the diff shows nothing; None for a
        deleted, binary or unchanged-content file (a pure rename or mode change) and for any other path."""
        return self._texts.get(path)

    def unreadable_reason(self, path: str) -> tuple[CoverageReason, str] | None:
        """Never one: every text here was given (its size and encoding are the reviewers' to judge)."""
        return None

    def list_paths(self) -> list[str]:
        """The changed paths that exist at head: all this workspace knows of."""
        return sorted(self._changes)

    def search(self, pattern: str, *, max_hits: int = 50, budget: SearchBudget | None = None) -> list[SearchHit]:
        """Known new-side lines matching a regular expression (RE2, `reviewers.pattern_search`; a pattern
        that is no regular expression at all is searched as a literal), in path and line order."""
        search = PatternSearch(pattern, literal_on_error=True, budget=budget)

        def known_lines(path: str, _text: str) -> list[tuple[int, str]]:
            hunks = self._changes[path].hunks
            return sorted((line.new_line, line.text) for h in hunks for line in h.lines if line.new_line is not None)

        return search_files(search, sorted(self._texts), self._texts.get, max_hits=max_hits, lines_of=known_lines)
