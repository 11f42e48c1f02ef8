"""Tests this change deleted or weakened, read from a changed test file's diff.

A deleted test matters when the code it exercised is still there: the behaviour lost its check.
A deleted test whose subject was removed in the same change is housekeeping and says nothing, and so
is a test the same change defines again elsewhere: moved to another file, or up into a base class
(in this file or another) that the test classes now inherit. So is a test whose expectation the
change took out of the product: a name the test used (the `LiveError` it expected) that the change
removes from product code and writes nowhere, or an exception it expects (`pytest.raises(X)`,
`assertRaises(X)`) whose product `raise X`, or an `if`/`elif` condition that raise sits under, the
change deleted or rewrote (X is raised elsewhere or under other conditions now, even while the name
is still written), or a warning it expects (`pytest.warns(X)`, `pytest.deprecated_call()`,
`assertWarns(X)`, `recwarn.pop(X)`, a `catch_warnings` block asserting the category) whose product
`warnings.warn(..., X)` (any call named `*warn*` given the category or an instance of it) the change
deleted or moved the same way; a test rewritten in place (the lines added in its hunk call every subject it
called, as a parametrized replacement does); and a test folded into a neighbour the change added or
rewrote, which now runs the same statements over a fixture or a parametrization standing for what the
deleted test wrote out, or gained a parametrization whose values name both tests' variants
(`reviewers.analyzers.folded_tests`); and a test renamed in place: a test the change added at the
deleted one's place (between the same surviving neighbours) with the same parametrize ids or the same
fixtures, calling each of its subjects by name or through an alias the product assigns
(`reviewers.analyzers.renamed_tests`). A name the test defines itself (a local view function)
is never its subject, nor is a helper from the package's test-support module (`testing.py`: a test
client, a runner, a request builder). A weakened test is one that still exists at head but lost
assertions: more assertion lines removed than added within it. A library's assertion helper
(`np.testing.assert_allclose(...)`, `assert_frame_equal(...)`) is an assertion line, and one that
checks the message too (`pytest.raises(X, match=...)`, `assertRaisesRegex`) counts for two: the
`raises(X)` and the `assert "..." in str(e.value)` it replaces.

Not caught: a test deleted and re-added under another name elsewhere (a rename reads as a move only
when the name is kept or the new test takes the old one's place), or a test replaced by a
parametrized case of another test whose body changed in other ways too and whose parametrize values
do not name its variant. Raises are matched by the
exception's name across the whole change, not through calls: a rewritten `raise X` in code the
deleted test never reaches still excuses it, and a test expecting a base class of the raised
exception is not excused (a custom `*DeprecationWarning` counts for `deprecated_call()`, read by its name);
a raise reached differently because an early `return` above it changed
(not an enclosing condition) is not seen, nor is any of this outside Python.
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

from reviewers.analyzers.base_tree import BaseTree, reverse_patch
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.folded_tests import folded_tests
from reviewers.analyzers.parsing import parse_module
from reviewers.analyzers.renamed_tests import Replacement, replacements_in_place
from reviewers.analyzers.symbols import defined_at_head
from reviewers.analyzers.tests_lookup import list_test_functions
from reviewers.kernel.contracts import FileChange, Workspace
from reviewers.kernel.errors import InputError
from reviewers.paths import is_code_path, is_test_path, is_test_support_path, language_of

_TEST_DEF = re.compile(r"^\s*(?:(?:async\s+)?def\s+(?P<py>test\w*)|func\s+(?P<go>Test\w+))\s*\(")
_ASSERTION = re.compile(
    r"^\s*(?:assert\b|self\.assert\w*\(|expect\s*\(|pytest\.raises\b|with\s+pytest\.raises\b|t\.(?:Error|Fatal)f?\(|"
    r"require\.\w+\(|assert\.\w+\(|"
    # a library's assertion helper: `np.testing.assert_allclose(`, `assert_frame_equal(`, `torch.testing.assert_close(`
    r"(?:[\w.]+\.)?assert_\w+\s*\(|(?:with\s+)?pytest\.warns\b)"
)
# An assertion line that checks two things: the exception's (or warning's) type and its message.
_CHECKS_MESSAGE = re.compile(r"\b(?:raises|warns)\s*\(.*\bmatch\s*=|\bassert(?:Raises|Warns)Regexp?\s*\(")
# A name of at least four characters; shorter ones (`x`, `cli`, `app`) are too common to say anything.
_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w{3,}\b")
_STRING = re.compile(r"""[rbuRBU]?("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")
_COMMENT = re.compile(r"(?:#|//).*$")
_LOCAL_DEFINITION = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)")
# `pytest.raises(X)`, `raises((X, Y), match=...)`, `self.assertRaises(X)`, `assertRaisesRegex(mod.X, ...)`
_EXPECTED_EXCEPTION = re.compile(r"\b(?:raises|assertRaises\w*)\s*\(\s*(\([^()]*\)|[\w.]+)")
# A test that expects a warning: pytest's `warns`/`deprecated_call`/`recwarn`, unittest's `assertWarns`,
# or a `catch_warnings` block whose records it reads.
_EXPECTS_WARNING = re.compile(r"\b(?:warns|deprecated_call|recwarn|assertWarns\w*|catch_warnings)\b")
_WARNING_NAME = re.compile(r"\b[A-Za-z_]\w*Warning\b")
# What `pytest.deprecated_call()` accepts.
DEPRECATION_WARNINGS = frozenset({"DeprecationWarning", "PendingDeprecationWarning", "FutureWarning"})
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w{2,})\s*\(")
# Names a test calls that are not its subject: the language, the test framework, common helpers.
_NOT_A_SUBJECT = frozenset(
    {"assert", "print", "len", "str", "int", "float", "list", "dict", "set", "tuple", "range", "sorted", "open",
     "isinstance", "type", "super", "raises", "approx", "fixture", "parametrize", "expect", "describe", "require",
     "func", "test", "Errorf", "Fatalf", "main"}
)  # fmt: skip
# Words of the language itself say nothing about which behaviour left.
# Builtin exception names stay: a `raise RuntimeError` the change removed is behaviour that left.
_BUILTIN_EXCEPTIONS = {
    n
    for n in dir(builtins)
    if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException)
}
_COMMON_WORDS = frozenset(
    {*keyword.kwlist, *keyword.softkwlist, *(set(dir(builtins)) - _BUILTIN_EXCEPTIONS), "self", "cls", "args", "kwargs"}
)
MAX_SUBJECTS = 3
_ALIAS = re.compile(r"^\s*(?P<target>\w+)\s*(?::[^=]*)?=\s*(?P<value>\w+)\s*$")


@dataclass(frozen=True, slots=True)
class RemovedTest:
    name: str
    body: list[str]  # the removed lines of its body
    anchor: int | None  # the new-side line where it stood
    written_in_place: frozenset[str] = frozenset()  # names the lines added in its hunk call


def added_test_names(change: FileChange) -> set[str]:
    """Names of the test functions whose definition an added line of `change` holds."""
    names: set[str] = set()
    for text in change.added_lines().values():
        if match := _TEST_DEF.match(text):
            names.add(match.group("py") or match.group("go"))
    return names


def removed_tests(file: ChangedFile, *, defined_elsewhere: frozenset[str] = frozenset()) -> list[RemovedTest]:
    """Test functions whose definition a removed line held and that neither the file nor another
    file of the change (`defined_elsewhere`: the test names the change's other files add) defines."""
    at_head = {name for name, _, _ in list_test_functions(file.text, file.path)} | defined_elsewhere
    out: list[RemovedTest] = []
    for hunk in file.change.hunks:
        lines = list(hunk.lines)
        for i, line in enumerate(lines):
            match = _TEST_DEF.match(line.text) if line.kind == "del" else None
            if match is None:
                continue
            name = match.group("py") or match.group("go")
            if name in at_head:
                continue
            body: list[str] = []
            for later in lines[i + 1 :]:
                if later.kind != "del" or _TEST_DEF.match(later.text):
                    break
                body.append(later.text)
            after = [ln.new_line for ln in lines[i:] if ln.new_line is not None]
            before = [ln.new_line for ln in lines[:i] if ln.new_line is not None]
            anchor = after[0] if after else before[-1] if before else None
            in_place = frozenset(m for ln in lines if ln.kind == "add" for m in _CALLED.findall(ln.text))
            out.append(RemovedTest(name, body, anchor if anchor and 1 <= anchor <= len(file.lines) else None, in_place))
    return out


def _assertion_calls(nodes: Iterable[ast.stmt]) -> bool:
    return any(
        isinstance(n, ast.Assert)
        or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.startswith("assert"))
        for stmt in nodes
        for n in ast.walk(stmt)
    )


def alternative_assertions(text: str | None, path: str) -> frozenset[int]:
    """Lines of assertions in the `else` of an `if` whose body asserts too (`if VERSION >= (5, 1):
    assert A` / `else: assert B`): one of the two runs, so removing the pair for the branch that
    runs loses one check, not two."""
    tree = parse_module(text, filename=path) if text is not None else None
    if tree is None:
        return frozenset()
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.orelse and _assertion_calls(node.body) and _assertion_calls(node.orelse):
            out.update(range(node.orelse[0].lineno, (node.orelse[-1].end_lineno or node.orelse[-1].lineno) + 1))
    return frozenset(out)


def looped_weights(text: str, path: str) -> dict[int, int]:
    """Head lines inside a `for` over a literal tuple, list or set, with how many items it runs over:
    an assertion there (`for field in ("a", "b", "c"): self.assertIsNone(r[field])`) is that many
    checks, one per item."""
    tree = parse_module(text, filename=path)
    if tree is None:
        return {}
    out: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.AsyncFor) and isinstance(node.iter, ast.Tuple | ast.List | ast.Set):
            items = len(node.iter.elts)
            for line in range(node.body[0].lineno, (node.body[-1].end_lineno or node.body[-1].lineno) + 1):
                out[line] = max(out.get(line, 1), items)
    return out


def weakened_tests(file: ChangedFile, taken_out: frozenset[str] = frozenset()) -> list[tuple[str, int, int, int]]:
    """(test name, anchor line, assertions removed, assertions added) of tests at head that lost
    assertions. A removed line is placed at the diff's new-side line that follows it in its hunk.
    Not counted as lost: an assertion on a name the change takes out of the product (`taken_out`: a
    property it deletes), or one of two alternatives of an `if`/`else` (`alternative_assertions`).
    An added assertion inside a loop over a literal counts once per item (`looped_weights`)."""
    spans = list_test_functions(file.text, file.path)
    has_removed = any(ln.kind == "del" and _ASSERTION.match(ln.text) for h in file.change.hunks for ln in h.lines)
    alternatives = (
        alternative_assertions(reverse_patch(file.text, file.change), file.change.old_path or file.path)
        if has_removed
        else frozenset()
    )
    weights = looped_weights(file.text, file.path) if has_removed else {}
    removed: dict[str, int] = {}
    added: dict[str, int] = {}
    anchors: dict[str, int] = {}

    def owner(line: int) -> str | None:
        return next((name for name, start, end in spans if start <= line <= end), None)

    for hunk in file.change.hunks:
        lines = list(hunk.lines)
        in_removed_test = False  # the assertions of a deleted test are that test's, not a neighbour's
        for i, diff_line in enumerate(lines):
            if diff_line.kind != "del":
                in_removed_test = False
            elif _TEST_DEF.match(diff_line.text):
                in_removed_test = True
            if in_removed_test or not _ASSERTION.match(diff_line.text):
                continue
            if diff_line.kind == "add" and diff_line.new_line is not None:
                if (name := owner(diff_line.new_line)) is not None:
                    # `pytest.raises(X, match=...)` checks what `raises(X)` and an assert on the message did
                    weight = weights.get(diff_line.new_line, 1) + bool(_CHECKS_MESSAGE.search(diff_line.text))
                    added[name] = added.get(name, 0) + weight
            elif diff_line.kind == "del":
                if diff_line.old_line in alternatives or taken_out & code_identifiers(diff_line.text):
                    continue  # the other branch of a version check, or a check of what the change deletes
                # the line just above a removed assertion is in its test far more often than the one below
                nearby = [ln.new_line for ln in reversed(lines[:i]) if ln.new_line is not None]
                nearby += [ln.new_line for ln in lines[i:] if ln.new_line is not None]
                if nearby and (name := owner(nearby[0])) is not None:
                    removed[name] = removed.get(name, 0) + 1
                    anchors.setdefault(name, nearby[0])
    return [(n, anchors[n], r, added.get(n, 0)) for n, r in removed.items() if r > added.get(n, 0)]


def _python_names(text: str | None, lines: set[int]) -> set[str] | None:
    """Names the code (not its strings, comments or docstrings) holds on `lines`; None when the text
    does not tokenize."""
    if text is None:
        return None
    names: set[str] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.NAME and token.start[0] in lines:
                names.add(token.string)
    except (tokenize.TokenError, SyntaxError):
        return None
    return {n for n in names if _IDENTIFIER.fullmatch(n)}


def strip_strings_and_comments(line: str) -> str:
    """One line of code with its string literals and end-of-line comment taken out."""
    return _COMMENT.sub("", _STRING.sub("", line))


def code_identifiers(line: str) -> set[str]:
    """Identifiers of one line of code, strings and comments left out."""
    return set(_IDENTIFIER.findall(strip_strings_and_comments(line)))


def removed_vocabulary(changes: Iterable[FileChange], base: BaseTree, head: Workspace) -> frozenset[str]:
    """Identifiers that removed lines of product code held and no added line of it writes: what the
    change took out of the product (an exception it no longer raises, a helper it dropped). Python
    is read by its tokens, so words of comments, docstrings and strings never count."""
    removed: set[str] = set()
    added: set[str] = set()
    for change in changes:
        if not is_code_path(change.path):
            continue
        lines = [ln for h in change.hunks for ln in h.lines]
        gone = {ln.old_line for ln in lines if ln.kind == "del" and ln.old_line is not None}
        new = {ln.new_line for ln in lines if ln.kind == "add" and ln.new_line is not None}
        if language_of(change.path) == "python":
            was = _python_names(base.text(change.old_path), gone) if gone else set()
            now = _python_names(head.read_file(change.path), new) if new and change.status != "deleted" else set()
            if was is not None and now is not None:
                removed |= was
                added |= now
                continue
        removed.update(n for ln in lines if ln.kind == "del" for n in code_identifiers(ln.text))
        added.update(n for ln in lines if ln.kind == "add" for n in code_identifiers(ln.text))
    return frozenset(removed - added - _NOT_A_SUBJECT - _COMMON_WORDS)


def _product_defines(workspace: Workspace, name: str, *, outside: str) -> bool:
    """Whether product code at head defines `name`; a test helper the package ships (`flask.testing`'s
    request builder, a CLI runner) is the test's tool, used by every test, not the behaviour it checked."""
    return any(not is_test_support_path(path) for path in defined_at_head(workspace, name, outside=outside))


def expected_exceptions(body: Iterable[str]) -> set[str]:
    """Exception names a test's body expects to be raised (the last part of a dotted name)."""
    found: set[str] = set()
    for line in body:
        for group in _EXPECTED_EXCEPTION.findall(strip_strings_and_comments(line)):
            found.update(name.rsplit(".", 1)[-1] for name in re.findall(r"[A-Za-z_][\w.]*", group))
    return found


def expected_warnings(body: Iterable[str]) -> set[str]:
    """Warning categories a test's body expects to be emitted: the `*Warning` names its code writes,
    and the deprecation categories where it calls `deprecated_call()`; none when it expects no warning."""
    code = [strip_strings_and_comments(line) for line in body]
    if not any(_EXPECTS_WARNING.search(line) for line in code):
        return set()
    found = {name for line in code for name in _WARNING_NAME.findall(line)}
    if any("deprecated_call" in line for line in code):
        found |= DEPRECATION_WARNINGS
    return found


def rewritten_raises(changes: Iterable[FileChange], base: BaseTree) -> frozenset[str]:
    """Names of exceptions whose product `raise` statement, and warning categories whose product
    `warnings.warn(...)`, or an `if`/`elif` condition it sits under in its function, a removed line of
    the change held: where or when the product raises or emits them changed. Read from the base's
    syntax tree, so a rewritten condition counts once (its old line is removed). A custom
    `*DeprecationWarning` also counts as `DeprecationWarning` (it is read by name, not by its bases)."""
    rewritten: set[str] = set()
    for change in changes:
        if not is_code_path(change.path) or language_of(change.path) != "python" or change.status == "added":
            continue
        gone = {ln.old_line for h in change.hunks for ln in h.lines if ln.kind == "del" and ln.old_line is not None}
        text = base.text(change.old_path) if gone else None
        if text is None:
            continue
        # the project's parser: any Python version, and safe in the reviewers' threads (gh-106905)
        tree = parse_module(text, filename=change.old_path)
        if tree is not None:  # a base we cannot read makes no claim
            rewritten |= _raises_touching(tree, gone, guards=())
    return frozenset(rewritten)


def _raises_touching(node: ast.AST, gone: set[int], *, guards: tuple[ast.expr, ...]) -> set[str]:
    """Exception names of the raises at or under `node` whose statement or enclosing conditions
    (`guards`: the tests of the `if`/`elif` branches it sits in, within its function) hold a line of `gone`."""
    spans: tuple[ast.stmt | ast.expr, ...] = (node, *guards) if isinstance(node, ast.stmt) else ()
    if isinstance(node, ast.Raise):
        name = _raised_name(node.exc)
        touched = any(gone.intersection(range(s.lineno, (s.end_lineno or s.lineno) + 1)) for s in spans)
        return {name} if name and touched else set()
    if isinstance(node, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Return):
        warned = _warned_categories(node)
        touched = any(gone.intersection(range(s.lineno, (s.end_lineno or s.lineno) + 1)) for s in spans)
        return warned if touched else set()
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        guards = ()  # a caller's conditions are not this function's
    found: set[str] = set()
    inner = (*guards, node.test) if isinstance(node, ast.If) else guards
    for child in ast.iter_child_nodes(node):
        # statements only: no raise sits in an expression, and statement nesting is bounded by the parser
        # (an elif is an `if` in its parent's orelse, so the branches above it guard it too)
        if not isinstance(child, ast.expr | ast.expr_context | ast.operator):
            found |= _raises_touching(child, gone, guards=inner)
    return found


def _warned_categories(statement: ast.stmt) -> set[str]:
    """Warning categories a simple statement emits: calls named `*warn*` (`warnings.warn`, a project's
    `_warn_for_function`) given a `*Warning` class or instance, positionally or as `category=`;
    `warnings.warn("text")` alone is a UserWarning."""
    found: set[str] = set()
    for call in ast.walk(statement):
        if not isinstance(call, ast.Call) or "warn" not in (_raised_name(call.func) or "").lower():
            continue
        given = [*call.args, *(k.value for k in call.keywords if k.arg == "category")]
        names = {n for n in map(_raised_name, given) if n and n.endswith("Warning")}
        plain = isinstance(call.func, ast.Name) or (
            isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "warnings"
        )
        if not names and plain and _raised_name(call.func) == "warn" and len(call.args) == 1:
            names = {"UserWarning"} if not any(k.arg == "category" for k in call.keywords) else set()
        found |= names
    return found | ({"DeprecationWarning"} if any(n.endswith("DeprecationWarning") for n in found) else set())


def _raised_name(exc: ast.expr | None) -> str | None:
    """`X` of `raise X`, `raise X(...)`, `raise mod.X(...)`; None for a bare `raise`."""
    target = exc.func if isinstance(exc, ast.Call) else exc
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    return None


def _product_aliases(workspace: Workspace, name: str) -> set[str]:
    """Names product code assigns from `name` or `name` from (`FileLock = SoftFileLock`, also under a
    platform condition): the same object under another name, for a test calling it."""
    aliases: set[str] = set()
    patterns = (rf"^\s*{re.escape(name)}\s*(:[^=]*)?=\s*\w+\s*$", rf"^\s*\w+\s*(:[^=]*)?=\s*{re.escape(name)}\s*$")
    for pattern in patterns:
        for hit in workspace.search(pattern, max_hits=20):
            match = _ALIAS.match(hit.text)
            if match and not is_test_path(hit.path):
                aliases |= {match.group("target"), match.group("value")} - {name}
    return aliases


def _renamed_to(replacements: list[Replacement], subjects: list[str], workspace: Workspace) -> Replacement | None:
    """The replacement that calls every subject, by name or through a product alias."""
    for replacement in replacements:
        if all(n in replacement.called or _product_aliases(workspace, n) & replacement.called for n in subjects):
            return replacement
    return None


def test_change_issues(
    file: ChangedFile,
    workspace: Workspace,
    *,
    defined_elsewhere: frozenset[str] = frozenset(),
    taken_out: frozenset[str] = frozenset(),
    raises_rewritten: frozenset[str] = frozenset(),
) -> list[Issue]:
    """Deleted tests whose subject still exists at head, and tests that lost assertions.
    `defined_elsewhere`: test names the change's other files define anew (a moved test is not deleted);
    `taken_out`: `removed_vocabulary` of the change (a test of removed behaviour goes with it);
    `raises_rewritten`: `rewritten_raises` of the change (a test of an exception raised differently now)."""
    issues: list[Issue] = []
    removed = removed_tests(file, defined_elsewhere=defined_elsewhere)
    folded = folded_tests(file) if removed else frozenset()
    in_place = replacements_in_place(file) if removed else {}
    for test in removed:
        if test.anchor is None or test.name in folded:
            continue  # folded: a test the change added or rewrote runs it over a fixture or a parametrization
        if taken_out & {m for t in test.body for m in code_identifiers(t)}:
            continue  # what it expected left the product in this change
        if (expected_exceptions(test.body) | expected_warnings(test.body)) & raises_rewritten:
            continue  # the exception or warning it expected is raised elsewhere or under other conditions now
        local = {m for t in test.body for m in _LOCAL_DEFINITION.findall(t)}
        called = [
            n
            for n in dict.fromkeys(m for t in test.body for m in _CALLED.findall(t))
            if n not in _NOT_A_SUBJECT and n not in local
        ]
        try:
            alive = [n for n in called if _product_defines(workspace, n, outside=file.path)][:MAX_SUBJECTS]
        except InputError:
            continue  # the head tree could not be searched: no claim we cannot check
        if not alive:
            continue  # its subject went with it, or we cannot tell what it tested
        if set(alive) <= test.written_in_place:
            continue  # rewritten in place: the lines that replaced it call the same code
        try:
            if _renamed_to(in_place.get(test.name, []), alive, workspace) is not None:
                continue  # renamed in place: the same set-up at its place, calling the same subjects
        except InputError:
            continue
        subjects = ", ".join(f"`{n}`" for n in alive)
        issues.append(
            Issue(
                test.anchor,
                "tests:test-deleted",
                "medium",
                f"Test {test.name} deleted while {alive[0]} still exists",
                f"This change deletes `{test.name}`, which exercised {subjects}; that code is still in the repository, "
                "so its behaviour is no longer checked. Keep the test, or say why it no longer applies.",
                kind="tests-weakened",
                confidence="medium",
            )  # fmt: skip
        )
    for name, line, lost, gained in weakened_tests(file, taken_out):
        issues.append(
            Issue(
                line,
                "tests:test-weakened",
                "low",
                f"Test {name} lost assertions",
                f"`{name}` had {lost} assertion line(s) removed and {gained} added in this change: it now checks "
                "less than before. If the behaviour changed, assert the new behaviour instead.",
                kind="tests-weakened",
                confidence="low",
            )  # fmt: skip
        )
    return issues
