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
mean the code base is Python 2 (`python2_elsewhere`); otherwise its findings stand. Only findings
that Python 2 itself accepts are dropped (`accepted_by_python2`):
a syntax error on a line of Python 2 syntax, an undefined Python 2 builtin, `print >>f` — a real
syntax error, or a name missing on both, still reports.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.ruff import PYTHON2_BUILTINS, undefined_name
from reviewers.kernel.contracts import SearchHit

PACKAGING_FILES = ("setup.py", "setup.cfg", "pyproject.toml")
_CLASSIFIER = re.compile(r"Programming Language\s*::\s*Python\s*::\s*(?P<major>[23])(?:\.\d+)?\s*(?:['\"]|$)", re.M)
_REQUIRES = re.compile(r"python_requires\s*=\s*['\"]?(?P<spec>[^'\"\n]+)")
_BELOW_3 = re.compile(r"<\s*3(?:\.0)?\b|==\s*2\.|~=\s*2\.")

# Lines that are Python 2 syntax: print and exec statements, `except E, e:`, `raise E, "message"`,
# backquotes, `<>`, old octal literals, `ur""` strings, a tab where Python 3 wants consistent indents.
_PYTHON2_LINE = re.compile(
    r"^\s*print\b(?!\s*\()(?!\s*=)|^\s*exec\s+[^\s(=]|^\s*except\s+[^:]+,\s*\w+\s*:|^\s*raise\s+[\w.]+\s*,|"
    r"`|<>|(?<![\w.'\"/:-])0[0-7]+\b|\bur['\"]|^\t|^ +\t"
)


def python2_project(
    read_file: Callable[[str], str | None], search: Callable[[str], Sequence[SearchHit]], changed: Collection[str]
) -> bool:
    """Whether the project runs on Python 2 only: its packaging metadata names Python 2 and no Python 3
    (or requires a Python below 3), or, naming neither, a module the change did not touch has a
    Python 2 statement."""
    declared = declared_pythons(read_file)
    return declared == {"2"} or (not declared and python2_elsewhere(search, changed))


def declared_pythons(read_file: Callable[[str], str | None]) -> set[str]:
    """The major Python versions the packaging metadata names ({"2"} for a requirement below 3)."""
    majors: set[str] = set()
    for name in PACKAGING_FILES:
        text = read_file(name)
        if not text:
            continue
        majors.update(m.group("major") for m in _CLASSIFIER.finditer(text))
        requires = _REQUIRES.search(text)
        if requires and _BELOW_3.search(requires.group("spec")):
            return {"2"}
    return majors


# Python 2 statements a search of the repository can find (one regular expression, no parse).
PYTHON2_STATEMENT = r"^\s*(print\s+[\"'a-zA-Z_%]|except\s+[A-Za-z_.]+\s*,\s*[a-z_]\w*\s*:)"


def python2_elsewhere(search: Callable[[str], Sequence[SearchHit]], changed: Collection[str]) -> bool:
    """Whether a Python file the change did not touch has a Python 2 statement."""
    return any(hit.path.endswith(".py") and hit.path not in changed for hit in search(PYTHON2_STATEMENT))


def accepted_by_python2(issue: Issue, line_text: str) -> bool:
    """Whether Python 2 runs what this ruff finding calls broken: a syntax error on a line of Python 2
    syntax, a Python 2 builtin ruff calls undefined, `print >>stream` (F633), or the name Python 2's
    `except E, e:` binds being caught twice (B025)."""
    code = issue.rule.removeprefix("ruff:")
    if code == "invalid-syntax":
        return bool(_PYTHON2_LINE.search(line_text))
    if code == "F821":
        return undefined_name(issue.title) in PYTHON2_BUILTINS
    return code in ("F633", "B025") and bool(_PYTHON2_LINE.search(line_text))


CANDIDATE_CODES = frozenset({"invalid-syntax", "F821", "F633", "B025"})


def without_python2_syntax(file: ChangedFile, issues: list[Issue], is_python2_only: Callable[[], bool]) -> list[Issue]:
    """The issues less those Python 2 accepts, when the project is Python 2 only. `is_python2_only`
    is asked only when some issue could be one (it reads the packaging files once per review)."""
    candidates = [
        i
        for i in issues
        if i.rule.removeprefix("ruff:") in CANDIDATE_CODES and accepted_by_python2(i, file.line_text(i.line))
    ]
    if not candidates or not is_python2_only():
        return issues
    dropped = {id(i) for i in candidates}
    return [i for i in issues if id(i) not in dropped]
