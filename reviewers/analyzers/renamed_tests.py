"""Deleted tests rewritten in place under a new name: the same place, the same set-up, the same subject.

A change that rewrites `test_context_group_reports_both_failures` as
`test_context_group_detaches_release_context` deletes one name and adds another; nothing was lost.
This module finds, for each test the change deleted from a Python file, the tests it added at the
deleted one's place: between the same surviving neighbours (the nearest tests before and after it
that exist at the base and at head), as a diff that replaces the old lines with the new shows it.
Such a candidate is the same test renamed when it has the deleted test's set-up:

- the same `@pytest.mark.parametrize` ids (`ids=[...]`, `pytest.param(..., id=...)`, or the scalar
  values pytest names the cases by; a module constant holding the values is read), or
- the same parameters (fixtures), at least one;

and the caller (`test_changes`) then requires it to call the deleted test's subjects, each by name or
through an alias the product assigns (`FileLock = SoftFileLock`).

Not caught: a rename that also moved the test elsewhere in the file, or changed both its
parametrization and its fixtures; a subject reached through a subclass rather than an alias.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from reviewers.analyzers.base_tree import reverse_patch
from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.parsing import parse_module

TestFunction = ast.FunctionDef | ast.AsyncFunctionDef
_SCALAR = (str, int, float, bool)


@dataclass(frozen=True, slots=True)
class Replacement:
    """A test the change added at a deleted test's place, with the same set-up."""

    name: str
    called: frozenset[str]  # names it calls (`Lock(...)`, `lock.acquire(...)` gives `Lock`, `acquire`)


def _ordered_tests(tree: ast.Module) -> list[TestFunction]:
    tests = [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
    ]
    return sorted(tests, key=lambda n: n.lineno)


def _module_values(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level `NAME = value` and `NAME: T = value`: what a parametrize over a constant reads."""
    values: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = node.value
    return values


def _case_id(case: ast.expr) -> str | None:
    """The id pytest gives one parametrize case: `pytest.param(..., id="x")`'s, or a scalar's value."""
    if isinstance(case, ast.Call):
        given = next((k.value for k in case.keywords if k.arg == "id"), None)
        return given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else None
    if isinstance(case, ast.Constant) and isinstance(case.value, _SCALAR):
        return str(case.value)
    return None


def parametrize_ids(function: TestFunction, constants: dict[str, ast.expr]) -> frozenset[frozenset[str]] | None:
    """The case ids of each `@...parametrize(...)` decorator; None when any cannot be read."""
    found: set[frozenset[str]] = set()
    for decorator in function.decorator_list:
        if not (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "parametrize"
            and len(decorator.args) >= 2
        ):
            continue
        cases = decorator.args[1]
        if isinstance(cases, ast.Name):
            cases = constants.get(cases.id, cases)
        explicit = next((k.value for k in decorator.keywords if k.arg == "ids"), None)
        if isinstance(explicit, ast.List | ast.Tuple):
            ids = [_case_id(e) if isinstance(e, ast.Constant) else None for e in explicit.elts]
        elif isinstance(cases, ast.List | ast.Tuple) and explicit is None:
            ids = [_case_id(e) for e in cases.elts]
        else:
            return None
        if not ids or any(i is None for i in ids):
            return None
        found.add(frozenset(i for i in ids if i is not None))
    return frozenset(found)


def _parameters(function: TestFunction) -> frozenset[str]:
    a = function.args
    return frozenset(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls"))


def _same_setup(
    deleted: TestFunction, added: TestFunction, base_values: dict[str, ast.expr], head_values: dict[str, ast.expr]
) -> bool:
    ids = parametrize_ids(deleted, base_values)
    if ids and ids == parametrize_ids(added, head_values):
        return True
    return bool(_parameters(deleted)) and _parameters(deleted) == _parameters(added)


def _called(function: TestFunction) -> frozenset[str]:
    names: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                names.add(node.func.id)
            elif isinstance(node.func, ast.Attribute):
                names.add(node.func.attr)
    return frozenset(names)


def replacements_in_place(file: ChangedFile) -> dict[str, list[Replacement]]:
    """Deleted test name → the tests this change added at its place with the same set-up."""
    if file.language != "python" or file.python_tree is None:
        return {}
    base_text = reverse_patch(file.text, file.change)
    base_tree = parse_module(base_text, filename=file.path) if base_text is not None else None
    if base_tree is None:
        return {}
    base, head = _ordered_tests(base_tree), _ordered_tests(file.python_tree)
    base_names, head_names = {t.name for t in base}, {t.name for t in head}
    head_line = {t.name: t.lineno for t in head}
    base_values, head_values = _module_values(base_tree), _module_values(file.python_tree)
    out: dict[str, list[Replacement]] = {}
    for i, deleted in enumerate(base):
        if deleted.name in head_names:
            continue
        before = next((t.name for t in reversed(base[:i]) if t.name in head_names), None)
        after = next((t.name for t in base[i + 1 :] if t.name in head_names), None)
        low = head_line[before] if before is not None else 0
        high = head_line[after] if after is not None else len(file.lines) + 1
        found = [
            Replacement(t.name, _called(t))
            for t in head
            if t.name not in base_names and low < t.lineno < high and _same_setup(deleted, t, base_values, head_values)
        ]
        if found:
            out[deleted.name] = found
    return out
