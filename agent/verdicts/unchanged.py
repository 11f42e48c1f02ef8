"""Findings on code the merge request did not really change.

A diff shows a line as added when only its trailing comment changed (`except Exception:` gained
`# pragma: no cover`), when it was only re-indented, or when it moved verbatim (a class moved to a
new module). A finding there is about code that was already in the repository, not about this
change, and a careful reviewer would not raise it on this merge request.

The check compares the code of the finding's added line, with comments and whitespace dropped,
against the code of every line the merge request deleted (in any file: a move crosses files), and
asks its neighbours to agree: the lines just above and below it must read as the lines at the same
offsets from the deleted twin did (context lines for an edit in place, moved lines inside a moved
block; a line of the old file the diff does not show counts as disagreeing). It
applies only to rules that judge a line by itself; see `looks_at_line_alone`.

What it does not catch: a moved block whose lines were also edited, a move into a file whose diff
is collapsed or binary, and a comment change on a line that continues a multi-line Python
statement (such a line does not tokenize alone, so its comment is kept and the lines differ).
Nor the first or last line of a moved block, or a line whose neighbour changed too: the
neighbour rule's price, so that a generic `except Exception:` deleted in one function and written
anew in another stays a finding, and a line whose surroundings changed may mean something new.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Sequence

from agent.diff import DiffIndex
from reviewers.kernel.contracts import FileChange, Finding

# Rules that report a line for what is written on it: ruff and bandit checks, the regex pattern
# and secrets rules, and the syntax-level Python security rules (python_hardening, python_auth).
LINE_LOCAL_PREFIXES = ("ruff:", "bandit:", "patterns:", "secrets:", "slips:")
LINE_LOCAL_RULES = frozenset(
    {
        "quality:empty-catch",
        "python:insecure-cookie",
        "python:weak-hash",
        "python:hardcoded-credential",
        "python:timing-unsafe-compare",
        "python:weak-password-hash",
        "python:tls-verify-disabled",
    }
)
_PYTHON_SUFFIXES = (".py", ".pyi")
_SKIPPED_TOKENS = frozenset(
    {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
)
_QUOTES = ("'", '"', "`")


def looks_at_line_alone(finding: Finding) -> bool:
    """Whether the finding's rule judges its line by what is written on it, so the same code moved or
    re-commented is the same finding about old code.

    Allowed by name, never by exclusion, so a new rule is left alone until someone decides: ruff and
    bandit rules (BLE001, S110, E722, F821, B007, F841 …), the pattern, secrets and empty-catch rules,
    and the syntax-level Python security rules. Left out on purpose: the taint interpreter's rules
    (`python:sql-interpolation`, `python:weak-random`, the JavaScript taint rules …), whose line may
    be unchanged while the flow into it is new; test-impact findings (`tests:*`), which are about
    what the change did to the tests; import cycles and layer rules, which are about other files;
    and the model's own findings (`llm`), whose reasoning may rest on the lines around."""
    rule = finding.rule
    return rule.startswith(LINE_LOCAL_PREFIXES) or rule in LINE_LOCAL_RULES


def _python_code(text: str) -> str | None:
    """The line's tokens without comments, one space apart; None when it does not tokenize alone
    (an unclosed bracket, the inside of a triple-quoted string)."""
    readline = io.StringIO(text.strip() + "\n").readline
    try:
        tokens = [t.string for t in tokenize.generate_tokens(readline) if t.type not in _SKIPPED_TOKENS]
    except (tokenize.TokenError, SyntaxError):
        return None
    return " ".join(tokens)


def _strip_trailing_comment(text: str) -> str:
    """Drops a trailing `//` or `#` comment only when nothing before it could open a string."""
    for marker in (" //", "\t//", " #", "\t#"):
        at = text.find(marker)
        if at > 0 and not any(q in text[:at] for q in _QUOTES):
            return text[:at]
    return text


def code_of(text: str, *, path: str) -> str:
    """The code of one line with comments and whitespace normalised away; "" for a blank line or
    a comment alone."""
    if path.endswith(_PYTHON_SUFFIXES):
        code = _python_code(text)
        if code is not None:
            return code
        return " ".join(text.split())  # the comment, if any, stays: the lines then simply differ
    stripped = text.strip()
    if stripped.startswith(("//", "#")):
        return ""
    return " ".join(_strip_trailing_comment(stripped).split())


class DeletedCode:
    """The code of every line the merge request deleted, and of the old side's context lines around
    them (what the hunks show of the old files), built once per review."""

    def __init__(self, changes: Sequence[FileChange]) -> None:
        self._where: dict[str, list[tuple[str, int]]] = {}
        self._old: dict[tuple[str, int], str] = {}  # (old path, old line) → code, deleted or context
        for change in changes:
            old_path = change.old_path or change.path
            for hunk in change.hunks:
                for line in hunk.lines:
                    if line.kind == "add" or line.old_line is None:
                        continue
                    code = code_of(line.text, path=old_path)
                    self._old[(old_path, line.old_line)] = code
                    if line.kind == "del" and code:
                        self._where.setdefault(code, []).append((old_path, line.old_line))

    def origin(self, code: str, neighbours: Sequence[tuple[int, str]]) -> tuple[str, int] | None:
        """Where a deleted line with this code was (old path, old line), provided its neighbours agree:
        each of `neighbours` ((offset, code) of the head lines just above and below it) reads as the
        old file's line at the same offset from that deleted line. A line alone proves little
        (`except Exception:` is deleted in one place and written anew in another, beside a `return
        None` like every other); a line with both its neighbours is the same code in the same place,
        or inside a block moved whole."""
        for old_path, old_line in self._where.get(code, []) if code else []:
            if all(self._old.get((old_path, old_line + offset)) == near for offset, near in neighbours):
                return old_path, old_line
        return None


def unchanged_code(
    finding: Finding, *, head_text: str | None, diff_index: DiffIndex, deleted: DeletedCode
) -> str | None:
    """Why a line-local finding is about code the merge request did not change, or None."""
    if head_text is None or not looks_at_line_alone(finding):
        return None
    if diff_index.line_kind(finding.path, finding.line) != "add":
        return None
    lines = head_text.splitlines()
    if finding.line > len(lines):
        return None
    at = finding.line - 1
    neighbours = [
        (offset, code_of(lines[at + offset], path=finding.path)) for offset in (-1, 1) if 0 <= at + offset < len(lines)
    ]
    origin = deleted.origin(code_of(lines[at], path=finding.path), neighbours)
    if origin is None:
        return None
    old_path, old_line = origin
    where = f"{finding.path}:{finding.line}"
    how = (
        f"only a comment or indentation changed, or it moved within the file; was line {old_line}"
        if old_path == finding.path
        else f"it moved from {old_path}:{old_line}"
    )
    return f"the code at {where} is unchanged by this merge request ({how})"
