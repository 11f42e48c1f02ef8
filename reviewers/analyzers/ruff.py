"""ruff as the code-quality analyzer: the file's text goes to `ruff check` on stdin.

ruff reads the text and never imports it. `--isolated` ignores the reviewed repository's own ruff
configuration (the reviewer asks its own questions; the project's CI runs its own lint), and the
rule set is the part of ruff that finds defects rather than style: syntax errors, pyflakes,
bugbear, blind and bare excepts, swallowed exceptions, pylint errors. Only diagnostics on lines the
change added are kept: a review comments on what the merge request wrote.

Severity policy: `_SEVERITY_BY_CODE` below (undefined names and syntax errors high; mutable
defaults, bare excepts, swallowed exceptions medium; unused names low). Rules in the selected
families that are style, not defects (`STYLE_RULES`: an unused loop variable, an f-string without a
placeholder, `type(x) == T`, a star-argument after a keyword), are "info": below every project's
minimum severity, so they are never posted; a project that wants them lowers `min_severity`.
ruff's diagnostics are facts about the text, so their confidence is high. Not posted: B018 on a
statement that only reads a name, attribute or item (see `touches_a_name`), B004 on a
`getattr(x, "__call__", default)` whose value is used, B006 on a command-line parameter whose
framework supplies the value (`Annotated[list[str], typer.Option()] = [...]`, a `@click.option`
command; see `cli_framework_default`), BLE001 that does not swallow the error (or
that catches only what its `try` raised), S110/S112/BLE001 around one cleanup call
(`sock.close()`), unused imports in a package's `__init__`, and F401 on an import a `# type:`
comment uses (mypy reads it; ruff does not), and F821 on a Python 2 builtin (`unicode`, `long`,
`xrange`) inside a Python 2 compatibility branch (see `compat_branch_name`), F821 in a module that
is a list of bare names (a vulture whitelist, `name_list_module`), F821 on the name Python 2's
`except ValueError, e:` binds (`python2_except_binding`), E722 on a bare `except:` that re-raises
or hands the exception on whole (`reraises`), ends by raising its own exception (`converts`), only
falls back from an import or a module attribute to another (`import_fallback`), gives up quietly
with a comment saying why (`explained_swallow`) or answers a predicate's no (`answers_no`), F401 on a
module imported inside a function for its side effects (`side_effect_import`), PLE0604 on an
`__all__` whose only non-strings are `X.__name__` (`names_at_run_time`), F401 on a name a quoted
type uses (`used_in_quoted_type`) or on a definition the change moved out and imports back
(`moved_out_and_imported_back`) or that is a feature test in a `try:` (`availability_check`); a real
undefined name there, or a Python 2 builtin anywhere else, still reports. F821 is high confidence only where the
module cannot receive the name at all and reads it where Python evaluates it (`unbound_anywhere`: not in
a local variable's annotation, nor in any annotation under `from __future__ import annotations`),
medium where it might.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from pathlib import Path, PurePosixPath
from typing import Any

from reviewers.analyzers.base_tree import reverse_patch
from reviewers.analyzers.batch_answers import BatchAnswers
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.notebooks import notebook_may_define
from reviewers.kernel.contracts import Confidence, Severity, Suggestion
from reviewers.kernel.errors import AnalyzerError
from reviewers.paths import is_sample_path

RUFF_CACHE_SIZE = 256  # distinct file texts kept; a replay batch touches far fewer
RUFF_TIMEOUT_S = 30  # ruff lints a large file in well under a second; past this something is wrong
RUFF_TARGET_VERSION = "py314"  # newest syntax: an older target reports valid new syntax as errors
RUFF_SELECT = (
    "E9",  # syntax and IO errors
    "E711",
    "E712",
    "E721",
    "E722",  # None/True comparisons, type comparison, bare except
    "F",  # pyflakes: undefined and unused names, redefinitions, broken format strings
    "B",  # bugbear: mutable defaults, loop-variable closures, return in finally, ...
    "BLE001",  # `except Exception` that swallows everything
    "S110",
    "S112",  # try/except/pass and try/except/continue
    "PLE",  # pylint errors
    "RUF006",  # a created asyncio task whose reference is dropped
)
# Rules in the selected families that are style or framework idiom rather than defects.
RUFF_IGNORE = (
    "B008",  # function call in a default: FastAPI's Depends() idiom
    "B905",  # zip() without strict=: a style choice
    "B028",  # warnings.warn without stacklevel
    "B009",
    "B010",  # getattr/setattr with a constant: style
    "B904",  # raise without `from` inside except: noisy on legacy code, rarely a defect
    "F405",  # "may be undefined, or defined from star imports": F403 already names the cause
)

# Rules that need the whole file: on text rebuilt from diff hunks they report imports and
# definitions that are merely out of view.
WHOLE_FILE_RULES = frozenset({"invalid-syntax", "F401", "F403", "F405", "F811", "F821", "F822", "F823", "F841"})

_SEVERITY_BY_CODE: dict[str, Severity] = {
    "invalid-syntax": "high",
    "F821": "high",
    "F822": "high",
    "F823": "high",
    "F632": "medium",
    "F811": "low",
    "B006": "medium",
    "B012": "high",
    "B023": "medium",
    "B018": "low",
    "E722": "medium",
    "BLE001": "low",  # kept only when the handler swallows the error (see `swallows`)
    "S110": "medium",
    "S112": "medium",
    "F401": "low",
    "F841": "low",
    "F403": "low",
    "F405": "low",
    "E711": "low",
    "E712": "low",
    "RUF006": "medium",
}
# Style, not defects: true on real code and trivially so (`for i, k, v in items` with `k` unused, an
# `==` on exact types the code means), and never the reason a change is wrong. Kept as "info".
STYLE_RULES = frozenset(
    {
        "B007",  # unused loop variable: one element of an unpacked tuple, renaming it changes nothing
        "F541",  # f-string without placeholders: the text is right, the `f` is redundant
        "E721",  # `type(x) == T`: correct for exact types, which is what such code usually means
        "B026",  # star-argument after a keyword: the call is right, it only reads out of order
    }
)
_SEVERITY_BY_PREFIX: tuple[tuple[str, Severity], ...] = (("PLE", "high"), ("E9", "high"), ("B", "medium"))

# Why a rule matters, in the words of a reviewer: ruff's message says what, this says why.
_WHY: dict[str, str] = {
    "B006": "The default is built once and shared by every call, so state leaks between calls.",
    "E722": "A bare `except:` also catches KeyboardInterrupt and SystemExit and hides real failures.",
    "BLE001": "Catching every exception hides unexpected failures; catch what can actually be handled.",
    "S110": "The exception is swallowed without a trace; at least log it.",
    "S112": "The exception is swallowed without a trace; at least log it.",
    "F821": "This name is not defined anywhere the code can see: it fails at run time.",
    "F401": "Unused imports slow start-up and hide real dependencies.",
    "F841": "The value is computed and dropped; either it is not needed or something forgot to use it.",
    "B023": "The closure reads the loop variable when called, not when defined: all see the last value.",
    "B012": "A return/break/continue in `finally` silently discards the exception being raised.",
    "RUF006": "The event loop keeps only a weak reference; the task may be garbage-collected mid-flight.",
}


def severity_of(code: str) -> Severity:
    if code in STYLE_RULES:
        return "info"
    if code in _SEVERITY_BY_CODE:
        return _SEVERITY_BY_CODE[code]
    for prefix, severity in _SEVERITY_BY_PREFIX:
        if code.startswith(prefix):
            return severity
    return "low"


@dataclass(frozen=True)
class RuleSet:
    """What one ruff run asks: the rules, and whether the reviewed code's `# noqa` comments count.
    The code-quality rules honour them (a project's own lint decisions); bandit's checks run with
    them off and apply their own suppressions (`reviewers.analyzers.bandit`): a bare `# noqa`
    written for a line length is no decision about a shell."""

    select: tuple[str, ...]
    ignore: tuple[str, ...] = ()
    honour_noqa: bool = True

    def flags(self) -> tuple[str, ...]:
        ignore = ("--ignore", ",".join(self.ignore)) if self.ignore else ()
        noqa = () if self.honour_noqa else ("--ignore-noqa",)
        return ("--select", ",".join(self.select), *ignore, *noqa)


CODE_QUALITY_RULES = RuleSet(RUFF_SELECT, RUFF_IGNORE)


def run_ruff_json(text: str, *, path: str, rules: RuleSet = CODE_QUALITY_RULES) -> list[dict[str, Any]]:
    """ruff's JSON diagnostics for one file's text. Raises AnalyzerError when ruff cannot run."""
    diagnostics = json.loads(_ruff_stdout(text, path, rules))
    if not isinstance(diagnostics, list):
        raise AnalyzerError(f"ruff gave unexpected output on {path}")
    return [d for d in diagnostics if isinstance(d, dict)]


def _ruff_command(*targets: str, flags: tuple[str, ...] = CODE_QUALITY_RULES.flags()) -> list[str]:
    return [
        sys.executable, "-m", "ruff", "check", "--output-format", "json", "--no-cache", "--isolated",
        "--target-version", RUFF_TARGET_VERSION, *flags, *targets,
    ]  # fmt: skip


def _key(text: str, path: str, rules: RuleSet = CODE_QUALITY_RULES) -> tuple[tuple[str, ...], str, str]:
    # ruff's answer depends on the rules, the text and the file's name (`__init__.py`, `.pyi`), not its folder
    return rules.flags(), text, PurePosixPath(path).name


# (rules, text, file name) → ruff's JSON for that file
_prefetched: BatchAnswers[tuple[tuple[str, ...], str, str], str] = BatchAnswers()
# A file given by name is read as Python only under these suffixes (stdin takes any name).
BATCHABLE_SUFFIXES = (".py", ".pyi")


def prefetch(
    files: Sequence[tuple[str, str]], *, rules: RuleSet = CODE_QUALITY_RULES, background: bool = False
) -> None:
    """Run ruff once over many (path, text) files and keep each file's diagnostics.

    Starting the ruff process costs more than linting a file, so a reviewer that will read twenty
    files asks for all of them in one process. Each copy sits in its own folder under its own file
    name. A failed batch is ignored: each file is then linted on its own, as without a prefetch. In
    the `background`, readers of those files wait for the batch rather than start a process.
    """
    wanted = _prefetched.missing(_key(text, path, rules) for path, text in files if path.endswith(BATCHABLE_SUFFIXES))
    if len(wanted) < 2:
        return
    _prefetched.run_batch(wanted, lambda keys: _ruff_batch(keys, rules.flags()), background=background)


def lint_texts(
    files: Sequence[tuple[str, str]], *, rules: RuleSet = CODE_QUALITY_RULES
) -> dict[str, list[dict[str, Any]]]:
    """ruff's diagnostics for many (path, text) files in one process, by path; files it could not
    place are left out (an empty answer when the batch failed), and nothing is cached."""
    python = [(path, text) for path, text in files if path.endswith(BATCHABLE_SUFFIXES)]
    if not python:
        return {}
    keys = [_key(text, path, rules) for path, text in python]
    answers = _ruff_batch(list(dict.fromkeys(keys)), rules.flags())
    out: dict[str, list[dict[str, Any]]] = {}
    for (path, _), key in zip(python, keys, strict=True):
        if key in answers:
            out[path] = [d for d in json.loads(answers[key]) if isinstance(d, dict)]
    return out


def _ruff_batch(keys: Sequence[tuple[tuple[str, ...], str, str]], flags: tuple[str, ...]) -> dict[Any, str]:
    """ruff in one process over the keys' texts: each text's diagnostics, or none at all when the
    batch failed or gave an answer it cannot place."""
    with tempfile.TemporaryDirectory(prefix="reviewloop-ruff-") as tmp:
        copies = [Path(tmp) / str(i) / name for i, (_, _, name) in enumerate(keys)]
        for copy, (_, text, _) in zip(copies, keys, strict=True):
            copy.parent.mkdir()
            copy.write_text(text, encoding="utf-8")
        relative = [str(copy.relative_to(tmp)) for copy in copies]
        try:
            done = subprocess.run(
                _ruff_command(*relative, flags=flags), cwd=tmp, capture_output=True, text=True,
                timeout=RUFF_TIMEOUT_S * 4, check=False,
            )  # fmt: skip
            diagnostics = json.loads(done.stdout or "[]")
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            return {}
        if done.returncode not in (0, 1) or not isinstance(diagnostics, list):
            return {}
        by_copy: dict[Path, list[Any]] = {copy.resolve(): [] for copy in copies}
        for diag in diagnostics:
            owner = by_copy.get(Path(str(diag.get("filename", ""))).resolve()) if isinstance(diag, dict) else None
            if owner is None:
                return {}  # an answer we cannot place: trust none of the batch
            owner.append(diag)
    return {key: json.dumps(by_copy[copy.resolve()]) for copy, key in zip(copies, keys, strict=True)}


def _ruff_stdout(text: str, path: str, rules: RuleSet = CODE_QUALITY_RULES) -> str:
    ready = _prefetched.get(_key(text, path, rules), wait_s=RUFF_TIMEOUT_S * 4)
    return ready if ready is not None else _ruff_single(text, path, rules.flags())


# Replays review the same snapshot many times; ruff's answer depends only on the text and the name.
@functools.lru_cache(maxsize=RUFF_CACHE_SIZE)
def _ruff_single(text: str, path: str, flags: tuple[str, ...] = CODE_QUALITY_RULES.flags()) -> str:
    # one argument, `--stdin-filename=<path>`: a path such as `--evil.py` given as a separate argument
    # is read as an option, and the file was silently not linted (issue 11)
    command = _ruff_command(f"--stdin-filename={path}", "-", flags=flags)
    try:
        done = subprocess.run(command, input=text, capture_output=True, text=True, timeout=RUFF_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AnalyzerError(f"ruff could not run on {path}: {exc}") from exc
    # ruff exits 1 when it found something, 2 on its own failure.
    if done.returncode not in (0, 1):
        raise AnalyzerError(f"ruff failed on {path}: {done.stderr.strip()[:300]}")
    try:
        json.loads(done.stdout or "[]")
    except json.JSONDecodeError as exc:
        raise AnalyzerError(f"ruff gave unreadable output on {path}: {exc}") from exc
    return done.stdout or "[]"


_REPORTING_CALLS = frozenset(
    {"log", "debug", "info", "warning", "warn", "error", "exception", "critical", "print", "print_exc",
     "capture_exception", "report", "set_exception", "throw", "fail"}
)  # fmt: skip


def swallows(tree: ast.Module | None, line: int) -> bool:
    """Whether the `except` handler on `line` swallows what it caught: no re-raise, no use of the
    exception, no logging or reporting call. A broad except that does any of these is a deliberate
    boundary (a worker loop, a plugin call, a cleanup), which a reviewer does not question."""
    if tree is None:
        return True
    handler = next((n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.lineno == line), None)
    if handler is None:
        return True
    if _answers_a_predicate(handler):
        return False  # `except Exception: return False`: a predicate answers no (a validator), not a lost error
    owner = next((n for n in ast.walk(tree) if isinstance(n, ast.Try) and handler in n.handlers), None)
    if owner is not None and len(owner.body) == 1 and isinstance(owner.body[0], ast.Raise):
        return False  # `try: raise exc / except: ...` catches only what it raised, to set sys.exc_info
    for node in (n for stmt in handler.body for n in ast.walk(stmt)):
        if isinstance(node, ast.Raise):
            return False
        if isinstance(node, ast.Name) and handler.name and node.id == handler.name:
            return False
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in _REPORTING_CALLS:
                return False
    return True


# Calls whose failure during teardown nobody can act on: closing, stopping, removing.
CLEANUP_CALLS = frozenset(
    {"close", "aclose", "shutdown", "unlink", "remove", "rmtree", "kill", "terminate", "cancel", "stop", "join",
     "release", "disconnect", "flush", "wait"}
)  # fmt: skip


def best_effort_cleanup(tree: ast.Module | None, line: int) -> bool:
    """Whether the `except` on `line` guards a `try` whose body is one cleanup call (`sock.close()`):
    ignoring that failure is the idiom, not a defect."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(h.lineno == line for h in node.handlers):
            if len(node.body) != 1 or not isinstance(node.body[0], ast.Expr):
                return False
            call = node.body[0].value
            if isinstance(call, ast.Await):
                call = call.value
            if not isinstance(call, ast.Call):
                return False
            func = call.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            return name in CLEANUP_CALLS
    return False


# Comments that direct a tool rather than tell a reader why (a noqa or pragma comment, `# type: ignore`).
_TOOL_COMMENT = re.compile(r"#\s*(noqa|pragma|type:|nosec|pylint:|fmt:|pyright:|mypy:)", re.I)


def explained_swallow(text: str, tree: ast.Module | None, line: int) -> bool:
    """Whether the `except` on `line` only passes, continues or returns a constant, and its author
    wrote down why, in a comment on or inside the handler or on the comment lines just above it
    (`# changing the title is optional, no errors please`, `# a dead process has no CPU usage`): the
    decision is made and stated; repeating the rule's advice adds nothing. A handler that does more,
    or says nothing, is left to the rule."""
    if tree is None:
        return False
    lines = text.splitlines()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try | ast.TryStar):
            continue
        for handler in node.handlers:
            if handler.lineno != line:
                continue
            if not all(_gives_up_quietly(stmt) for stmt in handler.body):
                return False
            first = handler.lineno
            while first > 1 and lines[first - 2].strip().startswith("#"):
                first -= 1  # the comment lines right above `except` speak for it
            end = handler.end_lineno or handler.lineno
            return any(_says_why(lines[number - 1]) for number in range(first, min(end, len(lines)) + 1))
    return False


def _says_why(text: str) -> bool:
    """Whether a line carries a comment written for a reader, not a directive to a tool (`# noqa`)."""
    _, hash_, comment = text.partition("#")
    return bool(hash_ and comment.strip()) and not _TOOL_COMMENT.match(hash_ + comment)


def _gives_up_quietly(statement: ast.stmt) -> bool:
    """`pass`, `continue`, or `return` of nothing or a constant (`return None`, `return 0`)."""
    if isinstance(statement, ast.Pass | ast.Continue):
        return True
    return isinstance(statement, ast.Return) and (statement.value is None or isinstance(statement.value, ast.Constant))


def getattr_with_default(tree: ast.Module | None, line: int) -> bool:
    """Whether `line` reads `__call__` with `getattr(x, "__call__", default)`: the value is used (to
    look at the call method), not tested for callability, which is what B004 is about."""
    if tree is None:
        return False
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "getattr"
        and len(n.args) == 3
        and n.lineno <= line <= (n.end_lineno or n.lineno)
        for n in ast.walk(tree)
    )


# What a command-line framework hands a parameter: `Annotated[list[str], typer.Option()]`,
# `@click.option(...)`. The framework builds the value from the command line on every invocation.
CLI_PARAMETER_CALLS = frozenset({"Option", "Argument"})
CLI_DECORATOR_CALLS = frozenset({"option", "argument"})


def _called_name(node: ast.expr) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _cli_annotated(annotation: ast.expr | None) -> bool:
    """`Annotated[T, typer.Option(...)]` or `Annotated[T, Argument(...)]`."""
    if not isinstance(annotation, ast.Subscript) or _called_name(annotation.value) != "Annotated":
        return False
    metadata = annotation.slice.elts[1:] if isinstance(annotation.slice, ast.Tuple) else []
    return any(isinstance(m, ast.Call) and _called_name(m) in CLI_PARAMETER_CALLS for m in metadata)


def cli_framework_default(tree: ast.Module | None, line: int) -> bool:
    """Whether the mutable default on `line` belongs to a command-line parameter: one annotated
    `Annotated[..., typer.Option(...)]`/`typer.Argument(...)`, or of a function decorated with
    `@click.option`/`@click.argument`. The framework parses the command line and passes every such
    parameter on each call, and the command runs once per process: the shared default is the
    documented way to spell a multi-value option's default, never mutated across calls."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
        for arg, default in pairs:
            if not default.lineno <= line <= (default.end_lineno or default.lineno):
                continue
            decorated = any(
                isinstance(d, ast.Call) and _called_name(d) in CLI_DECORATOR_CALLS for d in node.decorator_list
            )
            return decorated or _cli_annotated(arg.annotation)
    return False


def touches_a_name(tree: ast.Module | None, line: int) -> bool:
    """Whether the expression statement on `line` only reads a name, an attribute or an item. Such a
    statement is how a type-checker example asks about a type and how a test makes a property or a
    lookup raise; the useless expression that is a defect is a value built and dropped (a tuple left
    by a stray comma, a literal list that was meant to be assigned)."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and node.lineno == line:
            return isinstance(node.value, ast.Name | ast.Attribute | ast.Subscript)
    return False


# Builtins of Python 2 that Python 3 removed: code that still supports both names them only in a
# branch that runs on Python 2.
PYTHON2_BUILTINS = frozenset(
    {"unicode", "long", "basestring", "xrange", "unichr", "raw_input", "buffer", "file", "cmp", "execfile",
     "reload", "reduce", "intern", "coerce", "apply", "StandardError"}
)  # fmt: skip
# A name that holds the interpreter's major version: `PY2`, `PY3`, `six.PY2`, `IS_PY3`, `_PY2K`.
_VERSION_FLAG = re.compile(r"^_*(?:IS_?)?PY_?[23]\w*$", re.IGNORECASE)
_VERSION_ATTRIBUTES = frozenset({"version_info", "version", "hexversion"})  # of `sys`
_UNDEFINED = re.compile(r"`(?P<name>\w+)`")


def undefined_name(message: str) -> str | None:
    """The name an F821 message ("Undefined name `x`") is about."""
    found = _UNDEFINED.search(message)
    return found.group("name") if found else None


def _reads_version(test: ast.expr) -> bool:
    """Whether a condition reads the interpreter's version: a version flag or `sys.version_info`."""
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and _VERSION_FLAG.match(node.id):
            return True
        if isinstance(node, ast.Attribute) and (
            _VERSION_FLAG.match(node.attr)
            or (node.attr in _VERSION_ATTRIBUTES and isinstance(node.value, ast.Name) and node.value.id == "sys")
        ):
            return True
    return False


def _catches_name_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        (isinstance(c, ast.Name) and c.id == "NameError") or (isinstance(c, ast.Attribute) and c.attr == "NameError")
        for c in caught
    )


def _spans(nodes: list[ast.stmt], line: int) -> bool:
    return any(n.lineno <= line <= (n.end_lineno or n.lineno) for n in nodes)


# ruff's F821 on a builtin of a newer Python than it reads the file as: "Undefined name `frozendict`.
# Consider specifying `requires-python = ">= 3.15"` …".
_NEWER_PYTHON_BUILTIN = re.compile(r"requires-python\s*=\s*\"\s*>=\s*3\.\d+")


def compat_branch_name(tree: ast.Module | None, line: int, message: str) -> bool:
    """Whether an F821 on `line` is a builtin of another Python — Python 2's (`unicode`, `long`), or
    one ruff says a newer Python has (`frozendict` in 3.15) — named where only that Python runs it:
    in a branch of an `if`/`else` (or a conditional expression) whose test reads a version flag
    (`PY2`, `six.PY3`, `sys.version_info`), or in the body of a `try` whose handler catches
    NameError. Both branches count: `if PY3: ... else: text_type = unicode` is the same idiom."""
    name = undefined_name(message)
    if tree is None or name is None or (name not in PYTHON2_BUILTINS and not _NEWER_PYTHON_BUILTIN.search(message)):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if _reads_version(node.test) and (
                isinstance(node, ast.IfExp) or _spans(node.body, line) or _spans(node.orelse, line)
            ):
                return True
        if isinstance(node, ast.Try) and _spans(node.body, line) and any(map(_catches_name_error, node.handlers)):
            return True
    return False


# What lets a module have names no statement of it binds: a star import, a module `__getattr__`, a
# write to its namespace (`globals()`, `exec`, the builtins module).
_NAMESPACE_WRITERS = frozenset(
    {"globals", "locals", "vars", "exec", "execfile", "__builtins__", "__builtin__", "builtins"}
)


def _bound_names(tree: ast.Module) -> set[str]:
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.Global | ast.Nonlocal):
            bound.update(node.names)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
    return bound


def _enum_members_into_module(node: ast.AST) -> bool:
    """`IntEnum._convert_("VerifyMode", __name__, ...)`: the enum writes its members (`CERT_NONE` …)
    into the named module's namespace when it runs, as CPython's `ssl`, `signal` and `socket` do."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("_convert_", "_convert")
        and any(isinstance(a, ast.Name) and a.id == "__name__" for a in node.args)
    )


_TEMPLATED_SEGMENT = re.compile(r"(^|/)[^/]*\{\{[^/]*\}\}[^/]*/")


def project_template_path(path: str) -> bool:
    """Whether the file lies under a directory named by a template variable
    (`{{cookiecutter.project_slug}}/cli.py`): a cookiecutter or copier template, whose `{% if %}`
    blocks render to Python and are not Python themselves."""
    return bool(_TEMPLATED_SEGMENT.search(path))


def unbound_anywhere(tree: ast.Module | None, path: str, line: int, message: str) -> bool:
    """Whether an F821 on `line` names what the module binds nowhere and has no way to receive: no
    statement binds it, no star import, module `__getattr__` or namespace write (`globals()`,
    `exec`, `builtins`, a function's `__globals__`, an enum's `_convert_(…, __name__)`) could supply
    it, it is no Python 2 builtin, it is read as code on that line (not inside a string annotation a
    library resolves from its registry), and the file is product code, not documentation or an
    example (a tool runs `docs/conf.py` in a namespace it fills; a fragment names a placeholder for
    the reader's own code). Such a name raises NameError when the line runs: a missing `import
    sys`."""
    undefined = _UNDEFINED.search(message)
    if tree is None or undefined is None or is_sample_path(path) or path.endswith(".pyi"):
        return False  # a stub never runs: a name missing there fails a type checker, not the program
    name = undefined.group("name")
    if name in PYTHON2_BUILTINS or name in _bound_names(tree) or traitlets_config_name(path, name):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return False
        if isinstance(node, ast.Name) and node.id in _NAMESPACE_WRITERS:
            return False
        if isinstance(node, ast.alias) and node.name in _NAMESPACE_WRITERS:
            return False
        if isinstance(node, ast.Attribute) and node.attr == "__globals__":
            return False  # `f.__globals__["writer"] = ...`: a decorator fills the module's namespace
        if _enum_members_into_module(node):
            return False
    if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
        return False
    if source_template(tree, line) or unreachable(tree, line) or names_only(tree) or replaced_placeholder(tree, name):
        return False
    unevaluated = {id(n) for annotation in _unevaluated_annotations(tree) for n in ast.walk(annotation)}
    return any(
        isinstance(n, ast.Name) and n.id == name and n.lineno == line and id(n) not in unevaluated
        for n in ast.walk(tree)
    )


# What traitlets (Jupyter, IPython, JupyterHub) puts in the namespace of a config file it executes:
# `c.ServerApp.port = 8888` in `jupyter_server_config.py`, `jupyterhub_config.py`, `ipython_config.py`.
TRAITLETS_CONFIG_NAMES = frozenset({"c", "get_config", "load_subconfig"})


def traitlets_config_name(path: str, name: str) -> bool:
    return name in TRAITLETS_CONFIG_NAMES and path.rsplit("/", 1)[-1].endswith("config.py")


def names_only(tree: ast.Module) -> bool:
    """Whether the module is nothing but bare names (`req_succeeded  # unused variable (...)`,
    `_.attr`): a whitelist a dead-code finder such as vulture reads as text, which nothing imports
    (running it would only look names up)."""
    return bool(tree.body) and all(
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Name | ast.Attribute) for stmt in tree.body
    )


_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})


def unreachable(tree: ast.Module, line: int) -> bool:
    """Whether `line` lies in a statement that follows, in the same block, one that always leaves it
    (`raise`, `return`, `break`, `continue`, a bare call of `sys.exit()`): it never runs, so a name
    missing there raises nothing. A package's stub `setup.py` exits with a message first and keeps a
    `setup(...)` call below it only for tools that scan the file for metadata."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            leaves = next((i for i, stmt in enumerate(block) if _leaves_block(stmt)), None)
            if leaves is not None and any(
                stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno) for stmt in block[leaves + 1 :]
            ):
                return True
    return False


def _leaves_block(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Raise | ast.Return | ast.Break | ast.Continue):
        return True
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return isinstance(call, ast.Call) and ast.unparse(call.func) in _EXITS


def source_template(tree: ast.Module, line: int) -> bool:
    """Whether `line` lies in a function or class whose source the module itself reads with
    `inspect.getsource(...)`: code kept as a template and run in another namespace (pasted into a
    module it patches, sent to a remote interpreter), where its names are bound. mitogen's DNF fix
    copies a method into Ansible's module that imports what the method names."""
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and _called_name(node) in ("getsource", "getsourcelines"):
            read.update(_called_name(n) for n in ast.walk(node.args[0]) if isinstance(n, ast.Name | ast.Attribute))
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.name in read
        and node.lineno <= line <= (node.end_lineno or node.lineno)
        for node in ast.walk(tree)
    )


def replaced_placeholder(tree: ast.Module, name: str) -> bool:
    """Whether the module rewrites its own source text, replacing `name` (`kernel.src.replace("
    LOAD_ALL_ROWS_HERE", generated)`, whisper's Triton kernel): a placeholder in a template, never
    run as written."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "replace"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and word.search(node.args[0].value) is not None
        for node in ast.walk(tree)
    )


def _unevaluated_annotations(tree: ast.Module) -> list[ast.expr]:
    """Annotations Python never evaluates: a local variable's (PEP 526), and every annotation of a
    module under `from __future__ import annotations` (PEP 563). A name missing there fails a type
    checker, not the program."""
    postponed = any(
        isinstance(n, ast.ImportFrom) and n.module == "__future__" and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [n.annotation for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.AnnAssign)]
            if postponed:
                args = [
                    *node.args.posonlyargs,
                    *node.args.args,
                    *node.args.kwonlyargs,
                    node.args.vararg,
                    node.args.kwarg,
                ]
                found += [a.annotation for a in args if a is not None and a.annotation is not None]
                found += [node.returns] if node.returns is not None else []
        elif postponed and isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return found


_UNPARENTHESIZED_EXCEPT = re.compile(r"^\s*except\s+[^(\s]")


_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


def noqa_on_statement(tree: ast.Module | None, lines: Sequence[str], line: int, code: str) -> bool:
    """Whether a `# noqa` for `code` (or a bare one) sits on any line of the multi-line import holding
    `line`. ruff reads a noqa on the reported line only; black moves a trailing `# noqa` from a long
    import it splits onto the closing parenthesis, and flake8, which reports the statement's first
    line, applies it to the statement: the project's own word that the import is meant."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for text in lines[node.lineno - 1 : node.end_lineno or node.lineno]:
                found = _NOQA.search(text)
                if found and (found.group("codes") is None or code in found.group("codes").upper()):
                    return True
            return False
    return False


# The same check in pylint's words: an author who wrote `# pylint: disable=bare-except` on the line
# has said the bare except is meant, as a noqa comment naming E722 would to ruff.
_BARE = frozenset({"bare-except", "w0702"})
_BROAD = frozenset({"broad-except", "broad-exception-caught", "w0703", "w0718"})
PYLINT_NAMES: dict[str, frozenset[str]] = {
    "E722": _BARE,
    "BLE001": _BROAD,
    "S110": _BARE | _BROAD,  # a handler the author marked as meant is meant to swallow, `pass` and all
    "S112": _BARE | _BROAD,
    "F401": frozenset({"unused-import", "w0611"}),
    "F841": frozenset({"unused-variable", "w0612"}),
    "F821": frozenset({"undefined-variable", "e0602"}),
}
_PYLINT_DISABLE = re.compile(r"#\s*pylint\s*:\s*disable(?P<next>-next)?\s*=\s*(?P<names>[\w\-, ]+)", re.I)


def pylint_disabled(lines: Sequence[str], line: int, code: str) -> bool:
    """Whether pylint's own name for `code` is disabled on `line` (`# pylint: disable=bare-except`)
    or on the line above it with `disable-next=`."""
    names = PYLINT_NAMES.get(code)
    if not names or not 1 <= line <= len(lines):
        return False
    for text, wanted_next in ((lines[line - 1], False), (lines[line - 2] if line > 1 else "", True)):
        for found in _PYLINT_DISABLE.finditer(text):
            if bool(found.group("next")) == wanted_next and names & {
                n.strip().lower() for n in found.group("names").split(",")
            }:
                return True
    return False


def facade_module(tree: ast.Module | None) -> bool:
    """Whether the module is nothing but imports (a docstring, `__all__`, `try:` imports with their
    fallbacks): it exists to re-export them (`pkg/httpexceptions.py` naming webob's exceptions)."""
    if tree is None:
        return False
    body = list(tree.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    imports = 0
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            imports += 1
        elif isinstance(node, ast.Try):
            inner = node.body + [s for h in node.handlers for s in h.body] + node.orelse
            if not all(isinstance(s, ast.Import | ast.ImportFrom | ast.Pass) for s in inner):
                return False
            imports += 1
        elif not (
            isinstance(node, ast.Assign | ast.AugAssign)
            and all(
                isinstance(t, ast.Name) and t.id == "__all__"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
        ):
            return False
    return imports >= MIN_FACADE_IMPORTS


MIN_NAME_LIST_STATEMENTS = 5  # a module of fewer bare names is code, not a list


def name_list_module(tree: ast.Module | None) -> bool:
    """Whether the module is a list of bare names and attributes, one per statement (a vulture
    whitelist: `_.compact_seq_map`, `formatter_collection`), with only imports beside them: a file
    a dead-code finder reads to mark names as used, never imported or run."""
    if tree is None:
        return False
    names = 0
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Name | ast.Attribute):
            names += 1
        elif not isinstance(node, ast.Import | ast.ImportFrom) and not (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            return False
    return names >= MIN_NAME_LIST_STATEMENTS


# The hooks a PEP 517/660 build backend module offers: pip and `build` look them up by name on the
# module, so a backend that wraps another imports them to re-export them.
BUILD_BACKEND_HOOKS = frozenset({
    "build_wheel", "build_sdist", "build_editable", "get_requires_for_build_wheel", "get_requires_for_build_sdist",
    "get_requires_for_build_editable", "prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable",
})  # fmt: skip


def build_backend_hook(tree: ast.Module | None, line: int, message: str) -> bool:
    """Whether an F401 import binds a build backend's hook (`build_wheel`): the module's interface."""
    return unused_import_binding(tree, line, message) in BUILD_BACKEND_HOOKS


# Modules the interpreter runs at start-up (`site`): an import there is the point (patching, a
# cross-compilation shim), never a name left unused.
SITE_HOOK_MODULES = frozenset({"sitecustomize.py", "usercustomize.py"})
MIN_FACADE_IMPORTS = 2  # one import alone is a module someone is still writing


def python2_except_binding(tree: ast.Module | None, lines: Sequence[str], line: int, message: str) -> bool:
    """Whether an F821 on `line` names what Python 2's `except ValueError, e:` binds. Python 3.14
    reads that line as an unparenthesized tuple of exception types (PEP 758), so the bound name looks
    undefined, on the `except` line and wherever the handler uses it; the module is Python 2 code,
    where the name is the exception caught; so is `except (A, B), e:` (a tuple of types, then the
    name). A parenthesized `except (A, e):` is a tuple of types in both languages and stays reported."""
    name = undefined_name(message)
    return name is not None and python2_bound_name(tree, lines, line) == name


def python2_bound_name(tree: ast.Module | None, lines: Sequence[str], line: int) -> str | None:
    """The name a Python 2 `except E, e:` / `except (A, B), e:` handler around `line` binds, or None."""
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.ExceptHandler)
            and node.name is None
            and isinstance(node.type, ast.Tuple)
            and len(node.type.elts) == 2
            and node.lineno <= line <= (node.end_lineno or node.lineno)
        ):
            continue
        last = node.type.elts[-1]
        head = lines[node.lineno - 1] if 0 < node.lineno <= len(lines) else ""
        types_then_name = isinstance(node.type.elts[0], ast.Tuple)  # `except (A, B), e:`
        if isinstance(last, ast.Name) and (types_then_name or _UNPARENTHESIZED_EXCEPT.match(head)):
            return last.id
    return None


def _raises_later(tree: ast.Module, handler: ast.ExceptHandler) -> bool:
    """Whether the function holding `handler` raises (or re-raises) outside it: the exception a bare
    except kept with `sys.exc_info()` is raised after a loop, as the standard library's ExitStack
    collects every callback's exception and raises the last."""
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) and any(n is handler for n in ast.walk(func)):
            inside = {id(n) for n in ast.walk(handler)}
            for n in ast.walk(func):
                if id(n) in inside:
                    continue
                if isinstance(n, ast.Raise):
                    return True
                if isinstance(n, ast.Call):
                    called = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                    if "reraise" in called:
                        return True
    return False


def reraises(tree: ast.Module | None, line: int) -> bool:
    """Whether the bare `except:` on `line` re-raises what it caught: a bare `raise` in its body, a
    `reraise(...)` call (six's, or the project's own), or `sys.exc_info()` kept and raised later in
    the function (`_raises_later`).
    Catching everything to undo a transaction, close a resource or decide on a retry, then
    re-raising, is what a bare except is for; it hides nothing. So is handing the exception on whole
    to a call (`target.throw(*sys.exc_info())` into a greenlet or a generator): it is raised there."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is None and node.lineno == line:
            for inner in (n for stmt in node.body for n in ast.walk(stmt)):
                if isinstance(inner, ast.Raise) and inner.exc is None:
                    return True
                if isinstance(inner, ast.Call):
                    callee = inner.func
                    called = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
                    if called.endswith("reraise") or (called == "exc_info" and _raises_later(tree, node)):
                        return True
                    if any(isinstance(a, ast.Starred) and _is_exc_info(a.value) for a in inner.args) or (
                        called in _HANDS_ON and any(_is_exc_info(a) for a in inner.args)
                    ):
                        return True  # handed on whole: `greenlet.throw(*sys.exc_info())`, `future.set_exc_info(...)`
    return False


_HANDS_ON = frozenset({"throw", "set_exc_info", "set_exception", "reraise"})


def _is_exc_info(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr == "exc_info")
        or (isinstance(node.func, ast.Name) and node.func.id == "exc_info")
    )


def converts(tree: ast.Module | None, line: int) -> bool:
    """Whether the bare `except:` on `line` ends by raising an exception of its own
    (`raise StringError(f"cannot decode {obj!r}")`): it turns whatever it caught into that one, and
    the program still stops (with the wrong type, which is a matter of taste, not a swallowed error)."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is None and node.lineno == line:
            return _ends_raising(node.body)
    return False


def _ends_raising(body: Sequence[ast.stmt]) -> bool:
    """Whether every way through `body` ends in `raise SomeError(...)` (an `if` raising on both sides)."""
    last = body[-1] if body else None
    if isinstance(last, ast.Raise):
        return last.exc is not None
    if isinstance(last, ast.If):
        return _ends_raising(last.body) and _ends_raising(last.orelse)
    return False


def import_fallback(tree: ast.Module | None, line: int) -> bool:
    """Whether the bare `except:` on `line` guards nothing but lookups and falls back to something
    else: imports (`try: from coverage.exceptions import NoSource` / `except: from coverage.misc import
    NoSource`), a module's attribute (`try: FormattedValue = ast.FormattedValue` / `except: class
    FormattedValue: ...`), a flag set after an import (`import _winapi; has_winapi = True`). An
    ImportError or an AttributeError is all that can happen there; the handler only imports, assigns or
    defines the fallback."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(h.lineno == line for h in node.handlers):
            handler = next(h for h in node.handlers if h.lineno == line)
            return all(_only_looks_up(s) for s in node.body) and all(
                isinstance(s, ast.Import | ast.ImportFrom | ast.Assign | ast.Pass | ast.ClassDef | ast.FunctionDef)
                for s in handler.body
            )
    return False


def _only_looks_up(statement: ast.stmt) -> bool:
    """An import, or a plain name bound to a constant, a name or a dotted attribute (`x = mod.attr`)."""
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return True
    if not isinstance(statement, ast.Assign) or not all(isinstance(t, ast.Name) for t in statement.targets):
        return False
    value = statement.value
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Name | ast.Constant)


def answers_no(tree: ast.Module | None, line: int) -> bool:
    """Whether the bare `except:` on `line` only returns a bool (`try: parse(v); return True` /
    `except: return False`): a predicate answering that the value is not a date, a URL, a number.
    Nothing is lost that the caller wanted, as `swallows` already says for BLE001."""
    if tree is None:
        return False
    return any(
        isinstance(node, ast.ExceptHandler) and node.type is None and node.lineno == line and _answers_a_predicate(node)
        for node in ast.walk(tree)
    )


def _answers_a_predicate(handler: ast.ExceptHandler) -> bool:
    """`except ...: return False` (or True), and nothing else."""
    body = handler.body
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, bool)
    )


_INTERRUPTS = frozenset({"KeyboardInterrupt", "SystemExit", "GeneratorExit", "BaseException"})


def interrupts_let_through(tree: ast.Module | None, line: int) -> bool:
    """Whether a handler before the bare `except:` on `line`, in the same `try`, re-raises
    KeyboardInterrupt or SystemExit (`except KeyboardInterrupt: raise`): the author has handled what a
    bare except is faulted for, and what is left is caught on purpose (best-effort cleanup)."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        for n, handler in enumerate(node.handlers):
            if handler.type is None and handler.lineno == line:
                return any(_reraises_interrupts(h) for h in node.handlers[:n])
    return False


def _reraises_interrupts(handler: ast.ExceptHandler) -> bool:
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {c.id if isinstance(c, ast.Name) else getattr(c, "attr", "") for c in caught if c is not None}
    reraised = any(isinstance(n, ast.Raise) and n.exc is None for stmt in handler.body for n in ast.walk(stmt))
    return bool(names & _INTERRUPTS) and reraised


def side_effect_import(tree: ast.Module | None, line: int) -> bool:
    """Whether the import on `line` is a module imported inside a function and never used there:
    `from . import checks` in a Django `AppConfig.ready()`, `import myapp.signals` in a plugin's
    setup. Importing registers what the module defines (system checks, signal receivers, plugins);
    that is the statement's whole job, and ruff's fix would remove the registration. A module-level
    import, or a name imported from a module, is still reported."""
    if tree is None:
        return False
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in (n for stmt in func.body for n in ast.walk(stmt)):
            if not isinstance(node, ast.Import | ast.ImportFrom) or (
                isinstance(node, ast.ImportFrom) and node.module is not None
            ):
                continue
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                return True
    return False


def explained_import(text: str, tree: ast.Module | None, line: int) -> bool:
    """Whether the unused import on `line` is a whole module imported at the top of the file with a
    comment saying why, on the line or just above it (`# Monkeypatch distutils.` above `import
    setuptools`; `# raise if the version is missing` above `import check_doc_versions`): a module
    imported for what importing it does, and its author said so. A name imported from a module, or
    an import nobody explained, is still reported."""
    if tree is None:
        return False
    lines = text.splitlines()
    for node in tree.body:
        if not isinstance(node, ast.Import) or node.lineno != line or any(a.asname for a in node.names):
            continue
        above = lines[line - 2] if line >= 2 and lines[line - 2].strip().startswith("#") else ""
        return _says_why(above) or (line <= len(lines) and _says_why(lines[line - 1]))
    return False


_TYPE_COMMENT = re.compile(r"#\s*type:(?!\s*ignore\b)(?P<type>.*)$", re.MULTILINE)
_IMPORTED = re.compile(r"`(?P<name>[\w.]+)`")


def used_in_type_comment(text: str, message: str) -> bool:
    """Whether a `# type:` comment names the import an F401 message is about (`typing.Dict` binds
    `Dict`, `import a.b` binds `a`): mypy reads those comments, ruff does not."""
    imported = _IMPORTED.search(message)
    if imported is None:
        return False
    dotted = imported.group("name").split(".")
    bound = {dotted[0], dotted[-1]}
    return any(
        re.search(rf"\b{re.escape(name)}\b", comment.group("type"))
        for comment in _TYPE_COMMENT.finditer(text)
        for name in bound
    )


_DOCTEST_LINE = re.compile(r"^\s*(?:>>>|\.\.\.)\s(?P<code>.*)$", re.M)


def used_in_doctest(text: str, tree: ast.Module | None, line: int, message: str) -> bool:
    """Whether the module's own doctests use the name an F401 import binds: doctest runs an example
    in the namespace of the module it was found in, so `>>> Val('vowel')` in a docstring needs
    `Val` imported there; ruff does not read examples."""
    name = unused_import_binding(tree, line, message)
    if name is None:
        return False
    word = re.compile(rf"\b{re.escape(name)}\b")
    return any(word.search(m.group("code")) for m in _DOCTEST_LINE.finditer(text))


MAX_TYPE_STRING_CHARS = 200  # a quoted type is short; a longer string is prose or data


def used_in_quoted_type(tree: ast.Module | None, line: int, message: str) -> bool:
    """Whether a string in the module is a Python expression naming the import an F401 is about: a
    quoted forward reference (`BaseManager['AbstractBaseFlag']`, `cast("list[Flag]", x)`) that a
    type checker reads and ruff does not outside annotations, or an `__all__` entry. Imports under
    `if TYPE_CHECKING:` exist for exactly those strings."""
    name = unused_import_binding(tree, line, message)
    if tree is None or name is None:
        return False
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = node.value.strip()
        if not text or len(text) > MAX_TYPE_STRING_CHARS or name not in text:
            continue
        try:
            expression = ast.parse(text, mode="eval")
        except SyntaxError:
            continue
        if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(expression)):
            return True
    return False


def enclosing_function(tree: ast.Module | None, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function whose body holds `line`."""
    found: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            if node.body[0].lineno <= line <= (node.end_lineno or node.lineno):
                if found is None or node.lineno > found.lineno:
                    found = node
    return found


def changed_header(file: ChangedFile, line: int) -> int | None:
    """A changed line of the decorators or signature of the function holding `line` (`@classmethod`
    made `@staticmethod`, a parameter renamed): a name its kept body uses may be gone with it."""
    function = enclosing_function(file.python_tree, line)
    if function is None:
        return None
    first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    return next((n for n in range(first, function.body[0].lineno) if file.is_changed(n)), None)


def undefined_at_base(file: ChangedFile) -> frozenset[tuple[str | None, str]] | None:
    """ruff's undefined names in the file before the change, with the function each is in (None for
    the function when the base does not parse), or None when the base cannot be rebuilt: a name
    undefined there too is no news of the change."""
    base_text = reverse_patch(file.text, file.change) if file.change.hunks else None
    if base_text is None:
        return None
    try:
        tree: ast.Module | None = ast.parse(base_text)
    except (SyntaxError, ValueError):
        tree = None
    out: set[tuple[str | None, str]] = set()
    for diag in run_ruff_json(base_text, path=file.change.old_path or file.path):
        if str(diag.get("code") or "") == "F821":
            function = enclosing_function(tree, int((diag.get("location") or {}).get("row") or 0))
            out.add((function.name if function is not None else None, str(diag.get("message") or "")))
    return frozenset(out)


def star_imports_tests(tree: ast.Module | None, line: int) -> bool:
    """Whether the star import on `line` imports a test module (`from tests.test_io import *`): a
    test runner script collects the test modules' TestCase classes so that `unittest.main()` finds
    them in its namespace; every name is wanted, none is used by hand."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.lineno == line and node.module:
            last = node.module.rsplit(".", 1)[-1]
            return last.startswith("test_") or last.endswith("_test") or last in ("tests", "test")
    return False


def availability_check(tree: ast.Module | None, line: int, message: str) -> bool:
    """Whether the import an F401 is about is a feature test: an import in a `try:` whose handler
    catches ImportError (or everything), none of whose names the module uses (`try: import
    django.apps / except ImportError: <the Django 1.6 way>`, Django's manage.py checking that Django
    is installed, `from south.db import db  # South is required`). Importing is the test. An import
    that binds a name the module does use is there for that name, and an unused name beside it
    (`from cbv import DetailView, ListView` with only ListView used) is still reported."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        imports = [
            s for s in node.body
            if isinstance(s, ast.Import | ast.ImportFrom) and s.lineno <= line <= (s.end_lineno or s.lineno)
        ]  # fmt: skip
        if not imports or not any(_catches_import_error(h) for h in node.handlers):
            continue
        bound = {a.asname or a.name.split(".")[0] for a in imports[0].names}
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        used |= {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
        return not (bound & used)
    return False


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = [caught] if not isinstance(caught, ast.Tuple) else list(caught.elts)
    return caught is None or any(
        isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception") for n in names
    )


def moved_out_and_imported_back(file: ChangedFile, line: int, message: str) -> bool:
    """Whether the import an F401 is about brings back a class or function the same change removed
    from this module's top level: the definition moved to another module and the old place still
    offers it (`from .exceptions import APNSError` in apns.py, where APNSError used to live), so code
    that imports it from here keeps working. The import is the module's interface, not dead code."""
    name = unused_import_binding(file.python_tree, line, message)
    if name is None:
        return False
    removed = re.compile(rf"^(?:async\s+def|def|class)\s+{re.escape(name)}\b")
    return any(removed.match(text) for text in file.removed_lines)


def unused_import_binding(tree: ast.Module | None, line: int, message: str) -> str | None:
    """The name an F401 import binds in the module (`Mapping` for `from collections.abc import
    Mapping`, `M` for `... as M`, `os` for `import os.path`); ruff's message spells the import."""
    imported = _IMPORTED.search(message)
    if tree is None or imported is None:
        return None
    dotted = imported.group("name")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for alias in node.names:
                if dotted.endswith(f".{alias.name}") or dotted == alias.name:
                    return alias.asname or alias.name
        if isinstance(node, ast.Import) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for alias in node.names:
                if alias.name == dotted:
                    return alias.asname or alias.name.split(".")[0]
    return None


_INTERFACE_BASE = re.compile(r"^(?:Interface|I[A-Z]\w*)$")


def interface_method(tree: ast.Module | None, line: int) -> bool:
    """Whether the `def` on `line` declares a method of a zope.interface interface: a class of a module
    that imports zope.interface, based on `Interface` or on another interface (`IKeyed`, by the
    `I` + capital convention). Interface methods are declared without `self` (`def __and__(other):`):
    the declaration documents the method its implementations take with `self`."""
    if tree is None or not any(
        (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("zope.interface"))
        or (isinstance(n, ast.Import) and any(a.name.startswith("zope.interface") for a in n.names))
        for n in ast.walk(tree)
    ):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef) and d.lineno == line for d in node.body
        ):
            bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
            return any(_INTERFACE_BASE.match(b) for b in bases)
    return False


_BRACE_FIELD = re.compile(r"\{[^{}]*\}")
_PERCENT_FIELD = re.compile(r"%[-#0 +]*[\d*]*(?:\.[\d*]+)?[sdrifgeExXoca%(]")


def brace_style_log_call(tree: ast.Module | None, line: int) -> bool:
    """Whether the logging call on `line` passes a `str.format` message (`"deleting {}"`, no `%`
    directive): a logger of the project's own that formats with braces (beets' StrFormatLogger,
    a `BraceMessage` adapter), whose arguments ruff counts against `%` placeholders."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno) and node.args:
            message = node.args[0]
            if isinstance(message, ast.Constant) and isinstance(message.value, str):
                text = message.value
                return bool(_BRACE_FIELD.search(text)) and not _PERCENT_FIELD.search(text)
    return False


def names_at_run_time(tree: ast.Module | None, line: int) -> bool:
    """Whether every entry of the `__all__` on `line` that is not a string literal is `X.__name__`
    or `*module.__all__`: strings once the module runs, which ruff cannot see (PLE0604). An entry that is a bare name, a
    call or anything else is an object, and `from module import *` raises TypeError on it."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) or node.lineno != line:
            continue
        entries: list[ast.expr] = []
        pending = [node.value] if node.value is not None else []
        while pending:
            value = pending.pop()
            if isinstance(value, ast.BinOp):
                pending += [value.left, value.right]
            elif isinstance(value, ast.List | ast.Tuple):
                entries += value.elts
            else:
                return False  # built some other way: not decided here
        objects = [e for e in entries if not (isinstance(e, ast.Constant) and isinstance(e.value, str))]
        return bool(objects) and all(_a_name_at_run_time(e) for e in objects)
    return False


def _a_name_at_run_time(entry: ast.expr) -> bool:
    """`X.__name__`, or `*module.__all__` (another module's list of names, unpacked)."""
    if isinstance(entry, ast.Starred):
        return isinstance(entry.value, ast.Attribute) and entry.value.attr == "__all__"
    return isinstance(entry, ast.Attribute) and entry.attr == "__name__"


_FROM_LINE = re.compile(r"from line (?P<line>\d+)")


def _redefines_reported_import(message: str, issues: Sequence[Issue]) -> bool:
    """Whether an F811 ("Redefinition of unused `x` from line 1") shadows an import this review
    already reports as unused (F401 on that line): a stray import is one problem, said once."""
    match = _FROM_LINE.search(message)
    return match is not None and any(i.rule == "ruff:F401" and i.line == int(match.group("line")) for i in issues)


def first_syntax_error_line(diagnostics: Sequence[dict[str, Any]]) -> int | None:
    """The line of the file's first syntax error, changed or not: the parser's later errors are
    mostly its echo (an `Unexpected indentation` under a header it could not read)."""
    rows = [
        int((d.get("location") or {}).get("row") or 0)
        for d in diagnostics
        if (d.get("code") or d.get("name")) == "invalid-syntax"
    ]
    return min(rows) if rows else None


def ruff_issues(file: ChangedFile) -> list[Issue]:
    """ruff's defects on the lines this change added."""
    if file.language != "python":
        return []
    issues: list[Issue] = []
    facade: bool | None = None  # decided once per file, on its first unused import
    diagnostics = run_ruff_json(file.text, path=file.path)
    first_syntax_error = first_syntax_error_line(diagnostics)
    base_undefined: list[frozenset[tuple[str | None, str]] | None] = []  # read once, when first needed
    for diag in diagnostics:
        code = str(diag.get("code") or diag.get("name") or "")
        said = str(diag.get("message") or "")
        location = diag.get("location") or {}
        end_location = diag.get("end_location") or {}
        line = int(location.get("row") or 0)
        anchor = line  # where the finding is said: its own line, or the changed header that caused it
        if code == "F821" and not file.is_changed(line) and not file.partial:
            header = changed_header(file, line)
            if header is not None:
                base_undefined = base_undefined or [undefined_at_base(file)]
                function = enclosing_function(file.python_tree, line)
                name = function.name if function is not None else None
                known = base_undefined[0]
                anchor = header if known is not None and not ({(name, said), (None, said)} & known) else line
        if not code or not file.is_changed(anchor) or (file.partial and code in WHOLE_FILE_RULES):
            continue
        if code == "invalid-syntax" and line != first_syntax_error:
            continue  # the echo of an earlier error, one the change may not have written (on a line it kept)
        if code in ("F401", "F403") and file.path.endswith("__init__.py"):
            continue  # imports in a package's __init__ are usually deliberate re-exports
        if code == "F403" and star_imports_tests(file.python_tree, line):
            continue  # a runner gathering test modules' TestCase classes into its namespace
        if code == "F401" and PurePosixPath(file.path).name in SITE_HOOK_MODULES:
            continue  # Python imports these at start-up: what they import, they import for its effect
        if code == "F401" and (
            used_in_type_comment(file.text, said)
            or used_in_doctest(file.text, file.python_tree, line, said)
            or used_in_quoted_type(file.python_tree, line, said)
            or moved_out_and_imported_back(file, line, said)
            or availability_check(file.python_tree, line, said)
            or noqa_on_statement(file.python_tree, file.lines, line, code)
            or build_backend_hook(file.python_tree, line, said)
        ):
            continue
        if code == "F401":
            facade = facade_module(file.python_tree) if facade is None else facade
            if facade:
                continue
        if code in PYLINT_NAMES and pylint_disabled(file.lines, line, code):
            continue  # the author suppressed the same check in pylint's words
        if code == "BLE001" and not swallows(file.python_tree, line):
            continue
        if code == "B018" and touches_a_name(file.python_tree, line):
            continue
        if code == "B004" and getattr_with_default(file.python_tree, line):
            continue
        if code == "B006" and cli_framework_default(file.python_tree, line):
            continue
        if code == "F821" and (
            name_list_module(file.python_tree)
            or notebook_may_define(file.text, undefined_name(said) or "")
            or compat_branch_name(file.python_tree, line, said)
            or python2_except_binding(file.python_tree, file.lines, line, said)
        ):
            continue
        if code == "E722" and (
            reraises(file.python_tree, line)
            or converts(file.python_tree, line)
            or import_fallback(file.python_tree, line)
            or interrupts_let_through(file.python_tree, line)
            or explained_swallow(file.text, file.python_tree, line)
            or answers_no(file.python_tree, line)
        ):
            continue
        if code in SWALLOW_CODES and file.moved(line):
            continue  # a handler the change moved or re-indented: it was there before, as it is
        if code == "B030" and python2_bound_name(file.python_tree, file.lines, line) is not None:
            continue  # `except (A, B), e:` is Python 2's binding, not a tuple holding a tuple
        if code == "F401" and (
            side_effect_import(file.python_tree, line) or explained_import(file.text, file.python_tree, line)
        ):
            continue
        if code in ("S110", "S112", "BLE001") and (
            best_effort_cleanup(file.python_tree, line)
            or explained_swallow(file.text, file.python_tree, line)
            or import_fallback(file.python_tree, line)
        ):
            continue
        if code in ("PLE1205", "PLE1206") and brace_style_log_call(file.python_tree, line):
            continue  # the project's logger formats with str.format
        if code == "PLE0302" and interface_method(file.python_tree, line):
            continue  # zope.interface declares methods without `self`
        if code == "PLE0604" and names_at_run_time(file.python_tree, line):
            continue  # `Class.__name__` entries are strings when the module runs
        if code == "F821" and any(i.rule == "ruff:F821" and i.title == diag.get("message") for i in issues):
            continue  # one missing name is one problem: its first use says it, the rest are its echo
        if code == "F811" and _redefines_reported_import(said, issues):
            continue  # the unused import it shadows is already reported: one cause, one thread
        if code == "invalid-syntax" and any(i.rule == "ruff:invalid-syntax" for i in issues):
            continue  # the first syntax error is the one to fix; those after it are mostly its echo
        message = said or code
        why = _WHY.get(code, "")
        confidence: Confidence = "high"
        if code == "F821" and not unbound_anywhere(file.python_tree, file.path, line, message):
            confidence = "medium"  # the module may receive the name in a way ruff does not follow
        if code == "invalid-syntax" and project_template_path(file.path):
            confidence = "low"  # Jinja that renders to Python: a person may look, no thread
        if anchor != line:
            why = (
                f"The name is used on line {line}, which this change kept, in a function whose decorator or "
                f"signature it changed: the use was fine before and fails now. {why}"
            ).strip()
        issues.append(
            Issue(
                line=anchor,
                end_line=max(anchor, int(end_location.get("row") or line)) if anchor == line else anchor,
                rule=f"ruff:{code}",
                severity=severity_of(code),
                title=message if code != "invalid-syntax" else f"Syntax error: {message}",
                body=" ".join(part for part in (message + ".", why) if part),
                kind=f"ruff:{code}",
                confidence=confidence,
                suggestion=suggestion_from_fix(file, diag) if code in SUGGESTED_FIXES else None,
            )
        )
    return misspelled_imports(file.python_tree, issues)


MIN_MISSPELLING_SIMILARITY = 0.8  # `reciever`/`receiver` 0.88, `reqest`/`request` 0.92; `site`/`size` 0.75


# The exception-swallowing family: what they report lives in the handler's own lines, so a handler
# the change only moved or re-indented (`ChangedFile.moved`) says the same thing it said before.
SWALLOW_CODES = frozenset({"E722", "S110", "S112", "BLE001", "B012"})


def misspelled_imports(tree: ast.Module | None, issues: list[Issue]) -> list[Issue]:
    """One thread for one typo: a missing name that misspells a name the module imports and never
    uses (`@reciever(...)` beside an unused `receiver`) is one mistake, said on the missing name with
    the import it meant; the unused import's own finding goes."""
    unused = {
        id(i): binding
        for i in issues
        if i.rule == "ruff:F401" and (binding := unused_import_binding(tree, i.line, i.title)) is not None
    }
    if not unused:
        return issues
    merged: list[Issue] = []
    meant: set[int] = set()
    for issue in issues:
        name = undefined_name(issue.title) if issue.rule == "ruff:F821" else None
        if name is not None:
            close = [
                (j, binding)
                for j in issues
                if (binding := unused.get(id(j))) is not None
                and id(j) not in meant
                and SequenceMatcher(None, name, binding).ratio() >= MIN_MISSPELLING_SIMILARITY
            ]
            if close:
                j, binding = close[0]
                meant.add(id(j))
                issue = replace(
                    issue, body=f"{issue.body} `{binding}` is imported on line {j.line} and never used: a misspelling?"
                )
        merged.append(issue)
    return [i for i in merged if id(i) not in meant]


# ruff's fixes offered as one-click suggestions: where ruff calls the fix "safe" it changes nothing
# but the diagnostic (an import nobody uses, an f-string with no placeholder, `== None`). Other
# rules' fixes, even safe ones, are left to the author.
SUGGESTED_FIXES = frozenset({"F401", "F541", "E711", "E712"})


def suggestion_from_fix(file: ChangedFile, diag: dict[str, Any]) -> Suggestion | None:
    """ruff's safe fix as a replacement of whole new-file lines, when every line it touches is one
    this change added (a suggestion never edits code the merge request did not write)."""
    fix = diag.get("fix")
    if not isinstance(fix, dict) or fix.get("applicability") != "safe":
        return None
    edits = [e for e in fix.get("edits") or [] if isinstance(e, dict)]
    if not edits:
        return None
    text = file.text
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)

    def offset(point: dict[str, Any]) -> int:
        row, column = int(point["row"]), int(point["column"])  # 1-based; columns count characters
        if row > len(starts):
            return len(text)
        return min(starts[row - 1] + column - 1, len(text))

    try:
        spans = [(offset(e["location"]), offset(e["end_location"]), str(e.get("content") or "")) for e in edits]
        first = min(int(e["location"]["row"]) for e in edits)
        last = max(
            int(e["end_location"]["row"]) - (1 if int(e["end_location"]["column"]) == 1 and
                                             int(e["end_location"]["row"]) > int(e["location"]["row"]) else 0)
            for e in edits
        )  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None
    if first < 1 or last < first or any(not file.is_changed(n) for n in range(first, last + 1)):
        return None
    region_start = starts[first - 1]
    region_end = starts[last] if last < len(starts) else len(text)
    region = text[region_start:region_end]
    for start, end, content in sorted(spans, reverse=True):
        if not region_start <= start <= end <= region_end:
            return None
        region = region[: start - region_start] + content + region[end - region_start :]
        region_end += len(content) - (end - start)
    original = text[starts[first - 1] : (starts[last] - 1 if last < len(starts) else len(text))]
    replacement = region[:-1] if region.endswith("\n") else region
    return Suggestion(start_line=first, end_line=last, original=original, replacement=replacement)
