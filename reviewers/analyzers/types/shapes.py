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
  mypy takes its `__init__` from the next base it knows, whose parameters are not the class's; or to a
  class a decorator or a metaclass builds (`@attrs.define`: the plugin that knows it needs attrs
  installed where mypy runs);
- an attribute of anything but a module or a builtin type (`str`, `dict`, ...): in code without
  annotations mypy does not see the attributes a mixin's host class, `self.__dict__.update(kwargs)` or
  an `__init__` after a class-level `x = None` provide (youtube-dl's history: 24 of 26 such findings
  wrong); and a module's or builtin's attribute in compatibility code (`except AttributeError:  # Py <
  3.3`, a `try` catching ImportError), written for another Python than the stubs describe;
- a name bound in a loop over a literal that is not empty (`for k in ("a", "b"): x = ...`).
"""

from __future__ import annotations

import ast
import builtins
import re

from reviewers.analyzers.types.classes import CheckerError

Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.Module
_UNBOUND = re.compile(r'^Name "(\w+)" may be undefined')
# receivers whose attributes the standard library's stubs know whole; a project's own class may get
# attributes its text does not show (a mixin's host, `self.__dict__.update(kwargs)`, a class-level
# `params = None` set in `__init__`), which mypy cannot see in code without annotations
_BUILTIN_RECEIVER = re.compile(
    r'^"(str|bytes|bytearray|int|float|complex|bool|list|dict|tuple|set|frozenset)(\[.*\])?" has no attribute'
)
_COMPAT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "NameError", "TypeError"})
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
    for node in ast.walk(tree):  # a loop over a literal that is not empty runs: what its body binds is bound
        if not isinstance(node, ast.For) or not isinstance(node.iter, ast.Tuple | ast.List) or not node.iter.elts:
            continue
        if any(_binds(s, name) for s in node.body):
            return True
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


def _in_compat_block(error: CheckerError, tree: ast.Module) -> bool:
    """Whether the line is in an `except` handler, or in a `try` whose handlers catch what a missing
    name raises: code for another Python or another version of a library (`except AttributeError:
    # Py < 3.3`), which the standard library's stubs for this one do not describe."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try | ast.TryStar):
            continue
        for handler in node.handlers:
            if handler.lineno <= error.line <= (handler.end_lineno or handler.lineno):
                return True
        types = [h.type for h in node.handlers if h.type is not None]
        caught = {n.id for t in types for n in ast.walk(t) if isinstance(n, ast.Name)}
        bare = any(h.type is None for h in node.handlers)
        body_end = node.body[-1].end_lineno or node.body[-1].lineno
        if node.lineno <= error.line <= body_end and (bare or caught & _COMPAT_ERRORS):
            return True
    return False


def _attribute_not_certain(error: CheckerError, tree: ast.Module) -> bool:
    if error.message.startswith("Module ") or _BUILTIN_RECEIVER.search(error.message):
        return _in_compat_block(error, tree)
    return True  # an attribute of the project's own classes, or of None: see `_BUILTIN_RECEIVER`


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

    def built_its_own_way(c: ast.ClassDef) -> bool:  # `@attrs.define`, a metaclass: not the text's `__init__`
        decorators = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in c.decorator_list]
        return bool(c.keywords) or any(d not in ("dataclass", "dataclasses.dataclass") for d in decorators)

    return any(built_its_own_way(c) or not all(known(b) for b in c.bases) for c in classes[found.group(1)])


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
    if rule == "types:unknown-attribute":
        return _attribute_not_certain(error, tree)
    if rule in ("types:call-arity", "types:unknown-keyword"):
        classes = cache.setdefault("classes", _classes(texts))
        assert isinstance(classes, dict)
        return _unknown_base(error, classes)
    return False
