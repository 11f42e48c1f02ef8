"""A search pattern from a model, run on a linear-time engine: the `search` tool's regular expressions.

The model writes the pattern, and a prompt injection in the code under review can write the model's
next call: a pattern such as `(a|a)*$` passes any cheap syntactic filter and takes exponential time
on a line of a's in a backtracking engine (1.6 s on 25 characters, doubling per character, issue 11),
and `a*a*a*a*[bc]` is slow on every line (issue 21). Those engines were bounded by a clock, so a busy
machine refused what an idle one answered. Patterns now run on RE2 (`google-re2`), which matches in
time linear in the line: no pattern backtracks, and what a search costs is the characters it matches,
which the call's `SearchBudget` counts (`reviewers.kernel.budget`). The same search gives the same
answer on any machine.

RE2 refuses what needs backtracking — backreferences (`\\1`), lookarounds (`(?=`, `(?<!`), atomic groups
and possessive repeats — and a model's pattern whose compiled program is larger than
MODEL_PATTERN_MAX_MEM (`.{0,200}x`, `\\p{L}+`): the cost of a character grows with the program, so the
cap keeps the character count an honest measure. Each is an `InputError` saying why, which the
toolbox turns into an invalid step. RE2's classes are ASCII (`\\w`, `\\d`, `\\b`).

The analyzers search with their own patterns (escaped names) through the same workspaces and pass no
call budget: RE2's default program size and no character count, so a large repository never gets
them refused.

`PatternSearch.may_match(text)` is a prefilter: the longest run of characters every match contains
(`required_literal`), looked for with `in` over a whole file before its lines are matched one by
one. A 10,000-line merge request's reviewers run about 60 searches; without it they were half the
review's time.
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import re2

from reviewers.kernel.budget import SearchBudget
from reviewers.kernel.contracts import SearchHit
from reviewers.kernel.errors import InputError

# re's own parser and opcodes read a pattern's structure (private modules, typed as Any)
sre_parse: Any = importlib.import_module("re._parser")
sre: Any = importlib.import_module("re._constants")

MAX_SEARCH_LINE_CHARS = 400  # a minified line is not worth matching, and it would crowd out every other hit
# RE2's memory for a model's pattern, which caps its compiled program at about a thousand instructions:
# every ordinary search pattern fits (a credential pattern with a bounded class, 114; `.{0,100}eval\(`,
# 909), while `(.{0,30}[a-m]){5}9` (1,370) and `\p{L}+` (1,201) are refused. Past that size a character
# costs the engine several times more, so counting characters would no longer count its work.
MODEL_PATTERN_MAX_MEM = 16 << 10
_TOO_LARGE = "pattern too large"


def _options(*, max_mem: int | None) -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is our InputError, not a line on stderr
    options.never_capture = True  # whether a line matches is all a search asks
    if max_mem is not None:
        options.max_mem = max_mem
    return options


class PatternSearch:
    """A compiled pattern (`InputError` when RE2 will not run it). With a call `budget` it is a model's
    pattern: its program is capped (MODEL_PATTERN_MAX_MEM), and `search_files` charges each line matched."""

    def __init__(self, pattern: str, *, literal_on_error: bool = False, budget: SearchBudget | None = None):
        self.pattern = pattern
        self.budget = budget
        options = _options(max_mem=MODEL_PATTERN_MAX_MEM if budget is not None else None)
        try:
            self.compiled: Any = re2.compile(pattern, options)
            self.literal = required_literal(pattern)
        except re2.error as exc:
            reason = _reason(exc)
            if not literal_on_error or _TOO_LARGE in reason or _python_reads(pattern):
                raise _refusal(pattern, reason) from None
            # not a regular expression in any dialect: searched for as it is written
            self.compiled = re2.compile(re2.escape(pattern), options)
            self.literal = pattern

    def may_match(self, text: str) -> bool:
        """False only when no line of `text` can match (it lacks the pattern's required literal)."""
        return self.literal in text

    def matches(self, line: str) -> bool:
        """Whether `line` holds a match: RE2, in time linear in the line."""
        return self.compiled.search(line.encode("utf-8", errors="replace")) is not None


def search_files(
    search: PatternSearch,
    paths: Sequence[str],
    text_of: Callable[[str], str | None],
    *,
    max_hits: int,
    lines_of: Callable[[str, str], Iterable[tuple[int, str]]] | None = None,
) -> list[SearchHit]:
    """The lines of `paths` (in that order) that `search` matches, at most `max_hits`: the one match loop
    of every workspace. `text_of` gives a file's text (None: skipped); `lines_of` its numbered lines
    (all of them by default). A file without the pattern's required literal is not matched line by
    line, and lines over MAX_SEARCH_LINE_CHARS are not matched at all.

    With the search's call budget, each line matched is charged its characters; when the next one does
    not fit, the search ends with the hits it has, and the file it was in and every later one of
    `paths` are counted unsearched (`SearchBudget.left_unsearched`)."""
    hits: list[SearchHit] = []
    if max_hits <= 0:
        return hits
    budget = search.budget
    for index, path in enumerate(paths):
        text = text_of(path)
        if text is None or not search.may_match(text):
            continue
        numbered = lines_of(path, text) if lines_of is not None else enumerate(text.splitlines(), start=1)
        for number, line in numbered:
            if len(line) > MAX_SEARCH_LINE_CHARS:
                continue
            if budget is not None and not budget.may_scan(len(line)):
                budget.left_unsearched(len(paths) - index)
                return hits
            if search.matches(line):
                hits.append(SearchHit(path=path, line=number, text=line))
                if len(hits) >= max_hits:
                    return hits
    return hits


def _reason(exc: re2.error) -> str:
    said = exc.args[0] if exc.args else ""
    return said.decode("utf-8", errors="replace") if isinstance(said, bytes) else str(said)


def _python_reads(pattern: str) -> bool:
    """Whether Python's `re` compiles `pattern`: then it is a regular expression that RE2 refuses."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        return False
    return True


def _refusal(pattern: str, reason: str) -> InputError:
    if _TOO_LARGE in reason:
        return InputError(
            f"search pattern {pattern!r} is too large for the search engine (over "
            f"{MODEL_PATTERN_MAX_MEM >> 10} KiB compiled); use a simpler one"
        )
    if _python_reads(pattern):
        return InputError(
            f"search pattern {pattern!r} needs backtracking, which the linear-time search engine does not do "
            f"({reason}): no backreferences, lookarounds, atomic groups or possessive repeats; use a simpler one"
        )
    return InputError(f"invalid search pattern {pattern!r}: {reason}")


def required_literal(pattern: str) -> str:
    """The longest run of characters that every match of `pattern` contains, '' when none is certain.

    Read from `re`'s parse tree: literal runs in the pattern's top-level sequence, inside groups and
    inside repeats of at least one. Alternations, optional parts, classes, lookarounds and anything
    case-insensitive give nothing; a pattern `re` cannot parse (syntax only `regex` has) gives ''.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        return ""
    if tree.state.flags & re.IGNORECASE:
        return ""
    runs: list[str] = []
    _literal_runs(list(tree), runs)
    return max(runs, key=len, default="")


def _literal_runs(items: list[tuple[Any, Any]], runs: list[str]) -> None:
    current: list[str] = []
    for op, arg in items:
        if op is sre.LITERAL:
            current.append(chr(arg))
            continue
        if current:
            runs.append("".join(current))
            current = []
        if op is sre.SUBPATTERN:
            _group, add_flags, _del_flags, body = arg
            if not add_flags & re.IGNORECASE:
                _literal_runs(list(body), runs)
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            low, _high, body = arg
            if low >= 1:
                _literal_runs(list(body), runs)
        elif op is sre.ATOMIC_GROUP:
            _literal_runs(list(arg), runs)
    if current:
        runs.append("".join(current))
