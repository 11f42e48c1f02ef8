"""A workspace over files held in memory: the head commit as a path → text mapping.

Tests, the evaluation and the replay environment of the learning loop all have the files at head
as plain data (a snapshot stored with the review), so they review through this class rather than a
git checkout. `from_changes` rebuilds the new side of a bare diff when no files are available: the
lines the hunks show, at their real line numbers, with the gaps left blank so that line numbers and
evidence stay exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reviewers.analyzers.changed_file import new_side_text
from reviewers.kernel.budget import SearchBudget
from reviewers.kernel.contracts import CoverageReason, FileChange, SearchHit
from reviewers.pattern_search import PatternSearch, search_files


class SnapshotWorkspace:
    """The files at head, given as text. Implements `reviewers.kernel.contracts.Workspace`."""

    def __init__(self, files: Mapping[str, str], *, partial_paths: Sequence[str] = ()) -> None:
        self._files = dict(files)
        self._partial = frozenset(partial_paths)

    @classmethod
    def from_changes(cls, changes: Sequence[FileChange]) -> SnapshotWorkspace:
        """The new side of the changed hunks of a bare diff (no file contents available)."""
        files = {
            change.path: reconstruct_new_side(change)
            for change in changes
            if change.status != "deleted" and not change.is_binary and change.hunks
        }
        return cls(files, partial_paths=list(files))

    def is_partial(self, path: str) -> bool:
        """Whether the text of a path was rebuilt from hunks only (lines outside them are blank)."""
        return path in self._partial

    def read_file(self, path: str) -> str | None:
        return self._files.get(path)

    def unreadable_reason(self, path: str) -> tuple[CoverageReason, str] | None:
        """Never one: every text here was given (its size and encoding are the reviewers' to judge)."""
        return None

    def list_paths(self) -> list[str]:
        return sorted(self._files)

    def search(self, pattern: str, *, max_hits: int = 50, budget: SearchBudget | None = None) -> list[SearchHit]:
        search = PatternSearch(pattern, budget=budget)
        return search_files(search, sorted(self._files), self._files.get, max_hits=max_hits)


def reconstruct_new_side(change: FileChange) -> str:
    """The new-side text a diff shows for one file, with unseen lines left empty."""
    return new_side_text(change)
