"""GitLab's per-file diff entries, computed from two snapshots of a repository for the fake server.

GitLab's `/merge_requests/:iid/diffs` returns one entry per changed file whose `diff` is the hunk
text without the `diff --git`/`---`/`+++` header. The fake builds the same text with difflib (the
hunk header rules match git's: a count of 1 is omitted, an empty side starts at line 0) and keeps,
for each file, which new-file lines the diff shows (added or context, with the paired old line) so
that it can validate a discussion position the way GitLab does.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

FileContent = str | bytes
RENAME_SIMILARITY = 0.5  # git's default for `-M`
CONTEXT_LINES = 3
NO_NEWLINE = "\\ No newline at end of file\n"
REGULAR_MODE = "100644"


def is_binary(content: FileContent) -> bool:
    if isinstance(content, str):
        return False
    if b"\0" in content[:8000]:
        return True
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def as_text(content: FileContent) -> str:
    return content if isinstance(content, str) else content.decode("utf-8")


def _range(start: int, stop: int) -> str:
    """git's hunk range: `start,count`, the count omitted when 1, start-1 when the side is empty."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


def _emit(out: list[str], sign: str, line: str) -> None:
    out.append(sign + line if line.endswith("\n") else sign + line + "\n" + NO_NEWLINE)


@dataclass
class FileHunks:
    text: str
    new_lines: dict[int, tuple[Literal["add", "context"], int | None]] = field(default_factory=dict)
    removed_old_lines: set[int] = field(default_factory=set)


def file_hunks(old: str, new: str, *, context: int = CONTEXT_LINES) -> FileHunks:
    """The hunks between two texts in GitLab's `diff` format, plus the line map of the new side."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    out: list[str] = []
    hunks = FileHunks(text="")
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@\n")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                for k in range(a2 - a1):
                    _emit(out, " ", a[a1 + k])
                    hunks.new_lines[b1 + k + 1] = ("context", a1 + k + 1)
                continue
            if tag in ("replace", "delete"):
                for k in range(a1, a2):
                    _emit(out, "-", a[k])
                    hunks.removed_old_lines.add(k + 1)
            if tag in ("replace", "insert"):
                for k in range(b1, b2):
                    _emit(out, "+", b[k])
                    hunks.new_lines[k + 1] = ("add", None)
    hunks.text = "".join(out)
    return hunks


@dataclass
class DiffEntry:
    """One element of GitLab's `/diffs` answer plus what position validation needs."""

    old_path: str
    new_path: str
    a_mode: str
    b_mode: str
    new_file: bool
    renamed_file: bool
    deleted_file: bool
    generated_file: bool
    diff: str
    collapsed: bool
    too_large: bool
    hunks: FileHunks

    def to_json(self) -> dict[str, Any]:
        return {
            "old_path": self.old_path,
            "new_path": self.new_path,
            "a_mode": self.a_mode,
            "b_mode": self.b_mode,
            "diff": self.diff,
            "collapsed": self.collapsed,
            "too_large": self.too_large,
            "new_file": self.new_file,
            "renamed_file": self.renamed_file,
            "deleted_file": self.deleted_file,
            "generated_file": self.generated_file,
        }


def _similarity(old: FileContent, new: FileContent) -> float:
    if old == new:
        return 1.0
    if is_binary(old) or is_binary(new):
        return 0.0
    return difflib.SequenceMatcher(None, as_text(old).splitlines(), as_text(new).splitlines()).ratio()


def _pair_renames(base: Mapping[str, FileContent], head: Mapping[str, FileContent]) -> dict[str, str]:
    """Deleted path → added path for files git would call renamed (best similarity ≥ 50 %)."""
    deleted = sorted(set(base) - set(head))
    added = sorted(set(head) - set(base))
    pairs: dict[str, str] = {}
    for old in deleted:
        scored = [(_similarity(base[old], head[new]), new) for new in added if new not in pairs.values()]
        best = max(scored, default=(0.0, ""))
        if best[0] >= RENAME_SIMILARITY:
            pairs[old] = best[1]
    return pairs


def _entry(
    *,
    old_path: str,
    new_path: str,
    old: FileContent | None,
    new: FileContent | None,
    too_large: bool,
    collapsed: bool,
    generated: bool,
    silently_empty: bool,
    max_diff_bytes: int,
) -> DiffEntry:
    binary = (old is not None and is_binary(old)) or (new is not None and is_binary(new))
    if binary:
        hunks = FileHunks(text=f"Binary files a/{old_path} and b/{new_path} differ\n")
    else:
        hunks = file_hunks(as_text(old) if old is not None else "", as_text(new) if new is not None else "")
    too_large = too_large or len(hunks.text.encode()) > max_diff_bytes
    text = "" if too_large or collapsed or silently_empty else hunks.text
    return DiffEntry(
        old_path=old_path,
        new_path=new_path,
        a_mode="0" if old is None else REGULAR_MODE,
        b_mode="0" if new is None else REGULAR_MODE,
        new_file=old is None,
        renamed_file=old is not None and new is not None and old_path != new_path,
        deleted_file=new is None,
        generated_file=generated,
        diff=text,
        collapsed=collapsed or too_large,
        too_large=too_large,
        hunks=hunks,
    )


def diff_entries(
    base: Mapping[str, FileContent],
    head: Mapping[str, FileContent],
    *,
    too_large: Iterable[str] = (),
    collapsed: Iterable[str] = (),
    generated: Iterable[str] = (),
    silently_empty: Iterable[str] = (),
    max_diff_bytes: int = 100_000,
) -> list[DiffEntry]:
    """Every changed file between two snapshots, ordered by new path as GitLab orders them.
    `silently_empty` paths get `diff: ""` with no flag set, as GitLab does for some large new files
    (gitlab-org/gitlab#414389)."""
    too_large_set, collapsed_set, generated_set = set(too_large), set(collapsed), set(generated)
    empty_set = set(silently_empty)
    renames = _pair_renames(base, head)
    renamed_targets = set(renames.values())
    entries: list[DiffEntry] = []

    def add(old_path: str, new_path: str, old: FileContent | None, new: FileContent | None) -> None:
        entries.append(
            _entry(
                old_path=old_path,
                new_path=new_path,
                old=old,
                new=new,
                too_large=new_path in too_large_set,
                collapsed=new_path in collapsed_set,
                generated=new_path in generated_set,
                silently_empty=new_path in empty_set,
                max_diff_bytes=max_diff_bytes,
            )
        )

    for path in sorted(set(base) | set(head)):
        if path in renames:
            add(path, renames[path], base[path], head[renames[path]])
        elif path in renamed_targets:
            continue
        elif path not in base:
            add(path, path, None, head[path])
        elif path not in head:
            add(path, path, base[path], None)
        elif base[path] != head[path]:
            add(path, path, base[path], head[path])
    return sorted(entries, key=lambda e: e.new_path)
