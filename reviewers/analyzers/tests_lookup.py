"""Which tests exercise a source file and its symbols, found by reading test files (never running them).

A test file is one `reviewers.paths.is_test_path` recognises, in a language tests are written in. A test
references a symbol when it mentions the symbol's module (`names_module`: its dotted name, or its
file stem together with the stem's package) and the symbol's name as a word; the test functions
whose bodies mention the name are named.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from reviewers.analyzers.imports import python_module_name
from reviewers.analyzers.parsing import parse_module
from reviewers.kernel.contracts import Workspace
from reviewers.paths import is_test_path, language_of

MAX_TEST_FILES = 1000  # test files read per review; past this a lookup says it stopped early
# Test files asked of the workspace together, where it can read many at once (`read_files`: one `git
# cat-file --batch` instead of a process per file, which cost a 400-test-file repository 7 of its 10
# seconds). Small enough that the review's deadline is still asked between chunks.
PREFETCH_CHUNK = 64
# A test is code: data under a tests folder (JSON stories, YAML cases, snapshots, recorded responses)
# holds no test function and no use of a symbol. A codec's suite can keep hundreds of megabytes of
# such fixtures, and reading them for every lookup made a two-line review take seconds.
TEST_CODE_LANGUAGES = frozenset(
    {"python", "javascript", "typescript", "go", "rust", "java", "kotlin", "ruby", "php", "c", "cpp", "csharp"}
)
_TEST_START = re.compile(
    r"^\s*(?:(?:async\s+)?def\s+(?P<py>test\w*)|func\s+(?P<go>Test\w+)|(?:it|test)\s*\(\s*['\"`](?P<js>[^'\"`]+))"
)


def module_tokens(path: str) -> tuple[str, ...]:
    """Words that show a test file talks about a module: its dotted name and its file stem."""
    if language_of(path) == "python":
        dotted = python_module_name(path)
        return (dotted, dotted.rsplit(".", 1)[-1]) if dotted else ()
    stem = path.rsplit("/", 1)[-1].split(".", 1)[0]
    return (stem,) if stem and stem != "index" else (path.rsplit("/", 2)[-2],) if "/" in path else ()


def names_module(text: str, path: str) -> bool:
    """Whether `text` names the module at `path`: its dotted name, or its file stem where the text also
    names the package the stem sits in (`from bench import learning`). A bare stem is not enough for a
    module inside a package: `learning` in `from learning.tiny_model import ...` names another package
    than `bench/learning.py`. Other languages: their file stem (or folder), as `module_tokens` says."""
    if language_of(path) != "python":
        return any(mentions(text, t) for t in module_tokens(path))
    parts = python_module_name(path).split(".")
    if not parts or not parts[-1]:
        return False
    if mentions(text, ".".join(parts)):
        return True
    return mentions(text, parts[-1]) and (len(parts) == 1 or mentions(text, parts[-2]))


@dataclass(frozen=True, slots=True)
class TestReference:
    __test__ = False  # not a pytest test class, despite the name

    path: str
    line: int
    text: str
    tests: tuple[str, ...]  # test functions whose bodies mention the symbol


MIN_DISTINCTIVE_CHARS = 8  # `find_orders`, `DiffWorkspace`: unlikely to be another symbol's name


def distinctive(name: str) -> bool:
    """A compound name (snake_case or CamelCase) long enough not to collide with common words."""
    inner = name.strip("_")
    compound = "_" in inner or any(c.isupper() for c in inner[1:])
    return len(inner) >= MIN_DISTINCTIVE_CHARS and compound


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w$]){re.escape(name)}(?![\w$])")


def mentions(text: str, name: str) -> bool:
    """Whether `name` stands as a word in `text`. The plain substring test first: most test files of a
    large suite do not contain the name at all, and it costs a fraction of the word pattern's scan."""
    return name in text and _word(name).search(text) is not None


def list_test_functions(text: str, path: str) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of each test function in a test file."""
    if language_of(path) == "python":
        tree = parse_module(text, filename=path)
        if tree is not None:
            return [
                (node.name, node.lineno, node.end_lineno or node.lineno)
                for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
            ]
    starts: list[tuple[str, int]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if match := _TEST_START.match(line):
            starts.append((match.group("py") or match.group("go") or match.group("js"), number))
    total = len(text.splitlines())
    return [
        (name, line, (starts[i + 1][1] - 1) if i + 1 < len(starts) else total) for i, (name, line) in enumerate(starts)
    ]


class TestIndex:
    """The test files of a workspace, read once per review."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        workspace: Workspace,
        *,
        max_files: int = MAX_TEST_FILES,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        """`should_stop` (the review's deadline) is asked before each test file is read: a repository
        with a thousand test files read over HTTP is a long step, and the deadline holds inside it.
        Once it says stop, unread files read as absent and `stopped` is True: a caller must not claim
        that no test mentions something."""
        self.workspace = workspace
        paths = [p for p in workspace.list_paths() if is_test_path(p) and language_of(p) in TEST_CODE_LANGUAGES]
        self.truncated = len(paths) > max_files
        self.paths = paths[:max_files]
        self.should_stop = should_stop
        self.stopped = False
        self._texts: dict[str, str | None] = {}
        self._position = {path: i for i, path in enumerate(self.paths)}
        self._prefetched: set[int] = set()  # chunks of `paths` already asked for together

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            if self.stopped or self.should_stop():
                self.stopped = True
                return None
            self._prefetch(path)
            self._texts[path] = self.workspace.read_file(path)
        return self._texts[path]

    def _prefetch(self, path: str) -> None:
        """Ask the workspace for the chunk of test files `path` is in, in one read, where it can."""
        read_files = getattr(self.workspace, "read_files", None)
        at = self._position.get(path)
        if at is None or not callable(read_files) or at // PREFETCH_CHUNK in self._prefetched:
            return
        chunk = at // PREFETCH_CHUNK
        self._prefetched.add(chunk)
        read_files(self.paths[chunk * PREFETCH_CHUNK : (chunk + 1) * PREFETCH_CHUNK])

    def references(self, source_path: str, symbol: str) -> list[TestReference]:
        """Test files that mention `symbol`, first mention per file. A generic name (`run`, `load`)
        counts only in a test that also names the module; a distinctive one counts anywhere, since
        tests often import it through a package that re-exports it."""
        generic = not distinctive(symbol)
        word = _word(symbol)
        out: list[TestReference] = []
        for path in self.paths:
            text = self.text(path)
            if text is None or path == source_path or (generic and not names_module(text, source_path)):
                continue
            lines = text.splitlines()
            hits = [n for n, line in enumerate(lines, start=1) if word.search(line)]
            if not hits:
                continue
            tests = tuple(
                name for name, start, end in list_test_functions(text, path) if any(start <= n <= end for n in hits)
            )
            out.append(TestReference(path, hits[0], lines[hits[0] - 1], tests))
        return out

    def tests_for_path(self, source_path: str, symbols: list[str]) -> list[TestReference]:
        """Test files that import or name the module at `source_path`, with the symbols they use."""
        tokens = [_word(t) for t in module_tokens(source_path)]
        out: list[TestReference] = []
        for path in self.paths:
            text = self.text(path)
            if text is None or path == source_path or not names_module(text, source_path):
                continue
            lines = text.splitlines()
            hits = [n for n, line in enumerate(lines, start=1) if any(t.search(line) for t in tokens)]
            if not hits:
                continue
            used = tuple(s for s in symbols if mentions(text, s))
            out.append(TestReference(path, hits[0], lines[hits[0] - 1], used))
        return out
