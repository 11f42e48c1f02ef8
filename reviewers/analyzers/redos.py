"""`python:redos` (CWE-1333): a regular expression the change adds or alters that backtracks badly.

A pattern such as `^(a+)+$` takes time exponential (or a high polynomial) in the length of a
string that almost matches, so one request can hold a worker for minutes. The engine is
regexploit (PyPI, Doyensec's ReDoS finder): it reads Python's own parse of the pattern
(`sre_parse`), looks for a repeated character that two quantifiers can both consume, and builds the
attack string, which the finding quotes. It was chosen over a fuzzing engine because it answers
statically, from the pattern alone, with the string that proves it, and it never runs the regex.

Which patterns: a literal first argument of `re.compile/match/search/fullmatch/sub/subn/split/
findall/finditer` (through the module `re` under any alias), on lines the change wrote, whose pattern
and flags were not already in the file at the base. Reported when regexploit rates the worst case at
least cubic (`MIN_STARRINESS`, as its own command line does).

The engine gets a budget counted in nodes, never seconds: a pattern whose parse has more than
`MAX_PATTERN_NODES` nodes, or whose alternatives expand to more than `MAX_BRANCH_PATHS` paths
(regexploit expands every branch, exponentially), is not checked and is named in the review's
coverage, as is a pattern the engine fails on or an engine that is not installed. A review never
fails because of it.

Not caught: a pattern built at run time (a variable, an f-string, a concatenation), the `regex`
module, patterns of other languages, and backtracking that needs more than one repeated character
class to line up (regexploit's known limits).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from reviewers.analyzers.base_tree import reverse_patch
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.parsing import parse_module
from reviewers.kernel.contracts import CoverageReason

RULE = "python:redos"
RE_FUNCTIONS = frozenset({"compile", "match", "search", "fullmatch", "sub", "subn", "split", "findall", "finditer"})
# where each function takes `flags` by position: compile(pattern, flags), sub(pattern, repl, string, count, flags)
FLAGS_POSITION = {"compile": 1, "match": 2, "search": 2, "fullmatch": 2, "split": 3, "findall": 2, "finditer": 2,
                  "sub": 4, "subn": 4}  # fmt: skip
MIN_STARRINESS = 3  # regexploit's command line reports from cubic up; quadratic is common and mostly harmless
MAX_PATTERN_NODES = 2000  # a hand-written pattern has tens of nodes; thousands is a generated one
MAX_BRANCH_PATHS = 4096  # paths through the alternatives that regexploit expands one by one
MAX_PATTERNS_PER_FILE = 200


@dataclass(frozen=True)
class Pattern:
    line: int
    end_line: int
    text: str
    flags: int | None  # None: flags the text does not fix (a variable)


@dataclass
class RedosResult:
    issues: list[Issue]
    unchecked: list[tuple[CoverageReason, str]]


def _re_names(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """(names bound to the `re` module, names bound to its functions → the function)."""
    modules: set[str] = set()
    functions: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "re"}
        elif isinstance(node, ast.ImportFrom) and node.module == "re" and node.level == 0:
            functions |= {a.asname or a.name: a.name for a in node.names if a.name in RE_FUNCTIONS}
    return modules, functions


def _flags(node: ast.expr | None, modules: set[str]) -> int | None:
    if node is None:
        return 0
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
        value = getattr(re, node.attr, None)
        return int(value) if isinstance(value, re.RegexFlag) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _flags(node.left, modules), _flags(node.right, modules)
        return None if left is None or right is None else left | right
    return None


def literal_patterns(tree: ast.Module) -> list[Pattern]:
    """Every literal pattern handed to a function of `re` in the module."""
    modules, functions = _re_names(tree)
    if not modules and not functions:
        return []
    found: list[Pattern] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in modules:
            name = func.attr if func.attr in RE_FUNCTIONS else None
        elif isinstance(func, ast.Name):
            name = functions.get(func.id)
        else:
            name = None
        pattern = node.args[0]
        if name is None or not isinstance(pattern, ast.Constant) or not isinstance(pattern.value, str):
            continue
        position = FLAGS_POSITION[name]
        flag_node = next((k.value for k in node.keywords if k.arg == "flags"), None)
        if flag_node is None and len(node.args) > position:
            flag_node = node.args[position]
        found.append(Pattern(node.lineno, node.end_lineno or node.lineno, pattern.value, _flags(flag_node, modules)))
    return found


def _nodes(parsed: Any, budget: int) -> int:
    """How many nodes Python's parse of a pattern has, counting no further than `budget`."""
    count = 0
    stack: list[Any] = [parsed]
    while stack and count <= budget:
        item = stack.pop()
        count += 1
        if isinstance(item, list | tuple):
            stack.extend(item)
        elif hasattr(item, "data") and isinstance(item.data, list):  # sre_parse.SubPattern
            stack.extend(item.data)
    return count


def _paths(parsed: Any, budget: int, sre_constants: Any) -> int:
    """An upper bound on the paths through a pattern's alternatives, stopping past `budget`."""
    total = 1
    for op, value in getattr(parsed, "data", parsed):
        if op is sre_constants.BRANCH:
            total *= max(1, sum(_paths(branch, budget, sre_constants) for branch in value[1]))
        elif op is sre_constants.SUBPATTERN:
            total *= _paths(value[-1], budget, sre_constants)
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
            total *= _paths(value[2], budget, sre_constants)
        if total > budget:
            return total
    return total


class _Engine:
    """regexploit, imported on first use (it imports `sre_parse`, deprecated since Python 3.11)."""

    def __init__(self) -> None:
        self.error: str | None = None
        self._loaded = False

    def load(self) -> bool:
        if not self._loaded:
            self._loaded = True
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    import sre_constants
                    import sre_parse

                    from regexploit.ast.sre import SreOpParser
                    from regexploit.redos import find
                self.parser_class: Any = SreOpParser
                self.find: Any = find
                self.sre_parse: Any = sre_parse
                self.sre_constants: Any = sre_constants
            except ImportError as exc:
                self.error = f"the ReDoS engine (regexploit) is not installed: {exc}"
        return self.error is None

    def worst(self, pattern: str, flags: int) -> Any | None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # regexploit reads some patterns through deprecated paths
            raw = self.sre_parse.parse(pattern, flags)
            if _nodes(raw, MAX_PATTERN_NODES) > MAX_PATTERN_NODES:
                raise _OverBudget(f"over {MAX_PATTERN_NODES} nodes")
            if _paths(raw, MAX_BRANCH_PATHS, self.sre_constants) > MAX_BRANCH_PATHS:
                raise _OverBudget(f"over {MAX_BRANCH_PATHS} paths through its alternatives")
            parsed = self.parser_class().parse_sre(pattern, flags)
            found: Iterator[Any] = iter(self.find(parsed))
            return next((r for r in found if r.starriness >= MIN_STARRINESS), None)


class _OverBudget(Exception):
    pass


ENGINE = _Engine()


def _degree(starriness: int) -> str:
    names = ("linear", "quadratic", "cubic", "quartic", "quintic", "sextic", "septic", "octic", "nonic", "decic")
    return "exponential" if starriness > len(names) else names[starriness - 1]


def _before(file: ChangedFile) -> set[tuple[str, int | None]]:
    if file.change.status == "added" or not file.change.hunks:
        return set()
    base_text = reverse_patch(file.text, file.change)
    tree = parse_module(base_text) if base_text is not None else None
    return {(p.text, p.flags) for p in literal_patterns(tree)} if tree is not None else set()


def redos_issues(file: ChangedFile) -> RedosResult:
    """The changed literal patterns of a Python file that backtrack badly, and those not checked."""
    tree = file.python_tree
    result = RedosResult([], [])
    if tree is None:
        return result
    changed = [p for p in literal_patterns(tree) if file.touches(p.line, p.end_line)]
    if not changed:
        return result
    before = _before(file)
    changed = [p for p in changed if (p.text, p.flags) not in before][:MAX_PATTERNS_PER_FILE]
    if changed and not ENGINE.load():
        said = f"{len(changed)} regular expression(s) not checked for ReDoS: {ENGINE.error}"
        result.unchecked.append(("unavailable", said))
        return result
    for pattern in changed:
        shown = pattern.text if len(pattern.text) <= 80 else pattern.text[:77] + "..."
        try:
            redos = ENGINE.worst(pattern.text, pattern.flags or 0)
        except _OverBudget as exc:
            said = f"regular expression at line {pattern.line} not checked for ReDoS: {exc}"
            result.unchecked.append(("budget", said))
            continue
        except re.error:
            continue  # not a pattern Python accepts: the call fails at once, no backtracking to fear
        except Exception as exc:  # noqa: BLE001 - the engine's own failure must not end the review
            result.unchecked.append(
                ("analyzer-error", f"regular expression at line {pattern.line} not checked for ReDoS: "
                 f"{type(exc).__name__} in regexploit")
            )  # fmt: skip
            continue
        if redos is None:
            continue
        attack = redos.example()
        result.issues.append(
            Issue(
                pattern.line,
                RULE,
                "medium",
                f"Regular expression can backtrack for a very long time ({_degree(redos.starriness)})",
                f"The pattern `{shown}` lets two quantifiers consume the same character "
                f"({redos.repeated_character}), so a string that almost matches makes the engine try "
                f"{_degree(redos.starriness)}ly many ways before failing. Attack string: `{attack}`. "
                "If the text can come from outside, make the repetitions exclusive (one quantifier per "
                "character class, an atomic group or possessive quantifier on Python 3.11+), or bound the input "
                "length.",
                end_line=pattern.end_line,
                kind="redos",
                confidence="medium",
                cwe="CWE-1333",
            )
        )
    return result
