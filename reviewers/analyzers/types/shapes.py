"""Shapes where mypy's error is mypy's, not the program's: checked on the changed code's own text
before an error is reported (each seen on released code that runs, `bench.large_mr`'s starlette).

- calling what may be `None` where the function tests that very expression (`if self.handler is
  not None`, `callable(cb)`, `cb and cb()`): mypy does not carry the test through an attribute
  that a call in between may change, or through a helper that tests it (`is_async_callable`);
- a name that may be unbound, used inside an `if` or `while` that does not bind it itself: the
  condition is usually what makes the binding certain (`if partial is not None: ... partial_scope`),
  which mypy cannot relate (black's history: `if Preview.x in mode:` twice); or used in an `except`
  handler of a `try` whose body binds it: which statement raised, mypy cannot tell (beets' history:
  `response` bound by `requests.get`, the handler catching what `response.json()` raises);
- a call to a class with a base the check does not know (a third-party class, a module not read):
  mypy takes its `__init__` from the next base it knows, whose parameters are not the class's.
"""

from __future__ import annotations

import ast
import builtins
import re

from reviewers.analyzers.types.classes import CheckerError

Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.Module
_UNBOUND = re.compile(r'^Name "(\w+)" may be undefined')
_CALLEE = re.compile(r'for "(\w+)"')


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _scope_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    while id(node) in parents and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        node = parents[id(node)]
    return node


def _tested(scope: ast.AST, text: str) -> bool:
    """Whether `text` (an expression's source) is part of a condition anywhere in the scope."""
    for node in ast.walk(scope):
        tests: list[ast.AST] = []
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
            tests = [node.test]
        elif isinstance(node, ast.BoolOp):
            tests = list(node.values[:-1])
        if any(ast.unparse(sub) == text for test in tests for sub in ast.walk(test)):
            return True
    return False


def _none_call_tested(error: CheckerError, tree: ast.Module, parents: dict[int, ast.AST]) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.func.lineno == error.line and node.func.col_offset == error.column:
            return _tested(_scope_of(node, parents), ast.unparse(node.func))
    return False


def _binds(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(node))


def _unbound_use_guarded(error: CheckerError, tree: ast.Module, parents: dict[int, ast.AST]) -> bool:
    found = _UNBOUND.search(error.message)
    if found is None:
        return False
    name = found.group(1)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and node.lineno == error.line:
            child: ast.AST = node
            up = parents.get(id(node))
            while up is not None and not isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
                if isinstance(up, ast.If | ast.While) and child is not up.test and not _binds(up, name):
                    return True
                if isinstance(up, ast.Try | ast.TryStar) and child in up.handlers:
                    if any(_binds(s, name) for s in up.body):
                        return True
                child, up = up, parents.get(id(up))
    return False


def _classes(texts: dict[str, str]) -> dict[str, list[ast.ClassDef]]:
    out: dict[str, list[ast.ClassDef]] = {}
    for text in texts.values():
        try:
            module = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(node)
    return out


def _unknown_base(error: CheckerError, classes: dict[str, list[ast.ClassDef]]) -> bool:
    found = _CALLEE.search(error.message)
    if found is None or found.group(1) not in classes:
        return False

    def known(base: ast.expr) -> bool:
        if isinstance(base, ast.Name) and base.id in classes:
            return all(known(b) for c in classes[base.id] for b in c.bases)
        return isinstance(base, ast.Name) and isinstance(getattr(builtins, base.id, None), type)

    return any(not known(base) for c in classes[found.group(1)] for base in c.bases)


def mypy_not_the_program(
    error: CheckerError, rule: str, tree: ast.Module, texts: dict[str, str], cache: dict[str, object]
) -> bool:
    """Whether the error is one of the shapes above. `tree` is the error's file at head, `texts` every
    text mypy read at head; `cache` keeps what is worked out once per review."""
    if rule == "types:none-call" or rule == "types:possibly-unbound":
        parents = cache.setdefault(f"parents:{error.path}", _parents(tree))
        assert isinstance(parents, dict)
        if rule == "types:none-call":
            return _none_call_tested(error, tree, parents)
        return _unbound_use_guarded(error, tree, parents)
    if rule in ("types:call-arity", "types:unknown-keyword"):
        classes = cache.setdefault("classes", _classes(texts))
        assert isinstance(classes, dict)
        return _unknown_base(error, classes)
    return False
