"""Deleted tests folded into a neighbour: the same body, now run over a fixture or a parametrization.

A change that merges `test_cimultidict_insert` into `test_multidict_insert` deletes the first test
and gives the second a parameter (`any_multidict_class`, a fixture over both classes, or a
`@pytest.mark.parametrize` argument) that stands for what the deleted test wrote out
(`CIMultiDict`). Nothing was lost: the surviving test runs the deleted variant. This module finds
those, in Python, by comparing syntax trees of the file at the base (rebuilt from head and the diff)
and at head: a deleted test went with the change when a test of the same file that the change added
or rewrote has the same statements, where

- a parameter the rewritten test gained stands for one expression of the deleted test (the same one
  everywhere it appears),
- names local to each test may differ, one for one (`for j in ...` → `for _ in ...`),
- `x: T = v` reads as `x = v` (the annotation names the class the parameter replaced), and docstrings
  and decorators are not compared;

or where the rewritten test gained a `@pytest.mark.parametrize` over the variants the two names spell
out: `test_cached_includes` deleted while `test_cached_extends` now runs over `["extends", "include"]`
(one value names the survivor's variant, another the deleted one's, after the names' common prefix).

Not caught: a fold that also rewrote other statements under a fixture (the bodies must match), a
parametrization whose values do not spell the variants the test names carry, a test folded into one
in another file.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field

from reviewers.analyzers.base_tree import reverse_patch
from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.parsing import parse_module

TestFunction = ast.FunctionDef | ast.AsyncFunctionDef
MAX_FOLD_PAIRS = 2500  # deleted × rewritten tests compared in one file (each stops at its first difference)


def _tests(tree: ast.Module) -> dict[str, TestFunction]:
    return {
        n.name: n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
    }


def _parameters(function: TestFunction) -> set[str]:
    a = function.args
    named = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)]
    return {p.arg for p in named}


def _statements(function: TestFunction) -> list[ast.stmt]:
    """The body without its docstring, each `x: T = v` read as `x = v`."""
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return [_plain(s) for s in body]


def _plain(statement: ast.stmt) -> ast.stmt:
    if isinstance(statement, ast.AnnAssign) and statement.value is not None:
        return ast.Assign(targets=[statement.target], value=statement.value, lineno=statement.lineno)
    return statement


def _locals(function: TestFunction) -> set[str]:
    """Names the test binds itself: assigned, loop and `with` targets, nested definitions."""
    bound: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node is not function:
            bound.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


@dataclass
class _Correspondence:
    """How the deleted test's names and expressions read in the rewritten one, built while comparing."""

    gained: set[str]  # parameters the rewritten test has and the deleted one had not
    old_locals: set[str]
    new_locals: set[str]
    stands_for: dict[str, str] = field(default_factory=dict)  # gained parameter → the expression it replaced
    renamed: dict[str, str] = field(default_factory=dict)
    renamed_back: dict[str, str] = field(default_factory=dict)

    def rename(self, old: str, new: str) -> bool:
        if self.renamed.get(old, new) != new or self.renamed_back.get(new, old) != old:
            return False
        if old != new and (old not in self.old_locals or new not in self.new_locals):
            return False
        self.renamed[old], self.renamed_back[new] = new, old
        return True


def _same(old: object, new: object, c: _Correspondence) -> bool:
    if isinstance(new, ast.Name) and new.id in c.gained and isinstance(old, ast.expr):
        spelled = ast.dump(old)
        return c.stands_for.setdefault(new.id, spelled) == spelled
    if isinstance(old, list):
        return (
            isinstance(new, list)
            and len(old) == len(new)
            and all(_same(a, b, c) for a, b in zip(old, new, strict=True))
        )
    if not isinstance(old, ast.AST):
        return old == new
    if type(old) is not type(new):
        return False
    if isinstance(old, ast.Name) and isinstance(new, ast.Name):
        return c.rename(old.id, new.id)
    old, new = (_plain(old), _plain(new)) if isinstance(old, ast.stmt) and isinstance(new, ast.stmt) else (old, new)
    return all(
        _same(getattr(old, f, None), getattr(new, f, None), c) for f in old._fields if f not in ("ctx", "type_comment")
    )


def folded_into(deleted: TestFunction, rewritten: TestFunction) -> bool:
    """Whether `rewritten` runs what `deleted` ran, over a parameter it gained (see the module's doc)."""
    gained = _parameters(rewritten) - _parameters(deleted)
    if not gained:
        return False  # without a new parameter the rewritten test cannot cover another variant
    old, new = _statements(deleted), _statements(rewritten)
    if not old:
        return False
    c = _Correspondence(gained, _locals(deleted), _locals(rewritten))
    return _same(old, new, c) and bool(c.stands_for)


MIN_VARIANT_CHARS = 3  # a parametrize value shorter than this ("a", "x") names no variant


def _parametrized_values(function: TestFunction) -> set[str]:
    """The string values of the function's `@pytest.mark.parametrize(...)` decorators, lower-cased."""
    values: set[str] = set()
    for decorator in function.decorator_list:
        if not isinstance(decorator, ast.Call) or len(decorator.args) < 2:
            continue
        func = decorator.func
        if not (isinstance(func, ast.Attribute) and func.attr == "parametrize"):
            continue
        for node in ast.walk(decorator.args[1]):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= MIN_VARIANT_CHARS:
                values.add(node.value.lower())
    return values


def parametrized_over_variants(deleted: TestFunction, rewritten: TestFunction) -> bool:
    """Whether `rewritten` gained a parametrization whose values name both its own variant and the
    deleted test's: what follows the names' common prefix of whole words (`extends` and `includes`
    after `test_cached_`) contains a value each, two different values."""
    if not _parameters(rewritten) - _parameters(deleted):
        return False
    values = _parametrized_values(rewritten)
    prefix = os.path.commonprefix([deleted.name, rewritten.name])
    common = prefix.rfind("_") + 1  # whole words: `test_insert_` of `test_insert_cs` and `test_insert_ci`
    own, gone = rewritten.name[common:].lower(), deleted.name[common:].lower()
    if not own or not gone:
        return False
    naming_own = {v for v in values if v in own}
    naming_gone = {v for v in values if v in gone}
    return any(a != b for a in naming_own for b in naming_gone)


def folded_tests(file: ChangedFile) -> frozenset[str]:
    """Names of the tests this change deleted from `file` that a test it added or rewrote in the same
    file now covers through a fixture or a parametrization."""
    if file.language != "python" or file.python_tree is None:
        return frozenset()
    base_text = reverse_patch(file.text, file.change)
    base_tree = parse_module(base_text, filename=file.path) if base_text is not None else None
    if base_tree is None:
        return frozenset()
    head = _tests(file.python_tree)
    deleted = [t for name, t in _tests(base_tree).items() if name not in head]
    rewritten = [t for t in head.values() if file.touches(t.lineno, t.end_lineno or t.lineno)]
    if not deleted or not rewritten or len(deleted) * len(rewritten) > MAX_FOLD_PAIRS:
        return frozenset()
    return frozenset(
        d.name for d in deleted if any(folded_into(d, r) or parametrized_over_variants(d, r) for r in rewritten)
    )
