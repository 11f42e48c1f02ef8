"""Reading Python whatever version it was written for: the one syntax tree every analyzer sees.

The service runs on Python 3.11, and `ast.parse` reads only what the running interpreter reads. Code
under review is written for 3.12 to 3.14: `f"{d["name"]}"`, `def first[T](xs: list[T])`,
`type Json = dict[str, Json]`, `except A, B:`, t-strings. Before this module such a file was silently
not analyzed by any syntax-tree rule (37% of a public corpus of 1,243 web handlers).

How, and why this way. `parse_python` first asks the running `ast` (nothing changes for a file it
reads, which is most files, at no cost). When that refuses the text, libcst (1.9, which parses Python
3.0 to 3.15 on any interpreter) reads it, and `reviewers.analyzers.downlevel` rewrites, line for
line, what 3.11 does not read; 3.11's `ast` parses the rewrite, and the f-string and t-string nodes
are spliced back in. So every analyzer gets an ordinary `ast.Module` whose line numbers are those of
the file, built by the same interpreter for every file. (ruff, which runs bandit's checks and the
code-quality rules, reads every version's syntax itself.)

The other means — running the analyzers under a newer interpreter when the machine has one — was not
taken: the production image has one Python, findings would depend on what else happens to be
installed, and the analyzers would have to run in a second process per file all the same. And
re-quoting f-strings as text for 3.11 cannot work in general (3.11 forbids backslashes and comments
inside the braces and any reuse of the enclosing quote), hence the splice.

Why libcst runs in a child process. Its native parser is not safe on hostile input: an expression of
8,000 `+` terms crashes the process (SIGSEGV, stack overflow), and a few thousand nested brackets
take seconds and gigabytes. Code under review is hostile input. So the conversion runs in one
long-lived child (`python -I downlevel.py --serve`, capped at `CONVERTER_MEMORY_BYTES`) behind a
deadline; a crash or a timeout is a parse error for that file, and the next file gets a fresh child.

Cost (`python -m bench.pysyntax`, 300 site-packages modules, median 238 lines, on the 2-core box
under a load average of 7, so upper bounds; 2026-11-25): a file 3.11 reads pays what `ast.parse`
pays (median 1.1 ms against 1.3 ms); a file in 3.12+ syntax pays a median 60 ms (p90 350 ms), 43 times
`ast.parse`, once per text: `_converted` is cached, so the four reviewers pay it once.

Errors: `PythonSyntaxError` (in `reviewers.kernel.errors`) names the syntax and line; its `reason`
is what a review's `not_reviewed` entry says for the file.
"""

from __future__ import annotations

import ast
import atexit
import functools
import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reviewers.analyzers.downlevel import DownlevelError, Downlevelled, splice, write_message
from reviewers.kernel.errors import PythonSyntaxError

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
# A generous deadline for one file's conversion: libcst reads a 4,000-line module in well under a
# second here; only hostile nesting takes longer, and that is a parse error, not a hung review.
CONVERT_TIMEOUT_S = 30.0
CONVERTED_CACHE_SIZE = 32  # distinct file texts whose conversion is kept (a review's Python files)
MAX_QUOTED_CHARS = 60  # of the offending line, in a reason
DOWNLEVEL_SCRIPT = Path(__file__).with_name("downlevel.py")
# CPython's own limits, the same in every version since 3.9: text past them is read by no Python, and
# libcst is not asked (deep nesting is what makes it slow or crash).
BEYOND_EVERY_VERSION = frozenset({"too many nested parentheses", "too many levels of indentation"})

# CPython 3.11 (at least up to 3.11.7, the version this project runs on) can fail `ast.parse` with
# "SystemError: AST constructor recursion depth mismatch" when two threads parse at once
# (python/cpython gh-106905), and reviewers run in threads. Parsing is fast next to the analyzers' own
# work, so it is serialised; drop the lock once every supported Python carries the fix.
_PARSE_LOCK = threading.Lock()


# The four reviewers of a review and the taint analysis's reading of the modules a change imports
# each parse the same changed files: a 10,000-line change was parsed seven times over. Readings are kept by text alone
# (a tree does not depend on the file's name; an error is given the asker's path when it is raised),
# shared read-only, for this many characters of source (the trees of a review's files are alive
# while it runs anyway; this bounds what a long-lived worker holds after).
PARSED_CACHE_CHARS = 2_000_000


@dataclass(frozen=True, slots=True)
class _Reading:
    parsed: ast.Module | PythonSyntaxError
    downlevelled: bool  # read through the converter: the running `ast` refused the text as it is


_parsed: OrderedDict[str, _Reading] = OrderedDict()
_parsed_chars = 0
_parsing: dict[str, threading.Event] = {}  # texts a thread is parsing now: the others wait
_parsed_lock = threading.Lock()


def parse_python(source: str, path: str = "<reviewed>") -> ast.Module:
    """The module's syntax tree, for Python of any version from 3.0 to 3.15, with the file's line numbers.
    The tree may be shared with other readers of the same text: never change it.

    Raises `PythonSyntaxError` naming the syntax it could not read (and where)."""
    parsed = _reading(source, path).parsed
    if isinstance(parsed, PythonSyntaxError):
        raise PythonSyntaxError(parsed.what, path=path, line=parsed.line)
    return parsed


def _reading(source: str, path: str) -> _Reading:
    reading, running = _kept_or_claimed(source)
    if running is not None:  # another thread is parsing this text: its reading, when it has one
        running.wait(CONVERT_TIMEOUT_S)
        reading, running = _kept_or_claimed(source)
    if reading is None:
        try:
            try:
                tree, downlevelled = _parse(source, path)
                reading = _Reading(tree, downlevelled)
            except PythonSyntaxError as exc:
                reading = _Reading(exc, downlevelled=False)
            _keep(source, reading)
        finally:
            if running is None:  # this thread claimed the text: let the waiting ones read it
                with _parsed_lock:
                    _parsing.pop(source).set()
    return reading


def _kept_or_claimed(key: str) -> tuple[_Reading | None, threading.Event | None]:
    """(the kept reading, None); or (None, the event of the thread parsing it now); or (None, None)
    and this thread is now the one parsing it."""
    with _parsed_lock:
        reading = _parsed.get(key)
        if reading is not None:
            _parsed.move_to_end(key)
            return reading, None
        if key in _parsing:
            return None, _parsing[key]
        _parsing[key] = threading.Event()
        return None, None


def _keep(key: str, reading: _Reading) -> None:
    global _parsed_chars
    size = len(key)
    if size > PARSED_CACHE_CHARS:
        return
    with _parsed_lock:
        if key in _parsed:
            return
        _parsed[key] = reading
        _parsed_chars += size
        while _parsed_chars > PARSED_CACHE_CHARS:
            dropped, _reading_dropped = _parsed.popitem(last=False)
            _parsed_chars -= len(dropped)


def _parse(source: str, path: str) -> tuple[ast.Module, bool]:
    """(the tree, whether the converter had to read it)."""
    if "\x00" in source:
        line = source.count("\n", 0, source.index("\x00")) + 1
        raise PythonSyntaxError(f"a NUL byte at line {line}", path=path, line=line)
    try:
        return _native_module(source, path), False
    except SyntaxError as exc:
        refused = exc
    if refused.msg in BEYOND_EVERY_VERSION:
        raise PythonSyntaxError(_described(refused.msg, refused.lineno, source), path=path, line=refused.lineno)
    converted = _converted(source)
    if isinstance(converted, _Refusal):
        what = _refusal_words(converted, refused, source)
        raise PythonSyntaxError(what, path=path, line=refused.lineno or converted.line) from None
    try:
        tree = _native_module(converted["text"], path)
    except SyntaxError as exc:
        # libcst read it but it is not Python 3.11 can be given: invalid in every version (libcst is
        # more lenient than CPython, e.g. about assignment targets), or a construct this reader lacks.
        raise PythonSyntaxError(_described(exc.msg, exc.lineno, source), path=path, line=exc.lineno) from None
    try:
        return splice(tree, converted), True
    except DownlevelError as exc:
        raise PythonSyntaxError(f"{exc.what} (the reader's own failure)", path=path) from None


def parse_python_expression(source: str) -> ast.Expression:
    """One expression's syntax tree (a settings value, say), read as `parse_python` reads a module."""
    try:
        tree = _native_parse(source, "<expression>", mode="eval")
        assert isinstance(tree, ast.Expression)
        return tree
    except SyntaxError:
        pass
    module = parse_python(source, "<expression>")
    if len(module.body) != 1 or not isinstance(module.body[0], ast.Expr):
        raise PythonSyntaxError("not a single expression", path="<expression>")
    return ast.Expression(body=module.body[0].value)


def _native_module(source: str, path: str) -> ast.Module:
    tree = _native_parse(source, path)
    assert isinstance(tree, ast.Module)
    return tree


def _native_parse(source: str, path: str, *, mode: str = "exec") -> ast.AST:
    """The running interpreter's `ast.parse`; what it raises for text too deep for it is a SyntaxError here."""
    try:
        with _PARSE_LOCK, warnings.catch_warnings():
            # Invalid escape sequences in the reviewed code are its problem, not a test failure here.
            warnings.simplefilter("ignore")
            return ast.parse(source, filename=path, mode=mode)
    except (ValueError, RecursionError, MemoryError, SystemError) as exc:
        raise PythonSyntaxError(f"nested too deeply for the parser ({type(exc).__name__})", path=path) from None


def _described(message: str, line: int | None, source: str) -> str:
    if not line:
        return message
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    if len(text) > MAX_QUOTED_CHARS:
        text = text[: MAX_QUOTED_CHARS - 3] + "..."
    return f"{message} at line {line}" + (f": `{text}`" if text else "")


@dataclass(frozen=True)
class _Refusal:
    """Why the reader could not convert a text: libcst's words (or a crash, a timeout) and its line."""

    what: str
    line: int | None


def _refusal_words(refusal: _Refusal, native: SyntaxError, source: str) -> str:
    """What to call the syntax, and where. libcst names the furthest token it reached (a line or two
    past the mistake, and "expected one of ), *, +, ..."); when 3.11 stumbled just before that, on
    something other than an f-string, its words and line ("'(' was never closed") are the clearer."""
    near = native.lineno is not None and refusal.line is not None and refusal.line - 2 <= native.lineno <= refusal.line
    if near and not native.msg.startswith("f-string"):
        return _described(native.msg, native.lineno, source)
    if refusal.line is not None:
        return _described(refusal.what, refusal.line, source)
    stop = f" (Python {PYTHON} stops at line {native.lineno}: {native.msg})" if native.lineno else ""
    return refusal.what + stop


@functools.lru_cache(maxsize=CONVERTED_CACHE_SIZE)
def _converted(source: str) -> Downlevelled | _Refusal:
    """The conversion of one text, failures included, so that a file is tried once per process."""
    answer = _CONVERTER.convert(source)
    if "error" in answer:
        line = answer.get("line")
        return _Refusal(str(answer["error"]), line if isinstance(line, int) else None)
    return answer  # type: ignore[return-value]


class _ConverterProcess:
    """The child process that runs libcst: one at a time, restarted after a crash or a timeout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the pid that started it: a forked service process starts its own

    def convert(self, source: str) -> dict[str, Any]:
        with self._lock:
            try:
                process = self._running()
                assert process.stdin is not None
                write_message(process.stdin, {"source": source})
                answer = self._answer(process, deadline=time.monotonic() + CONVERT_TIMEOUT_S)
            except TimeoutError:
                self._stop()
                return {"error": f"the reader gave up after {CONVERT_TIMEOUT_S:.0f} s", "line": None}
            except (EOFError, OSError) as exc:
                self._stop()
                return {"error": f"the reader crashed on this text ({type(exc).__name__})", "line": None}
        if not isinstance(answer, dict):
            return {"error": "the reader answered nonsense", "line": None}
        return answer

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is not None and (self._owner != os.getpid() or self._process.poll() is not None):
            if self._owner == os.getpid():
                self._stop()
            self._process = None
        if self._process is None:
            # -I: the reviewed repository's environment (PYTHONPATH, a `secrets.py` beside the script)
            # must not reach the child; libcst comes from the interpreter's own site-packages.
            self._process = subprocess.Popen(
                [sys.executable, "-I", str(DOWNLEVEL_SCRIPT), "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            self._owner = os.getpid()
        return self._process

    @staticmethod
    def _answer(process: subprocess.Popen[bytes], *, deadline: float) -> object:
        assert process.stdout is not None
        fd = process.stdout.fileno()
        received = bytearray()
        size: int | None = None
        while size is None or len(received) < 4 + size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError
            received += chunk
            if size is None and len(received) >= 4:
                size = struct.unpack(">I", received[:4])[0]
        return json.loads(received[4 : 4 + size])

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        process.kill()
        process.wait()

    def close(self) -> None:
        with self._lock:
            if self._owner == os.getpid():
                self._stop()


_CONVERTER = _ConverterProcess()
atexit.register(_CONVERTER.close)
