"""The test-impact reviewer: what the change does to the test suite, found by reading tests.

What a reviewer would ask for, answered from the files at head without running anything. Severity
policy, per rule (each also carries its confidence):

- `tests:removed-symbol` (high): a public definition is gone from its file, is defined nowhere else
  at head (not moved, not inherited from a base class), and unchanged tests still use it in their
  code (a word in a string or a comment is no use).
- `tests:stale-signature` (medium): a function's parameters changed so that old calls break (one
  removed or renamed, a new required one, reordered), and the tests that call it were not touched.
  A test that only defines a function of the same name (an error handler, a view's method) or
  that defines the name itself does not call it. A reorder is not reported when no call depends on
  the positions: every call in the tests and in the product code (but those this change wrote, for
  the new order) passes fewer arguments by position than the first moved slot, the rest by keyword.
- `tests:stale-constant` (medium): a module constant's value changed and the tests that exercise it
  were not touched, and some test pins the old value: it writes the old literal, or reaches the
  constant through a function of the module (its expected results then hang on the value), or uses a
  value between the old and the new one (named). A test that reads the constant by name and writes
  no old value follows the new one (a release's `VERSION` bump, an enum renumbered). Only a value a
  test can pin counts: a literal or constant arithmetic on at least one side (not two computations
  such as `platform.python_implementation() == "PyPy"` → `sys.implementation.name == "pypy"`), and
  never a re-spelling of the same imported object (`typing.TypeVar("T")` → `TypeVar("T")`).
- `tests:test-deleted` (medium): a test function was deleted while the code it called still exists
  (not a helper of the package's `testing` module) and the change does not define it again
  elsewhere (moved to another file or a base class) nor take its expectation out of the product.
- `tests:test-weakened` (low): a test lost assertion lines.
- `tests:untested-new` (low): new public code with real logic (not stubs, not one-statement
  wrappers) that no test mentions and no other code calls (its callers' tests would exercise it),
  that the tests this change adds do not call (nor, for a method dispatched by a built name such as
  `getattr(self, f"handle_{sig}")`, name its class or dispatcher), in a module whose neighbours the
  repository does test. A method its class already had at the base through a base class (now
  defined on the class itself) is not new: the class's tests call it. Nor is one with a doctest
  (`>>>` in its docstring), a route handler whose URL a test requests (`client.get("/items/3")` for
  `@app.get("/items/{id}")`, under its router's prefix), or code the base had elsewhere in the
  changed files (renamed, moved, or extracted from a function the tests already run, which now
  calls it: the tests that ran the old code run this). ONE
  grouped finding per merge request, never on tests, fixtures, scripts or generated code.
"""

from __future__ import annotations

import ast
import posixpath
import re

from reviewers.analyzers.base_tree import BaseTree
from reviewers.analyzers.changed_file import ChangedFile, Issue, looks_generated, vendored_under
from reviewers.analyzers.config_changes import numeric_value, value_changes
from reviewers.analyzers.parsing import parse_expression, parse_module
from reviewers.analyzers.symbols import (
    DEFINITION_LANGUAGES,
    Definition,
    NameDispatch,
    breaking_change,
    defined_at_head,
    first_moved_position,
    gone_definition_names,
    inherited_method,
    inherits_from_outside,
    is_new,
    name_dispatches,
    public_definitions,
    python_shape,
    removed_definition_names,
    removed_python_shape,
    signature_changed,
    top_level_classes,
    top_level_names,
)
from reviewers.analyzers.test_changes import (
    added_test_names,
    removed_vocabulary,
    rewritten_raises,
    strip_strings_and_comments,
    test_change_issues,
)
from reviewers.analyzers.tests_lookup import (
    TestIndex,
    TestReference,
    distinctive,
    list_test_functions,
    module_tokens,
)
from reviewers.kernel.contracts import ReviewContext
from reviewers.kernel.errors import InputError
from reviewers.paths import is_code_path, is_test_path, language_of
from reviewers.reviewer import Analysis, Analyzer, ReviewerSpec

INSTRUCTIONS = """You are the test-impact reviewer. For each changed public function, class or constant, use
list_tests and read_file to find the tests that exercise it. Report changed behaviour (a changed
constant, signature or return value) whose tests were not updated in this merge request — name the
test that will now fail or is now wrong — and tests deleted or weakened while their subject remains.
Ask for tests of new code at most once, and only where the neighbouring code is tested. Report at a
line this merge request added, with that exact line as evidence."""

# Entry points, packaging and schema files are exercised by running the program, not by unit tests.
_NOT_UNIT_TESTED = re.compile(
    r"(?:^|/)(?:migrations?|alembic|scripts?|docs?|examples?)/|(?:^|/)(?:setup|manage|__main__)\.py$"
)
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
MAX_TESTS_NAMED = 3  # a finding that lists ten tests is read as "many"; three make the point
MAX_UNTESTED_NAMED = 5  # the grouped "new code without tests" finding names this many, then counts
MAX_NEIGHBOURS = 20  # sibling modules read to decide whether the repository tests this directory
MAX_CALLER_FILES = 50  # product files read for calls of a reordered function; more hits and the reorder is reported
MAX_CLASS_MODULES = 3  # modules read for a base class defined elsewhere: a name defined in more is ambiguous


def _supports(path: str) -> bool:
    """Test files (deleted or weakened tests) and product code in a language whose definitions we read."""
    if language_of(path) not in DEFINITION_LANGUAGES:
        return False
    return is_test_path(path) or (is_code_path(path) and not _NOT_UNIT_TESTED.search(path))


def _untestable(path: str) -> bool:
    return (
        not is_code_path(path) or bool(_NOT_UNIT_TESTED.search(path)) or language_of(path) not in DEFINITION_LANGUAGES
    )


def _pinnable(value: str) -> bool:
    """Whether a test could pin this value: a number (constant arithmetic, durations) or a literal."""
    if numeric_value(value) is not None or value.strip().lower() in ("true", "false", "null", "none"):
        return True
    tree = parse_expression(value.strip())
    if tree is None:
        return False
    try:
        ast.literal_eval(tree.body)  # reads the tree; evaluates nothing but literals
    except (ValueError, TypeError, MemoryError, RecursionError):
        return False
    return True


def _names(refs: list[TestReference]) -> str:
    named = [f"{r.path}::{t}" for r in refs for t in r.tests] or [r.path for r in refs]
    more = f" and {len(named) - MAX_TESTS_NAMED} more" if len(named) > MAX_TESTS_NAMED else ""
    return ", ".join(named[:MAX_TESTS_NAMED]) + more


_ROUTE_METHODS = frozenset(
    {"route", "get", "post", "put", "patch", "delete", "api_route", "websocket", "head", "options"}
)
_PLACEHOLDER = re.compile(r"<[^<>]*>|\{[^{}]*\}")
MIN_URL_LITERAL = 3  # characters of fixed text a route's path needs before a test's URL can be said to name it


def _definition_node(tree: ast.Module | None, definition: Definition) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    if tree is None or definition.kind == "class":
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == definition.name
            and definition.line <= node.lineno <= max(definition.end_line, definition.line)
        ):
            return node
    return None


MIN_MOVED_STATEMENTS = 2  # one statement is shared by too many functions to say the code moved


def _body_statements(node: ast.AST) -> list[ast.stmt]:
    """A function's statements without its docstring and a final `return` (an extracted helper's
    new `return` hands back what the code it came from computed)."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return []
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if body and isinstance(body[-1], ast.Return) and len(body) > MIN_MOVED_STATEMENTS:
        body = body[:-1]
    return body


def _route_paths(node: ast.AST) -> list[str]:
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return []
    found: list[str] = []
    for decorator in node.decorator_list:
        if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)):
            continue
        if decorator.func.attr not in _ROUTE_METHODS:
            continue
        given = [*decorator.args[:1], *(k.value for k in decorator.keywords if k.arg in ("rule", "path"))]
        found += [g.value for g in given if isinstance(g, ast.Constant) and isinstance(g.value, str)]
    return found


def _router_prefixes(tree: ast.Module) -> set[str]:
    """`APIRouter(prefix="/items")`, `Blueprint(..., url_prefix="/api")`: the prefixes a module declares."""
    return {
        k.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for k in node.keywords
        if k.arg in ("prefix", "url_prefix") and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)
    }


def _url_pattern(path: str) -> re.Pattern[str] | None:
    """A route path as a pattern for the URLs tests request: each placeholder one segment."""
    literal = _PLACEHOLDER.sub("", path).strip("/")
    if len(literal) < MIN_URL_LITERAL:
        return None
    parts = _PLACEHOLDER.split(path.rstrip("/"))
    body = r"[^/\s\"'?]+".join(re.escape(p) for p in parts)
    return re.compile(rf"[\"'f]{body}/?(?:[\"'?#]|$)", re.M)


def _flipping_tests(index: TestIndex, refs: list[TestReference], low: float, high: float) -> list[str]:
    """Tests whose bodies use a number in (low, high]: inputs on which the old and new value disagree."""
    flips: list[str] = []
    for ref in refs:
        text = index.text(ref.path) or ""
        lines = text.splitlines()
        for name, start, end in list_test_functions(text, ref.path):
            if name not in ref.tests:
                continue
            body = "\n".join(lines[start - 1 : end])
            if any(low < float(n) <= high for n in _NUMBER.findall(body)):
                flips.append(f"{ref.path}::{name}")
    return flips


class TestImpactAnalyzer:
    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, context: ReviewContext) -> None:
        self.context = context
        self.changed_tests = {f.path for f in context.files if is_test_path(f.path)}
        self._index: TestIndex | None = None
        self._untested_reported = False
        self._tested_dirs: dict[str, bool] = {}  # directory → whether a test names a module in it
        self._taken_out: tuple[frozenset[str], frozenset[str]] | None = None
        self._added_test_code: list[str] | None = None
        self._base: BaseTree | None = None
        self._base_modules: dict[str, ast.Module | None] = {}  # head path → its module at the base
        self._base_classes: dict[str, ast.ClassDef | None] = {}  # class name → its definition at the base
        self._base_bodies: set[str] | None = None  # bodies of the base's functions in the changed files

    @property
    def index(self) -> TestIndex:
        if self._index is None:
            self._index = TestIndex(self.context.workspace, should_stop=self.context.past_deadline)
        return self._index

    @property
    def base(self) -> BaseTree:
        if self._base is None:
            self._base = BaseTree(self.context.workspace, self.context.files)
        return self._base

    def taken_out(self) -> tuple[frozenset[str], frozenset[str]]:
        """What the change took out of the product, read once per review: names it removed and wrote
        nowhere, and exceptions whose raise or guarding condition it rewrote."""
        if self._taken_out is None:
            base = self.base
            self._taken_out = (
                removed_vocabulary(self.context.files, base, self.context.workspace),
                rewritten_raises(self.context.files, base),
            )
        return self._taken_out

    def _pins(self, path: str, value: str) -> bool:
        """Whether a test file writes the constant's old value: the literal, spaces aside (a number
        as a whole word, so 30 is not read in 130). A file that cannot be read counts as pinning it."""
        text = self.context.workspace.read_file(path)
        if text is None:
            return True
        literal = "".join(value.split())
        if not literal:
            return True
        if re.fullmatch(r"-?[\d_.]+", literal):
            return re.search(rf"(?<![\w.]){re.escape(literal)}(?![\w.])", text) is not None
        if len(literal) >= 2 and literal[0] == literal[-1] and literal[0] in "'\"`":
            literal = literal[1:-1]  # a string, whichever quotes the test writes it with
        return literal in "".join(text.split())

    def stale(self, refs: list[TestReference]) -> list[TestReference]:
        """The referencing tests, if none of them was touched by this change; else nothing to say."""
        return [] if any(r.path in self.changed_tests for r in refs) else refs

    def untested(self, file: ChangedFile) -> list[Definition]:
        """New public definitions with real logic that no test mentions (a class covers its methods)."""
        definitions = public_definitions(file)
        removed = removed_definition_names(file)
        new_classes = {d.name for d in definitions if d.kind == "class" and is_new(d, file, removed)}
        dispatches = name_dispatches(file.python_tree) if file.python_tree is not None else []
        untested = [
            d
            for d in definitions
            if d.owner not in new_classes
            and is_new(d, file, removed)
            and d.has_behaviour
            and d.has_logic
            and not self.index.references(file.path, d.name)
            and not self.tested_in_change(d, dispatches)
            and not self.inherited_before(file.path, d)
            and not self.used_elsewhere(file.path, d)
            and not self.exercised_otherwise(file, d)
        ]
        # the deadline stopped the reading of test files: "no test mentions it" is not known
        return [] if self.index.stopped else untested

    def exercised_otherwise(self, file: ChangedFile, definition: Definition) -> bool:
        """Whether tests reach the definition without naming it: a doctest, code the base already had
        (renamed, moved, or extracted from a function its tests run), a request to its route's URL."""
        node = _definition_node(file.python_tree, definition)
        if node is not None:
            docstring = ast.get_docstring(node, clean=False) or ""
            if ">>>" in docstring:
                return True
            if self.renamed(file, node):
                return True
            if self.requested_by_url(file, node):
                return True
        return False

    def renamed(self, file: ChangedFile, node: ast.AST) -> bool:
        """Whether the base had this body's statements (docstring and a final `return` aside) in a
        function of this file or of a file the change edits: the definition was renamed, moved, or
        extracted from a function whose tests now run it through the call left in its place."""
        body = _body_statements(node)
        if len(body) < MIN_MOVED_STATEMENTS:
            return False
        if self._base_bodies is None:
            found: set[str] = set()
            for change in self.context.files:
                if language_of(change.path) != "python" or change.status == "added":
                    continue
                tree = self.base_module(change.path)
                for old in ast.walk(tree) if tree is not None else ():
                    if isinstance(old, ast.FunctionDef | ast.AsyncFunctionDef):
                        found.update(ast.dump(s) for s in ast.walk(old) if isinstance(s, ast.stmt) and s is not old)
            self._base_bodies = found
        return all(ast.dump(s) in self._base_bodies for s in body)

    def requested_by_url(self, file: ChangedFile, node: ast.AST) -> bool:
        """Whether a test requests the URL of the route this function handles (its decorator's path,
        placeholders read as any segment, under a router prefix the module declares)."""
        paths = _route_paths(node)
        if not paths or file.python_tree is None:
            return False
        prefixes = {""} | _router_prefixes(file.python_tree)
        patterns = [p for p in (_url_pattern(pre + path) for pre in prefixes for path in paths) if p is not None]
        if not patterns:
            return False
        for test_path in self.index.paths:
            text = self.index.text(test_path)
            if text is not None and any(p.search(text) for p in patterns):
                return True
        return False

    def base_module(self, path: str) -> ast.Module | None:
        """The Python module at `path` as it was at the base; None for a file the change added."""
        if path not in self._base_modules:
            old = self.base.base_path(path) if language_of(path) == "python" else None
            text = self.base.text(old) if old is not None else None
            self._base_modules[path] = parse_module(text, filename=path) if text is not None else None
        return self._base_modules[path]

    def base_class(self, name: str) -> ast.ClassDef | None:
        """A product class named `name` in another module, as it was at the base."""
        if name not in self._base_classes:
            try:
                paths = defined_at_head(self.context.workspace, name, outside="")
            except InputError:
                paths = []
            found = (
                top_level_classes(tree).get(name)
                for path in paths[:MAX_CLASS_MODULES]
                if (tree := self.base_module(path)) is not None
            )
            self._base_classes[name] = next((c for c in found if c is not None), None)
        return self._base_classes[name]

    def inherited_before(self, path: str, definition: Definition) -> bool:
        """Whether a method new to its class re-implements one the class already had at the base from a
        base class (`Proxy.getall`, inherited from `_Base` until this change defined it on `Proxy`): the
        API is not new, and the tests of the class that call it exercise the new body too."""
        if definition.kind != "method":
            return False
        tree = self.base_module(path)
        if tree is None:
            return False
        return inherited_method(tree, definition.owner, definition.name, elsewhere=self.base_class)

    def added_test_code(self) -> list[str]:
        """The lines this change adds to test files, strings and comments taken out, read once."""
        if self._added_test_code is None:
            self._added_test_code = [
                strip_strings_and_comments(text)
                for change in self.context.files
                if is_test_path(change.path) and change.status != "deleted"
                for text in change.added_lines().values()
            ]
        return self._added_test_code

    def tested_in_change(self, definition: Definition, dispatches: list[NameDispatch]) -> bool:
        """Whether the tests this change writes exercise the new definition: they call it (a generic
        name such as `unblock` counts only as a call), or, for a method called through a name built at
        run time (`getattr(self, f"handle_{sig}")`), they name the class or the dispatching method."""
        code = self.added_test_code()
        if not code:
            return False
        name = re.escape(definition.name)
        use = re.compile(rf"\b{name}\b" if distinctive(definition.name) else rf"\b{name}\s*\(")
        if any(use.search(line) for line in code):
            return True
        through = {n for d in dispatches if d.reaches(definition) for n in (d.owner, d.dispatcher) if n}
        words = [re.compile(rf"\b{re.escape(n)}\b") for n in through]
        return any(w.search(line) for w in words for line in code)

    def used_elsewhere(self, path: str, definition: Definition) -> bool:
        """Whether other product code uses the definition (calls it, passes it, subclasses it): then the
        tests of that code exercise it too, and asking for its own test is a matter of taste. A
        generic name (`run`) counts in another file only where that file names its module too."""
        name = re.escape(definition.name)
        tokens = [re.compile(rf"\b{re.escape(t)}\b") for t in module_tokens(path)]
        try:
            hits = self.context.workspace.search(rf"\b{name}\b", max_hits=50)
        except InputError:
            return True  # the repository could not be searched: assume it is used, claim nothing
        for hit in hits:
            if is_test_path(hit.path) or re.match(rf"\s*(async +)?(def|class|function|func) +{name}\b", hit.text):
                continue
            if hit.path == path:
                if not definition.line <= hit.line <= definition.end_line:
                    return True
            elif distinctive(definition.name) or any(
                t.search(self.context.workspace.read_file(hit.path) or "") for t in tokens
            ):
                return True
        return False

    def tests_neighbours(self, path: str) -> bool:
        """Whether the repository tests the code around `path`: the file itself before this change,
        or another module of its directory, is named by a test. A repository (or a directory) without
        tests has made its choice, and a bare diff shows no tests at all: then "add a test" is noise."""
        if not self.index.paths:
            return False
        directory = posixpath.dirname(path)
        if directory not in self._tested_dirs:
            self._tested_dirs[directory] = self._tests_directory(directory)
        return self._tested_dirs[directory]

    def _tests_directory(self, directory: str) -> bool:
        added = {f.path for f in self.context.files if f.status == "added"}
        siblings = [
            p
            for p in self.context.workspace.list_paths()
            if posixpath.dirname(p) == directory and p not in added and is_code_path(p)
            and not p.endswith("/__init__.py") and p != "__init__.py"
        ][:MAX_NEIGHBOURS]  # fmt: skip
        return any(self.index.tests_for_path(p, []) for p in siblings)

    def untested_issues(self, file: ChangedFile) -> list[Issue]:
        """At most one finding per merge request: the new untested code of every changed file, named
        at the first such definition of the first file that has one."""
        if self._untested_reported or _untestable(file.path):
            return []
        # the neighbours first: a repository (or a bare diff) without tests near this file settles it
        # without searching for every new definition's uses
        if not self.tests_neighbours(file.path):
            return []
        here = self.untested(file)
        if not here:
            return []
        self._untested_reported = True
        named = [f"`{d.qualified}`" for d in here]
        for change in self.context.files:
            if change.path == file.path or change.status == "deleted" or _untestable(change.path):
                continue
            text = self.context.workspace.read_file(change.path)
            if text is None or looks_generated(text) or vendored_under(change.path) is not None:
                continue
            other = ChangedFile(change, text)
            named += [f"`{d.qualified}` ({change.path})" for d in self.untested(other)]
        more = f" and {len(named) - MAX_UNTESTED_NAMED} more" if len(named) > MAX_UNTESTED_NAMED else ""
        return [
            Issue(
                here[0].line,
                "tests:untested-new",
                "low",
                f"New code without tests: {here[0].qualified}"
                + (f" and {len(named) - 1} more" if len(named) > 1 else ""),
                f"This merge request adds {', '.join(named[:MAX_UNTESTED_NAMED])}{more}, and no test mentions "
                "them, while the code around them is tested. Add tests for their expected behaviour and an edge case.",
                kind="untested",
                confidence="medium",
            )  # fmt: skip
        ]

    def signature_issues(self, file: ChangedFile, definitions: list[Definition], removed: set[str]) -> list[Issue]:
        """Functions whose parameters changed in a way that breaks old calls, with untouched tests."""
        issues: list[Issue] = []
        tree = file.python_tree
        for d in definitions:
            if d.kind == "class" or not signature_changed(d, file, removed):
                continue
            if tree is None:
                continue  # without the syntax tree the old and new parameters cannot be compared
            old, new = removed_python_shape(file, d.name), python_shape(tree, d)
            how = breaking_change(old, new) if old is not None and new is not None else None
            if how is None:
                continue
            stale = [r for r in self.stale(self.index.references(file.path, d.name)) if self._calls(r.path, d.name)]
            if stale and how == "positional parameters reordered" and old is not None and new is not None:
                moved = first_moved_position(old, new)
                if not self._calls_by_position(d.name, moved, [r.path for r in stale]):
                    continue  # every call names the moved parameters by keyword (or passes none of them)
            if stale:
                issues.append(
                    Issue(
                        d.line,
                        "tests:stale-signature",
                        "medium",
                        f"Signature of {d.qualified} changed ({how}); its tests were not updated",
                        f"`{d.qualified}` changed: {how}. {_names(stale)} still call it and were not touched by this "
                        "merge request. Update the tests to the new signature and cover the new parameters.",
                        kind="stale-tests",
                        confidence="high",
                    )  # fmt: skip
                )
        return issues

    def _calls_by_position(self, name: str, position: int, test_paths: list[str]) -> bool:
        """Whether a call of `name` passes an argument by position at `position` or after (or spreads
        `*args`), in the given tests or in the product code at head. Calls on lines this change wrote
        follow the new order; a file that does not parse, or too many callers, counts as depending."""
        written = {c.path: set(c.added_lines()) for c in self.context.files}
        callers = [(path, self.index.text(path)) for path in test_paths]
        hits = self.context.workspace.search(rf"\b{re.escape(name)}\s*\(", max_hits=MAX_CALLER_FILES * 4)
        product = sorted({h.path for h in hits if h.path.endswith(".py") and not is_test_path(h.path)})
        if len(hits) >= MAX_CALLER_FILES * 4 or len(product) > MAX_CALLER_FILES:
            return True
        callers += [(path, self.context.workspace.read_file(path)) for path in product]
        for path, text in callers:
            tree = parse_module(text) if text is not None else None
            if tree is None:
                return True
            skip = written.get(path, set())
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or node.lineno in skip:
                    continue
                func = node.func
                callee = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if callee == name and (len(node.args) > position or any(isinstance(a, ast.Starred) for a in node.args)):
                    return True
        return False

    def _uses_in_code(self, test_path: str, name: str) -> bool:
        """Whether a test file names `name` in its code, not only in strings and comments (`FOO=env`)."""
        word = re.compile(rf"\b{re.escape(name)}\b")
        return any(
            word.search(strip_strings_and_comments(line)) for line in (self.index.text(test_path) or "").splitlines()
        )

    def _calls(self, test_path: str, name: str) -> bool:
        """Whether a test file calls `name` and does not define a function of that name itself."""
        text = self.index.text(test_path) or ""
        if re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\b", text, re.MULTILINE):
            return False  # its calls are to its own function, or cannot be told apart from them
        return re.search(rf"\b{re.escape(name)}\s*\(", text) is not None

    def constant_issues(self, file: ChangedFile, definitions: list[Definition]) -> list[Issue]:
        issues: list[Issue] = []
        for change in value_changes(file):
            if change.old is None or not _CONSTANT.match(change.key):
                continue
            if not (_pinnable(change.old) or _pinnable(change.new)):
                continue  # two computations: no test pins either value
            word = re.compile(rf"\b{re.escape(change.key)}\b")
            readers = [
                d.name
                for d in definitions
                if d.kind != "class" and any(word.search(file.line_text(n)) for n in range(d.line, d.end_line + 1))
            ]
            refs: dict[str, TestReference] = {}
            through_readers: set[str] = set()  # test files that reach the constant through a function
            for symbol in [change.key, *readers]:
                for ref in self.index.references(file.path, symbol):
                    known = refs.get(ref.path)
                    tests = tuple(dict.fromkeys((*known.tests, *ref.tests))) if known else ref.tests
                    refs[ref.path] = TestReference(ref.path, ref.line, ref.text, tests)
                    if symbol != change.key:
                        through_readers.add(ref.path)
            stale = self.stale(list(refs.values()))
            if not stale:
                continue
            old, new = numeric_value(change.old), numeric_value(change.new)
            flips = (
                _flipping_tests(self.index, stale, min(old, new), max(old, new))
                if old is not None and new is not None
                else []
            )
            if not flips and not any(r.path in through_readers or self._pins(r.path, change.old) for r in stale):
                continue  # every test reads the constant by name and writes no old value: it follows the new one
            via = f" (through {', '.join(readers)})" if readers else ""
            if flips:
                title = f"{change.key} changed; {flips[0]} now tests a different outcome"
                detail = (
                    f"{', '.join(flips[:MAX_TESTS_NAMED])} use a value between the old ({change.old}) and the new "
                    f"({change.new}) value of `{change.key}`{via}, so their expected result flips; they were not "
                    "updated in this merge request."
                )
            else:
                title = f"{change.key} changed; the tests that exercise it were not updated"
                detail = f"{_names(stale)} exercise `{change.key}`{via} and were not updated in this merge request."
            issues.append(
                Issue(
                    change.line,
                    "tests:stale-constant",
                    "medium",
                    title[:200],
                    f"`{change.key}` changed from {change.old} to {change.new}. {detail} Update the tests to pin the "
                    "new value, or confirm the old expectations still hold.",
                    kind="stale-tests",
                    confidence="high" if flips else "medium",
                )  # fmt: skip
            )
        return issues

    def removal_issues(self, file: ChangedFile) -> list[Issue]:
        issues: list[Issue] = []
        local_roots: set[str] | None = None  # the repository's packages, listed once and only when needed
        for name in sorted(n for n in gone_definition_names(file) if not n.startswith("_")):
            refs = self.stale(self.index.references(file.path, name))
            stale = [r for r in refs if self._uses_in_code(r.path, name)]
            anchor = self._anchor_for_removal(file, name) if stale else None
            if anchor is None:
                continue  # nothing uses it
            if local_roots is None:
                local_roots = top_level_names(self.context.workspace.list_paths())
            if inherits_from_outside(file, name, local_roots):
                continue  # a base class from another package may define it now
            try:
                if defined_at_head(self.context.workspace, name, outside=file.path):
                    continue  # it moved to another module or a base class
            except InputError:
                continue  # the head tree could not be searched: no claim we cannot check
            issues.append(
                Issue(
                    anchor,
                    "tests:removed-symbol",
                    "high",
                    f"{name} was removed but tests still use it",
                    f"`{name}` no longer exists in `{file.path}` nor anywhere else in the repository, and "
                    f"{_names(stale)} still use it: they will fail to import or call it.",
                    kind="stale-tests",
                    confidence="high",
                )  # fmt: skip
            )
        return issues

    @staticmethod
    def _anchor_for_removal(file: ChangedFile, name: str) -> int | None:
        """Where the removed definition stood: the next new-side line after it in its hunk (an added
        line that replaced it, or the context that follows), else the last new-side line before it."""
        pattern = re.compile(rf"\b(?:def|class|function|func|fn|fun)\s+{re.escape(name)}\b")
        for hunk in file.change.hunks:
            lines = list(hunk.lines)
            at = next((i for i, ln in enumerate(lines) if ln.kind == "del" and pattern.search(ln.text)), None)
            if at is None:
                continue
            after = [ln.new_line for ln in lines[at:] if ln.new_line is not None]
            before = [ln.new_line for ln in lines[:at] if ln.new_line is not None]
            line = after[0] if after else before[-1] if before else hunk.new_start
            return line if 1 <= line <= len(file.lines) else None
        return None

    def __call__(self, file: ChangedFile) -> Analysis:
        if is_test_path(file.path):
            elsewhere = frozenset(
                name for c in self.context.files if c.path != file.path for name in added_test_names(c)
            )
            gone_names, raises = self.taken_out()
            issues = test_change_issues(
                file, self.context.workspace, defined_elsewhere=elsewhere, taken_out=gone_names, raises_rewritten=raises
            )
            return Analysis(issues)
        definitions = public_definitions(file)
        removed = removed_definition_names(file)
        issues = self.untested_issues(file)
        issues += self.signature_issues(file, definitions, removed)
        issues += self.constant_issues(file, definitions)
        issues += self.removal_issues(file)
        problems = [f"only the first {len(self.index.paths)} test files were read"] if self.index.truncated else []
        if self.index.stopped:
            problems.append("the review deadline stopped the reading of test files; untested code not checked")
        return Analysis(issues, problems)


def _make_analyzer(context: ReviewContext) -> Analyzer:
    return TestImpactAnalyzer(context)


TEST_IMPACT = ReviewerSpec(
    name="test_impact",
    description="new public code without tests; changed constants/signatures whose tests were not updated; "
    "removed code still used by tests",
    instructions=INSTRUCTIONS,
    supports=_supports,
    make_analyzer=_make_analyzer,
)
