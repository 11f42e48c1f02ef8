"""The diff model: unified diffs parsed into `FileChange`s, and questions asked of them.

Every review starts from a diff — `git diff -M` output for a local range or a pasted patch, or
GitLab's per-file hunk text — and every later stage asks it the same questions: which new-file
lines did this merge request touch, is a finding near a change, which old line pairs with a context
line (GitLab positions need both). The parser is strict where a mistake would misplace comments (hunk
line counts, hunk headers, stray lines are one clear `DiffParseError` naming the line) and lenient
where git itself is (a commit message before the first file, a mail signature after the last).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from reviewers.kernel.contracts import DiffLine, FileChange, FileStatus, Hunk, LineKind
from reviewers.kernel.errors import DiffParseError

DEV_NULL = "/dev/null"
# Longest excerpt of an offending line quoted in an error: enough to recognise it, short enough for one line.
ERROR_EXCERPT_CHARS = 80
# Longest diff line shown in a prompt overview; minified or generated lines would otherwise eat the budget.
OVERVIEW_LINE_CHARS = 200

# The extended header lines git writes between `diff --git` and `---`; all but the ones read below are
# informational (index hashes, similarity scores).
_GIT_INFO_HEADERS = ("index ", "similarity index ", "dissimilarity index ")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _excerpt(line: str) -> str:
    return repr(line if len(line) <= ERROR_EXCERPT_CHARS else line[:ERROR_EXCERPT_CHARS] + "...")


def _fail(line_no: int, what: str, line: str) -> DiffParseError:
    return DiffParseError(f"line {line_no}: {what}: {_excerpt(line)}")


# --- paths ----------------------------------------------------------------------------------------


def _unquote_c(text: str, start: int = 0) -> tuple[str, int]:
    """Decode git's C-quoted path beginning at `text[start] == '"'`; returns the path and the index
    after the closing quote. Octal escapes are raw bytes (UTF-8 when core.quotePath is on)."""
    out = bytearray()
    i = start + 1
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            return out.decode("utf-8", errors="replace"), i + 1
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
            digits = text[i + 1 : i + 4]
            if len(digits) == 3 and all(d in "01234567" for d in digits):
                out.append(int(digits, 8) & 0xFF)
                i += 4
                continue
            raise ValueError(f"bad escape \\{nxt}")
        out.extend(ch.encode("utf-8", errors="surrogateescape"))
        i += 1
    raise ValueError("unterminated quoted path")


_C_ESCAPE_OF = {code: f"\\{letter}" for letter, code in _C_ESCAPES.items()}


def quote_path(path: str, *, ascii_only: bool = True) -> str:
    """`path` as git writes it in a diff: verbatim when it holds nothing special, else in double
    quotes with C escapes (`\\n`, `\\t`, `\\"`, `\\\\`, octal for other control bytes) — git's
    `quote_c_style`. `ascii_only` (git's default `core.quotePath=true`) also writes bytes above 0x7f in
    octal; without it they stay as they are, for a person to read. `_unquote_c` reads both back."""
    data = path.encode("utf-8", errors="surrogateescape")
    if not any(b < 0x20 or b in (0x22, 0x5C, 0x7F) or (ascii_only and b >= 0x80) for b in data):
        return path
    if not ascii_only:
        return '"' + _quote_readable(path) + '"'
    out: list[str] = []
    for b in data:
        if b in _C_ESCAPE_OF:
            out.append(_C_ESCAPE_OF[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'


def _quote_readable(path: str) -> str:
    out: list[str] = []
    for ch in path:
        code = ord(ch)
        if code in _C_ESCAPE_OF:
            out.append(_C_ESCAPE_OF[code])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\{code:03o}")
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\{code - 0xDC00:03o}")
        else:
            out.append(ch)
    return "".join(out)


def _plain_path(value: str) -> str:
    """A path as written after `rename from`, `copy to` and the like: quoted or verbatim."""
    return _unquote_c(value)[0] if value.startswith('"') else value


def _marker_path(value: str) -> str:
    """The path after `--- ` or `+++ `. git ends a name holding spaces with a tab, and `diff -u` puts a
    timestamp after one, so an unquoted name stops at the first tab."""
    if value.startswith('"'):
        return _unquote_c(value)[0]
    tab = value.find("\t")
    return value if tab < 0 else value[:tab]


def _strip_prefix(path: str, prefix: str) -> str:
    return path[len(prefix) :] if path.startswith(prefix) else path


def _split_git_header(rest: str) -> tuple[str, str]:
    """The two paths of `diff --git A B`, prefixes kept. Unquoted names may hold spaces, which makes
    the line ambiguous; git resolves it as we do: equal names split in the middle, otherwise at
    " b/" (and the rename/copy lines that follow override the guess)."""
    if rest.startswith('"'):
        old, end = _unquote_c(rest)
        tail = rest[end:].lstrip(" ")
        return old, _plain_path(tail)
    quote = rest.find(' "')
    if quote >= 0 and rest.endswith('"'):
        return rest[:quote], _unquote_c(rest, quote + 1)[0]
    half = (len(rest) - 1) // 2
    if len(rest) % 2 == 1 and rest[half] == " " and rest[2:half] == rest[half + 3 :]:
        return rest[:half], rest[half + 1 :]
    cut = rest.find(" b/")
    if cut < 0:
        cut = rest.find(" ")
    if cut < 0:
        raise ValueError("expected two paths")
    return rest[:cut], rest[cut + 1 :]


# --- hunks ----------------------------------------------------------------------------------------


def _parse_range(text: str) -> tuple[int, int]:
    start, sep, count = text.partition(",")
    return int(start), int(count) if sep else 1


def _parse_hunk_header(line: str, line_no: int) -> tuple[int, int, int, int, str]:
    close = line.find(" @@", 3)
    ranges = line[3:close].split(" ") if close > 0 else []
    if len(ranges) != 2 or not ranges[0].startswith("-") or not ranges[1].startswith("+"):
        raise _fail(line_no, "bad hunk header", line)
    try:
        old_start, old_count = _parse_range(ranges[0][1:])
        new_start, new_count = _parse_range(ranges[1][1:])
    except ValueError:
        raise _fail(line_no, "bad hunk header", line) from None
    if min(old_start, old_count, new_start, new_count) < 0:
        raise _fail(line_no, "bad hunk header", line)
    # The section text is kept verbatim (leading space included) so "@@ ... @@" + header round-trips.
    return old_start, old_count, new_start, new_count, line[close + 3 :]


def _ended_early(line_no: int, header: str, where: str, old_left: int, new_left: int) -> DiffParseError:
    return DiffParseError(
        f"line {line_no}: the hunk {header.split(' @@')[0]} @@ of {where} ends early: "
        f"{old_left} old and {new_left} new lines missing"
    )


def _parse_hunk(lines: list[str], i: int, *, line_base: int, where: str) -> tuple[Hunk, int]:
    """One hunk starting at its `@@` line `lines[i]`; returns it and the index after it. The header's
    counts decide where the hunk ends, so a removed line reading "-- x" is never taken for a header."""
    header = lines[i]
    old_start, old_count, new_start, new_count, section = _parse_hunk_header(header, line_base + i)
    old_left, new_left = old_count, new_count
    old_no, new_no = old_start, new_start
    out: list[DiffLine] = []
    append = out.append
    line_type = DiffLine  # a local name: this loop runs once per diff line
    n = len(lines)
    i += 1
    while old_left > 0 or new_left > 0:
        if i >= n:
            raise _ended_early(line_base + i, header, where, old_left, new_left)
        line = lines[i]
        first = line[:1]
        if first == "+":
            if new_left <= 0:
                raise _fail(line_base + i, f"added line past the hunk's counts in {where}", line)
            append(line_type("add", line[1:], None, new_no))
            new_no += 1
            new_left -= 1
        elif first == "-":
            if old_left <= 0:
                raise _fail(line_base + i, f"removed line past the hunk's counts in {where}", line)
            append(line_type("del", line[1:], old_no, None))
            old_no += 1
            old_left -= 1
        # An empty line is a context line whose leading space an editor or mailer stripped.
        elif first == " " or not line:
            if old_left <= 0 or new_left <= 0:
                raise _fail(line_base + i, f"context line past the hunk's counts in {where}", line)
            append(line_type("context", line[1:], old_no, new_no))
            old_no += 1
            new_no += 1
            old_left -= 1
            new_left -= 1
        elif line.startswith("diff --git "):
            raise _ended_early(line_base + i, header, where, old_left, new_left)
        elif first != "\\":  # "\ No newline at end of file" may follow any line
            raise _fail(line_base + i, f"unexpected line inside a hunk of {where}", line)
        i += 1
    while i < n and lines[i].startswith("\\"):
        i += 1
    return Hunk(old_start, old_count, new_start, new_count, section, tuple(out)), i


def _split_lines(text: str | bytes) -> list[str]:
    """Lines of a diff. Only "\\n" ends a line (str.splitlines would also split on form feeds and
    U+2028 inside code); a "\\r" before it is the CRLF terminator and is dropped, interior ones stay."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


# --- whole diffs ----------------------------------------------------------------------------------


@dataclass
class _FileHeader:
    """What the lines before a file's first hunk said about it."""

    old_path: str
    new_path: str
    old_mode: str | None = None
    new_mode: str | None = None
    new_file: bool = False
    deleted: bool = False
    renamed: bool = False
    copied: bool = False
    is_binary: bool = False

    def build(self, hunks: tuple[Hunk, ...]) -> FileChange:
        old_path, new_path = self.old_path, self.new_path
        if new_path == DEV_NULL or self.deleted:
            status: FileStatus = "deleted"
            new_path = old_path
        elif old_path == DEV_NULL or self.new_file:
            status = "added"
            old_path = new_path
        elif self.copied:
            # FileStatus has no "copied": the copy is a new file, and old_path names its source
            # because the hunks' old line numbers refer to it.
            status = "added"
        elif self.renamed or old_path != new_path:
            status = "renamed"
        else:
            status = "modified"
        return FileChange(
            path=new_path,
            old_path=old_path,
            status=status,
            hunks=hunks,
            is_binary=self.is_binary,
            old_mode=self.old_mode,
            new_mode=self.new_mode,
        )


class _DiffParser:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.n = len(lines)

    def is_plain_header(self, i: int) -> bool:
        return self.lines[i].startswith("--- ") and i + 1 < self.n and self.lines[i + 1].startswith("+++ ")

    def parse(self) -> list[FileChange]:
        lines, n = self.lines, self.n
        files: list[FileChange] = []
        i = 0
        while i < n:
            line = lines[i]
            if line.startswith("diff --git "):
                header, i = self.git_header(i)
            elif self.is_plain_header(i):
                header, i = self.plain_header(i)
            elif line.startswith(("diff --cc ", "diff --combined ")):
                raise _fail(i + 1, "combined diffs of merge commits are not supported", line)
            elif not files:
                # A commit message or mail header before the first file, as `git show` and
                # `git format-patch` write it; a hunk there, though, has lost its file.
                if line.startswith("@@ "):
                    raise _fail(i + 1, "hunk before any file header", line)
                i += 1
                continue
            elif not line.strip() or line.startswith("diff "):
                # Blank separators, and the command line GNU `diff -r` echoes before each file.
                i += 1
                continue
            elif line in ("-- ", "--"):
                break  # the signature that `git format-patch` appends
            else:
                raise _fail(i + 1, f"unexpected line after the hunks of {files[-1].path}", line)
            hunks: list[Hunk] = []
            where = header.new_path if header.new_path != DEV_NULL else header.old_path
            while i < n and lines[i].startswith("@@ "):
                hunk, i = _parse_hunk(lines, i, line_base=1, where=where)
                hunks.append(hunk)
            files.append(header.build(tuple(hunks)))
        if not files:
            for no, line in enumerate(lines, start=1):
                if line.strip():
                    raise _fail(no, "not a unified diff (no 'diff --git' or '---'/'+++' header)", line)
        return files

    def plain_header(self, i: int) -> tuple[_FileHeader, int]:
        old = _marker_path(self.lines[i][4:])
        new = _marker_path(self.lines[i + 1][4:])
        # git's a/ and b/ prefixes are dropped when every real side carries its own. (A `diff -u` of two
        # directories that happen to be named "a" and "b" cannot be told apart and loses them too.)
        if (old == DEV_NULL or old.startswith("a/")) and (new == DEV_NULL or new.startswith("b/")):
            old, new = _strip_prefix(old, "a/"), _strip_prefix(new, "b/")
        return _FileHeader(old_path=old, new_path=new), i + 2

    def git_header(self, i: int) -> tuple[_FileHeader, int]:
        lines, n = self.lines, self.n
        first = lines[i]
        try:
            old, new = _split_git_header(first[len("diff --git ") :])
        except ValueError as exc:
            raise _fail(i + 1, f"bad 'diff --git' line ({exc})", first) from None
        if old.startswith("a/") and new.startswith("b/"):
            old, new = old[2:], new[2:]
        h = _FileHeader(old_path=old, new_path=new)
        index_mode: str | None = None
        i += 1
        while i < n:
            line = lines[i]
            try:
                if line.startswith("@@ ") or line.startswith("diff --git "):
                    break
                if line.startswith("--- "):
                    if i + 1 >= n or not lines[i + 1].startswith("+++ "):
                        raise _fail(i + 1, "'---' without a following '+++'", line)
                    minus = _marker_path(line[4:])
                    plus = _marker_path(lines[i + 1][4:])
                    if not h.renamed and not h.copied:
                        h.old_path = _strip_prefix(minus, "a/") if minus != DEV_NULL else h.old_path
                        h.new_path = _strip_prefix(plus, "b/") if plus != DEV_NULL else h.new_path
                    h.new_file = h.new_file or minus == DEV_NULL
                    h.deleted = h.deleted or plus == DEV_NULL
                    i += 2
                    break
                if line.startswith("old mode "):
                    h.old_mode = line[9:].strip()
                elif line.startswith("new mode "):
                    h.new_mode = line[9:].strip()
                elif line.startswith("new file mode "):
                    h.new_file, h.new_mode = True, line[14:].strip()
                elif line.startswith("deleted file mode "):
                    h.deleted, h.old_mode = True, line[18:].strip()
                elif line.startswith(("rename from ", "rename old ")):
                    h.renamed, h.old_path = True, _plain_path(line[12:])
                elif line.startswith(("rename to ", "rename new ")):
                    h.renamed, h.new_path = True, _plain_path(line[line.index(" ", 7) + 1 :])
                elif line.startswith("copy from "):
                    h.copied, h.old_path = True, _plain_path(line[10:])
                elif line.startswith("copy to "):
                    h.copied, h.new_path = True, _plain_path(line[8:])
                elif line.startswith("index "):
                    parts = line.split()
                    index_mode = parts[2] if len(parts) == 3 else None
                elif line.startswith(_GIT_INFO_HEADERS) or not line.strip():
                    pass
                elif line.startswith("Binary files ") and line.endswith(" differ"):
                    h.is_binary = True
                elif line == "GIT binary patch":
                    h.is_binary = True
                    # Base85 payload blocks until the next file; none of its lines can start with "diff".
                    i += 1
                    while i < n and not lines[i].startswith("diff --git "):
                        i += 1
                    break
                else:
                    raise _fail(i + 1, f"unexpected line in the header of {h.new_path}", line)
            except ValueError as exc:  # a malformed quoted path
                raise _fail(i + 1, f"bad path ({exc})", line) from None
            i += 1
        if index_mode is not None and h.old_mode is None and h.new_mode is None:
            h.old_mode = h.new_mode = index_mode
        return h, i


def parse_unified_diff(text: str | bytes) -> list[FileChange]:
    """Parse `git diff` (with or without `-M`/`-C`) or plain `diff -u` output into one `FileChange`
    per file, in order. Bytes are decoded as UTF-8 with replacement characters; an empty diff is an
    empty list; anything that does not parse raises `DiffParseError` naming the line."""
    return _DiffParser(_split_lines(text)).parse()


def parse_file_patch(
    *,
    old_path: str,
    new_path: str,
    patch: str,
    new_file: bool = False,
    deleted_file: bool = False,
    renamed_file: bool = False,
    old_mode: str | None = None,
    new_mode: str | None = None,
    collapsed: bool = False,
    too_large: bool = False,
) -> FileChange:
    """One file from a host that sends hunks without the `diff --git` header (GitLab's `/diffs`
    entries: `diff`, `a_mode`, `b_mode`, `new_file`, `renamed_file`, `deleted_file`, `collapsed`,
    `too_large`). A file the host did not send text for is marked `collapsed`, never dropped."""
    # GitLab writes mode "0" for the missing side of an added or deleted file.
    old_mode = None if old_mode in (None, "", "0") else old_mode
    new_mode = None if new_mode in (None, "", "0") else new_mode
    header = _FileHeader(
        old_path=old_path,
        new_path=new_path,
        old_mode=old_mode,
        new_mode=new_mode,
        new_file=new_file,
        deleted=deleted_file,
        renamed=renamed_file,
    )
    lines = _split_lines(patch)
    hunks: list[Hunk] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("@@ "):
            hunk, i = _parse_hunk(lines, i, line_base=1, where=new_path)
            hunks.append(hunk)
        elif line.startswith(("Binary files ", "GIT binary patch")):
            header.is_binary = True
            break
        elif not line.strip():
            i += 1
        else:
            raise _fail(i + 1, f"unexpected line in the diff of {new_path}", line)
    change = header.build(tuple(hunks))
    if not hunks and not header.is_binary and (collapsed or too_large):
        reason = "too_large" if too_large else "collapsed"
        return FileChange(
            path=change.path,
            old_path=change.old_path,
            status=change.status,
            old_mode=change.old_mode,
            new_mode=change.new_mode,
            collapsed=True,
            collapsed_reason=reason,
        )
    return change


# --- positions ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _FilePositions:
    change: FileChange
    kinds: dict[int, LineKind]  # new line → "add" | "context"
    old_of_context: dict[int, int]  # new line → old line, for context lines
    spans: tuple[tuple[int, int, int], ...]  # (first new line, last new line, new−old shift after the hunk)


class DiffIndex:
    """Answers position questions about a parsed diff by new-file path and new-file line."""

    def __init__(self, files: Sequence[FileChange]) -> None:
        self._files: dict[str, _FilePositions] = {}
        for f in files:
            kinds: dict[int, LineKind] = {}
            old_of: dict[int, int] = {}
            spans = []
            for h in f.hunks:
                for ln in h.lines:
                    if ln.new_line is not None:
                        kinds[ln.new_line] = ln.kind
                        if ln.old_line is not None:
                            old_of[ln.new_line] = ln.old_line
                # A pure deletion (new_count 0) sits just after new_start: its span is that point.
                first = h.new_start if h.new_count else h.new_start + 1
                last = h.new_start + h.new_count - 1 if h.new_count else h.new_start
                old_end = h.old_start + h.old_count if h.old_count else h.old_start + 1
                new_end = h.new_start + h.new_count if h.new_count else h.new_start + 1
                spans.append((first, last, new_end - old_end))
            self._files[f.path] = _FilePositions(f, kinds, old_of, tuple(spans))

    def paths(self) -> list[str]:
        return list(self._files)

    def file(self, path: str) -> FileChange | None:
        entry = self._files.get(path)
        return entry.change if entry else None

    def line_kind(self, path: str, new_line: int) -> Literal["add", "context"] | None:
        """Whether the diff shows that new-file line as added or as context; None when it does not."""
        entry = self._files.get(path)
        kind = entry.kinds.get(new_line) if entry else None
        return "add" if kind == "add" else "context" if kind == "context" else None

    def in_or_near_hunk(self, path: str, line: int, *, slack: int = 3) -> bool:
        """Whether a new-file line lies inside a hunk of that file or within `slack` lines of one."""
        entry = self._files.get(path)
        if entry is None:
            return False
        return any(first - slack <= line <= last + slack for first, last, _ in entry.spans)

    def old_line_for(self, path: str, new_line: int) -> int | None:
        """The old-file line paired with an unchanged new-file line: from the hunk for a context line,
        by the preceding hunks' shift for a line outside every hunk. None for an added line, an added,
        binary or collapsed file, or a path not in the diff."""
        entry = self._files.get(path)
        if entry is None:
            return None
        change = entry.change
        if (change.status == "added" and change.old_path == change.path) or change.is_binary or change.collapsed:
            return None
        kind = entry.kinds.get(new_line)
        if kind == "context":
            return entry.old_of_context[new_line]
        if kind == "add":
            return None
        shift = 0
        for first, last, after in entry.spans:
            if new_line < first:
                break
            if new_line <= last:
                return None  # inside a hunk's new range but neither added nor context: cannot happen
            shift = after
        return new_line - shift if new_line - shift >= 1 else None


# --- prompt overview ------------------------------------------------------------------------------


def _file_title(f: FileChange) -> str:
    rename = f" (from {f.old_path})" if f.old_path != f.path else ""
    mode = f" mode {f.old_mode}→{f.new_mode}" if f.old_mode and f.new_mode and f.old_mode != f.new_mode else ""
    extra = " (binary)" if f.is_binary else f" (diff not available: {f.collapsed_reason})" if f.collapsed else ""
    return f"=== {f.status} {f.path}{rename}{mode} +{f.additions} -{f.deletions}{extra}"


def _clip(text: str) -> str:
    return text if len(text) <= OVERVIEW_LINE_CHARS else text[:OVERVIEW_LINE_CHARS] + "…"


_MARK = {"add": "+", "del": "-", "context": " "}


def render_diff_overview(files: Sequence[FileChange], *, max_lines: int) -> str:
    """A trimmed view of the diff for prompts: each file's title and the start of its first hunk,
    never more than `max_lines` lines, saying what was left out. Later files get what earlier small
    ones did not use."""
    if max_lines < 1:
        raise ValueError("max_lines must be at least 1")
    out: list[str] = []
    for index, f in enumerate(files):
        remaining_files = len(files) - index
        # Keep one line for the closing "N more files" note whenever files are still waiting.
        budget = max_lines - len(out) - (1 if remaining_files > 1 else 0)
        # Titles first: while a line is left, each file gets at least its title.
        share = max(1, budget // remaining_files) if budget >= 1 else 0
        if share < 1:
            rest = files[index:]
            adds, dels = sum(r.additions for r in rest), sum(r.deletions for r in rest)
            out.append(f"… {len(rest)} more files not shown (+{adds} -{dels})")
            break
        out.append(_clip(_file_title(f)))
        # Below four lines a hunk excerpt is a header and a note: the title's counts say as much.
        if not f.hunks or share < 4:
            continue
        first = f.hunks[0]
        body = [f"@@ -{first.old_start},{first.old_count} +{first.new_start},{first.new_count} @@{first.header}"]
        body.extend(_clip(_MARK[ln.kind] + ln.text) for ln in first.lines)
        more_hunks = len(f.hunks) - 1
        room = share - 1
        if len(body) <= room and not more_hunks:
            out.extend(body)
            continue
        if len(body) + (1 if more_hunks else 0) <= room:
            out.extend(body)
            out.append(f"… {more_hunks} more hunks not shown")
            continue
        shown = body[: max(room - 1, 0)]
        out.extend(shown)
        cut_lines = len(body) - len(shown)
        also = f" and {more_hunks} more hunks" if more_hunks else ""
        out.append(f"… {cut_lines} more lines of this hunk{also} not shown")
    return "\n".join(out[:max_lines])
