"""The files at the base of a change, rebuilt from the files at head and the diff.

A rule that asks "was this already so before the change?" (an import cycle that a rename only
re-spells) needs the base tree, and a review holds only the head tree and the diff. The diff is
enough: an unchanged file is the same at both ends, a changed file is its head text with the hunks
applied in reverse, a deleted file is its hunk of removed lines, an added file was not there, and a
renamed file stood at its old path.

What this cannot rebuild: a changed file the host sent without hunks (`collapsed`) or a binary one;
`text` answers None for those, and a caller must then make no claim about the base.
"""

from __future__ import annotations

from collections.abc import Sequence

from reviewers.kernel.contracts import FileChange, Workspace


def reverse_patch(head_text: str, change: FileChange) -> str | None:
    """The text before `change`, from its text after it; None when the hunks do not fit the text."""
    head = head_text.splitlines()
    base: list[str] = []
    position = 1  # the next head line (1-based) not yet copied
    for hunk in change.hunks:
        # An empty new side ("+4,0") sits after line new_start; otherwise the hunk starts at it.
        start = hunk.new_start + 1 if hunk.new_count == 0 else hunk.new_start
        if start < position or start - 1 > len(head):
            return None
        base += head[position - 1 : start - 1]
        position = start
        for line in hunk.lines:
            if line.kind == "del":
                base.append(line.text)
                continue
            if line.new_line is None or line.new_line != position or position > len(head):
                return None
            if line.kind == "context":
                base.append(head[position - 1])
            position += 1
    base += head[position - 1 :]
    return "\n".join(base) + ("\n" if base else "")


class BaseTree:
    """Read access to the files at the base of the change, and the rename mapping between the ends."""

    def __init__(self, head: Workspace, changes: Sequence[FileChange]) -> None:
        self.head = head
        self._changes = {c.path: c for c in changes}
        self.old_path_of = {c.path: c.old_path for c in changes if c.status != "added"}
        added = {c.path for c in changes if c.status == "added"}
        moved_away = {c.path for c in changes if c.status == "renamed"}
        self._by_old = {c.old_path: c for c in changes if c.status != "added"}
        head_paths = [p for p in head.list_paths() if p not in added and p not in moved_away]
        self._paths = sorted({*head_paths, *self._by_old})
        self._texts: dict[str, str | None] = {}

    def base_path(self, head_path: str) -> str | None:
        """Where a head file stood at the base; None for a file the change added."""
        change = self._changes.get(head_path)
        if change is None:
            return head_path
        return None if change.status == "added" else change.old_path

    def list_paths(self) -> list[str]:
        return list(self._paths)

    def text(self, base_path: str) -> str | None:
        if base_path not in self._texts:
            self._texts[base_path] = self._rebuild(base_path)
        return self._texts[base_path]

    def _rebuild(self, base_path: str) -> str | None:
        change = self._by_old.get(base_path)
        if change is None:
            return self.head.read_file(base_path) if base_path in self._paths else None
        if change.is_binary or (change.collapsed and not change.hunks):
            return None
        if change.status == "deleted":
            removed = [ln.text for h in change.hunks for ln in h.lines if ln.kind == "del"]
            return "\n".join(removed) + ("\n" if removed else "")
        head_text = self.head.read_file(change.path)
        return None if head_text is None else reverse_patch(head_text, change)
