"""Code written for Python 2, in a project that says it runs on Python 2 only.

ruff reads every file as Python 3.14. Much real history predates Python 3 support: a `print e`, an
`except ValueError, e:`, a body indented with a tab under a space-indented `def`, `basestring` — each a
syntax error or an undefined name to ruff, each correct on the only interpreter the project named.
A reviewer that calls such a file "does not parse" is wrong where the team runs it.

The project says which Pythons it supports in its packaging metadata at the repository root
(`setup.py`, `setup.cfg`, `pyproject.toml`): trove classifiers (`Programming Language :: Python ::
2.7`) and `python_requires`. A project is Python 2 only when it names a Python 2 version and no
Python 3 one, or requires a Python below 3. A project whose metadata names neither is judged by its
code: Python 2 statements (`print "..."`, `except E, e:`) in Python files the change did not touch
mean the code base is Python 2 (`python2_elsewhere`), and so do several in the files the change
wrote with nothing only Python 3 reads beside them (`python2_in_change`: a project's first commit,
all of it new); otherwise its findings stand. Only findings
that Python 2 itself accepts are dropped (`accepted_by_python2`):
a syntax error on a line of Python 2 syntax, an undefined Python 2 builtin, `print >>f` — a real
syntax error, or a name missing on both, still reports.

The same holds one step later: until Python 3.7 `async` and `await` were names (`asyncio.async(coro)`,
`def run(self, async=False)`). A project that supports a Python 3 below 3.7 (a classifier such as
`Python :: 3.5`, or `python_requires=">=3.4"`), or Python 2, or that names nothing and uses `async` as
a name in a module the change did not touch, runs that code; a syntax error on such a line is
dropped (`accepted_before_python37`).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.ruff import PYTHON2_BUILTINS, undefined_name
from reviewers.kernel.contracts import SearchHit

PACKAGING_FILES = ("setup.py", "setup.cfg", "pyproject.toml")
_CLASSIFIER = re.compile(r"Programming Language\s*::\s*Python\s*::\s*(?P<major>[23])(?:\.\d+)?\s*(?:['\"]|$)", re.M)
_REQUIRES = re.compile(r"(?:python_requires|requires-python)\s*=\s*['\"]?(?P<spec>[^'\"\n]+)")
_BELOW_3 = re.compile(r"<\s*3(?:\.0)?\b|==\s*2\.|~=\s*2\.")
_PYTHON3_MINOR = re.compile(r"Programming Language\s*::\s*Python\s*::\s*3\.(?P<minor>\d+)\s*(?:['\"]|$)", re.M)
_REQUIRES_MINIMUM = re.compile(r"(?:>=|~=|==)\s*3\.(?P<minor>\d+)|>\s*3\.(?P<above>\d+)")
# `async`/`await` where Python 3.7+ wants the keyword but 3.6 read a name: an attribute (`asyncio.async(`),
# any `async` not before `def`/`for`/`with`, an `await` assigned, passed or named (`await=True`, `f(x, await)`).
_ASYNC_AS_NAME = re.compile(
    r"\.\s*(?:async|await)\b|\basync\b(?!\s+(?:def|for|with)\b)|\bawait\s*(?:=(?!=)|[),.\]:]|$)|"
    r"\bdef\s+await\b|[(,]\s*await\s*[,=)]"
)
_ASYNC_WORD = re.compile(r"\b(?:async|await)\b")
ASYNC_NAME_STATEMENT = r"(\.async\(|[(,] *async *=[^=]|^ *async *= )"

# Lines that are Python 2 syntax: print and exec statements, `except E, e:`, `raise E, "message"`,
# backquotes, `<>`, old octal literals, `ur""` strings, a tab where Python 3 wants consistent indents.
_PYTHON2_LINE = re.compile(
    r"^\s*print\b(?!\s*\()(?!\s*=)|^\s*exec\s+[^\s(=]|^\s*except\s+[^:]+,\s*\w+\s*:|^\s*raise\s+[\w.]+\s*,|"
    r"`|<>|(?<![\w.'\"/:-])0[0-7]+\b|\bur['\"]|^\t|^ +\t"
)
# Tuple parameters (`def visit(self, node, (left, right)):`, `lambda (k, v): v`): a parameter that
# opens a parenthesis where Python 3 wants a name. Checked over the whole statement, whose error ruff
# may report on a continuation line.
_TUPLE_PARAMETER = re.compile(r"^\s*def\s+\w+\s*\((?:[^()]*,)?\s*\(|\blambda\s*\(")
_STRING_OR_COMMENT = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|#.*")
STATEMENT_LOOKBACK = 12  # lines searched above an error for the start of a bracketed statement


def python2_project(
    read_file: Callable[[str], str | None], search: Callable[[str], Sequence[SearchHit]], changed: Collection[str]
) -> bool:
    """Whether the project runs on Python 2 only: its packaging metadata names Python 2 and no Python 3
    (or requires a Python below 3), or, naming neither, a module the change did not touch has a
    Python 2 statement."""
    declared = declared_pythons(read_file)
    return (
        declared == {"2"}
        or converted_by_2to3(read_file)
        or (not declared and (python2_elsewhere(search, changed) or python2_in_change(read_file, changed)))
    )


_USE_2TO3 = re.compile(r"\buse_2to3['\"]?\s*[=:]\s*(?!False\b|false\b|0\b)\S")


def converted_by_2to3(read_file: Callable[[str], str | None]) -> bool:
    """Whether the project's source is Python 2 that setuptools converts for Python 3 at install
    (`use_2to3=True` in `setup.py`, as a keyword or in a dict of them, or in `setup.cfg`): the source
    is Python 2 whatever the classifiers say, and Python 3 never reads it as written."""
    return any((text := read_file(name)) and _USE_2TO3.search(text) for name in ("setup.py", "setup.cfg"))


def declared_pythons(read_file: Callable[[str], str | None]) -> set[str]:
    """The major Python versions the packaging metadata names ({"2"} for a requirement below 3)."""
    return declared_versions(read_file)[0]


def oldest_python3_minor(read_file: Callable[[str], str | None]) -> int | None:
    """The oldest Python 3 minor version the packaging metadata names (classifiers, `python_requires`)."""
    return declared_versions(read_file)[1]


def declared_versions(read_file: Callable[[str], str | None]) -> tuple[set[str], int | None]:
    """What the packaging files say, read once: the major versions they name ({"2"} for a requirement
    below 3) and the oldest Python 3 minor version (classifiers, `python_requires`/`requires-python`)."""
    majors: set[str] = set()
    minors: list[int] = []
    for name in PACKAGING_FILES:
        text = read_file(name)
        if not text:
            continue
        majors.update(m.group("major") for m in _CLASSIFIER.finditer(text))
        minors.extend(int(m.group("minor")) for m in _PYTHON3_MINOR.finditer(text))
        requires = _REQUIRES.search(text)
        if requires and _BELOW_3.search(requires.group("spec")):
            return {"2"}, None
        if requires and (low := _REQUIRES_MINIMUM.search(requires.group("spec"))):
            majors.add("3")  # `>=3.8`: a Python 3 project
            minors.append(int(low.group("minor")) if low.group("minor") else int(low.group("above")) + 1)
    return majors, min(minors) if minors else None


def async_is_a_name(
    read_file: Callable[[str], str | None], search: Callable[[str], Sequence[SearchHit]], changed: Collection[str]
) -> bool:
    """Whether the project runs on a Python that reads `async` as a name: it names Python 2 or a Python 3
    below 3.7, or, naming no Python at all, a module the change did not touch uses `async` as a name."""
    majors, oldest = declared_versions(read_file)
    if oldest is not None:
        return oldest < 7 or "2" in majors
    if majors:
        return True  # Python 2 named, no Python 3 minor: older than 3.7 either way
    return any(hit.path.endswith(".py") and hit.path not in changed for hit in search(ASYNC_NAME_STATEMENT))


def accepted_before_python37(issue: Issue, line_text: str) -> bool:
    """Whether this ruff finding is a syntax error on a line that uses `async` or `await` as a name."""
    return issue.rule == "ruff:invalid-syntax" and bool(_ASYNC_AS_NAME.search(line_text))


# Python 2 statements a search of the repository can find (one regular expression, no parse).
PYTHON2_STATEMENT = r"^\s*(print\s+[\"'a-zA-Z_%]|except\s+[A-Za-z_.]+\s*,\s*[a-z_]\w*\s*:)"


# Statements only Python 2 reads, and syntax only Python 3 reads, line by line (no parse: the file
# parses in one of the two at most).
_PYTHON2_ONLY_STATEMENT = re.compile(
    r"^\s*(?:print\s+[\"'a-zA-Z_%]|except\s+[\w.()\s,]+,\s*[a-z_]\w*\s*:|raise\s+[\w.]+\s*,\s*\S|exec\s+[\"'a-z_])"
)
# Calls of what only Python 2 has (`unichr(...)`, `d.iteritems()`): a dialect's words, counted as its
# statements are (`python2_in_change`).
_PYTHON2_ONLY_CALL = re.compile(
    r"(?<![\w.])(?:unichr|xrange|basestring|raw_input|execfile)\s*\(|\.(?:has_key|iteritems|itervalues|iterkeys)\("
)
_PYTHON3_ONLY = re.compile(
    r"\bf[\"']|^\s*async\s+def\b|\bawait\s|^\s*nonlocal\s|\byield\s+from\b|\)\s*->\s*[\w\[\"']|"
    r"\bprint\(.*\b(?:end|file|sep)\s*="
)
MIN_PYTHON2_STATEMENTS = 2  # one `print x` is a slip in Python 3 code; several, and nothing of Python 3, are a dialect


_STRING_QUOTE = re.compile(r"\"\"\"|'''|\"|'")


def code_lines(text: str) -> list[str]:
    """The file's lines with what strings and comments say blanked out. A string keeps its prefix and
    its quotes (`f"` still reads as an f-string, `print "` as Python 2's print), not its words, so a
    docstring's `'ff=f'` or "we await the reply" is no syntax. Python's tokenizer reads Python 2 too
    (a backtick or `0777` is a token it does not know, not an error); a file it cannot read to the end
    (a string left open) is taken as it is."""
    lines = [list(line) for line in io.StringIO(text).readlines()]

    def blank(start: tuple[int, int], end: tuple[int, int]) -> None:
        for row in range(start[0], end[0] + 1):
            chars = lines[row - 1]
            first = start[1] if row == start[0] else 0
            last = end[1] if row == end[0] else len(chars)
            for k in range(first, min(last, len(chars))):
                if chars[k] not in "\r\n":
                    chars[k] = " "

    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                blank(token.start, token.end)
            elif token.type == tokenize.STRING and (quote := _STRING_QUOTE.search(token.string)):
                width = len(quote.group(0))
                row, col = token.start
                blank((row, col + quote.start() + width), (token.end[0], token.end[1] - width))
    except (tokenize.TokenError, SyntaxError):
        return text.splitlines()
    return ["".join(chars).rstrip("\r\n") for chars in lines]


def python2_in_change(read_file: Callable[[str], str | None], changed: Collection[str]) -> bool:
    """Whether the Python files the change wrote are Python 2 code: several Python 2 statements, and
    not one line only Python 3 reads (`code_lines`: what strings and comments say is not read)."""
    statements = 0
    for path in sorted(changed):
        if not path.endswith(".py") or (text := read_file(path)) is None:
            continue
        for line in code_lines(text):
            if _PYTHON3_ONLY.search(line):
                return False
            statements += bool(_PYTHON2_ONLY_STATEMENT.search(line) or _PYTHON2_ONLY_CALL.search(line))
    return statements >= MIN_PYTHON2_STATEMENTS


def python2_elsewhere(search: Callable[[str], Sequence[SearchHit]], changed: Collection[str]) -> bool:
    """Whether a Python file the change did not touch has a Python 2 statement."""
    return any(hit.path.endswith(".py") and hit.path not in changed for hit in search(PYTHON2_STATEMENT))


def accepted_by_python2(issue: Issue, line_text: str, statement: str = "") -> bool:
    """Whether Python 2 runs what this ruff finding calls broken: a syntax error on a line of Python 2
    syntax or in a statement with tuple parameters (`statement`: its text from its first line to the
    reported one), a Python 2 builtin ruff calls undefined, `print >>stream` (F633), or the name Python
    2's `except E, e:` binds being caught twice (B025)."""
    code = issue.rule.removeprefix("ruff:")
    if code == "invalid-syntax":
        return bool(_PYTHON2_LINE.search(line_text) or _TUPLE_PARAMETER.search(statement or line_text))
    if code == "F821":
        return undefined_name(issue.title) in PYTHON2_BUILTINS
    return code in ("F633", "B025") and bool(_PYTHON2_LINE.search(line_text))


def statement_text(lines: Sequence[str], line: int) -> str:
    """The statement that `line` (1-based) belongs to, from its first line: the nearest line above
    whose brackets are still open at `line` (at most STATEMENT_LOOKBACK lines up), else the line
    itself. Strings and comments are left out of the count; no parse (the file parses in one Python
    at most)."""
    if not 1 <= line <= len(lines):
        return ""
    start, depth = line, 0
    for k in range(line - 1, max(0, line - 1 - STATEMENT_LOOKBACK), -1):
        code = _STRING_OR_COMMENT.sub("", lines[k - 1])
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if depth > 0:
            start, depth = k, 0
            break
    return "\n".join(lines[start - 1 : line])


CANDIDATE_CODES = frozenset({"invalid-syntax", "F821", "F633", "B025"})


def without_python2_syntax(
    file: ChangedFile,
    issues: list[Issue],
    is_python2_only: Callable[[], bool],
    reads_async_as_name: Callable[[], bool] = lambda: False,
) -> list[Issue]:
    """The issues less those the project's own older interpreter accepts: Python 2's, when the project
    is Python 2 only; `async` as a name, when it runs on a Python below 3.7. The two questions are
    asked only when some issue could be one (they read the packaging files once per review)."""
    python2 = [
        i
        for i in issues
        if i.rule.removeprefix("ruff:") in CANDIDATE_CODES
        and accepted_by_python2(
            i, file.line_text(i.line), statement_text(file.lines, i.line) if i.rule == "ruff:invalid-syntax" else ""
        )
    ]
    older = [i for i in issues if accepted_before_python37(i, file.line_text(i.line))]
    dropped = {id(i) for i in python2} if python2 and is_python2_only() else set()
    real = None
    if any(id(i) not in dropped for i in older) and reads_async_as_name():
        if not dropped:  # with Python 2 lines in the file, Python 3's parser cannot say what is left
            real = syntax_error_after_async_names(file.text, older[0])
        dropped |= {id(i) for i in older}
    kept = [i for i in issues if id(i) not in dropped] if dropped else issues
    return [*kept, real] if real is not None else kept


def syntax_error_after_async_names(text: str, reported: Issue) -> Issue | None:
    """The first syntax error left once `async`/`await` names read as names, or None. ruff reports
    only the first syntax error of a file (the rest are mostly its echo), so a real one after an
    `asyncio.async(...)` would otherwise go unsaid. Python's own parser reads the text with each such
    name renamed in place (same length, so lines stay): a project below 3.7 has no newer syntax for
    it to refuse."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        while match := _ASYNC_AS_NAME.search(line):
            renamed = _ASYNC_WORD.sub(lambda w: w.group(0)[:-1] + "_", match.group(0), count=1)
            line = line[: match.start()] + renamed + line[match.end() :]
        lines[number] = line
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse("\n".join(lines))
    except SyntaxError as error:
        return replace(reported, line=error.lineno or 1, end_line=None, title=f"Syntax error: {error.msg}")
    except (ValueError, RecursionError, MemoryError):
        return None
    return None
