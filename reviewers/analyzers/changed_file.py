"""What every analyzer reads and returns: a changed file at head, and an issue found in it.

An analyzer sees one changed file — its text at the head commit and the lines the diff added — and
returns `Issue`s: a line, a rule, a severity and words. The reviewer turns issues into `Finding`s
(evidence, fingerprint, per-file limits), so analyzers stay small, pure and testable on strings.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass
from functools import cached_property

from reviewers.contracts import FileChange, Severity


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem an analyzer found. `kind` names a family of problems ("tls-verify", "shell") so
    that two analyzers reporting the same problem a line apart become one finding."""

    line: int
    rule: str
    severity: Severity
    title: str
    body: str
    end_line: int | None = None
    kind: str = ""


@dataclass
class ChangedFile:
    """A changed file at the head commit, as analyzers see it."""

    change: FileChange
    text: str

    @property
    def path(self) -> str:
        return self.change.path

    @property
    def language(self) -> str:
        return self.change.language

    @cached_property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def line_text(self, number: int) -> str:
        """The text of a 1-based line at head, or "" past the end."""
        return self.lines[number - 1] if 1 <= number <= len(self.lines) else ""

    @cached_property
    def changed_lines(self) -> dict[int, str]:
        """New-file line → text of the lines this change wrote. A file the host sent without a diff
        (`collapsed`) has no hunks to go by, so all of it counts as changed rather than none of it."""
        if self.change.collapsed and not self.change.hunks:
            return dict(enumerate(self.lines, start=1))
        return {n: self.line_text(n) for n in self.change.added_lines()}

    @cached_property
    def removed_lines(self) -> list[str]:
        return [ln.text for h in self.change.hunks for ln in h.lines if ln.kind == "del"]

    @cached_property
    def partial(self) -> bool:
        """Whether the text looks rebuilt from the diff alone (a bare-diff review): it ends at the last
        line the hunks show, and every line they do not show is blank. Checks that need the whole
        file (undefined or unused names) are then skipped rather than reported wrongly."""
        shown = self.change.new_lines()
        if not shown or len(self.lines) != max(shown):
            return False
        unseen = [n for n in range(1, len(self.lines) + 1) if n not in shown]
        return bool(unseen) and all(not self.lines[n - 1].strip() for n in unseen)

    def is_changed(self, line: int) -> bool:
        return line in self.changed_lines

    def touches(self, start: int, end: int) -> bool:
        """Whether any line in [start, end] was written by this change."""
        return any(start <= n <= end for n in self.changed_lines)

    @cached_property
    def python_tree(self) -> ast.Module | None:
        """The parsed module (parsing is not executing), or None for other languages and for text
        that does not parse — such as a file rebuilt from diff hunks only."""
        if self.language != "python":
            return None
        try:
            with warnings.catch_warnings():
                # Invalid escape sequences in the reviewed code are its problem, not a test failure here.
                warnings.simplefilter("ignore")
                return ast.parse(self.text, filename=self.path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
