"""Checks known by their shape, not their name: an early exit (`raise`, `abort`, `return`,
`continue`) decided by what a value *contains*.

`if not os.path.abspath(member).startswith(os.getcwd()): continue`, `if "*" in serial: raise`,
`if not valid_file_type(name): raise StorageError(...)`: whatever the check's family, the function
leaves unless the value passed it, so the check stands in front of every call that later consumes
that value. When a change deletes such a check and keeps the call, that deletion is the evidence
(issue 39), even where no rule knows what the check proves.

Only a check of the value's content counts: a comparison with something other than None, an empty
literal or a boolean, a test the value runs on itself (`x.startswith(...)`, `pattern.match(x)`), or
a function named as a predicate given it (`is_safe(x)`, `valid_file_type(x)`); another call given
the value does something with it, and its result says how that went (`self.update_git(url)`). A check of
presence or type (`x is None`, `not x`, `isinstance`, `hasattr`, `os.path.exists`) decides nothing
about what the value can reach, and a bound on its size (`len(x) > N`) is a size limit
(`protections._limits`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

# Calls whose result says what a value is, or whether it exists, not what it contains.
_PRESENCE_CALLS = frozenset({"isinstance", "issubclass", "hasattr", "callable", "len", "bool", "type", "id",
                             "exists", "isfile", "isdir", "lexists", "getattr", "get", "iscoroutinefunction",
                             "isclass", "isfunction", "ismethod", "is_dir", "is_file", "any", "all"})  # fmt: skip
# A call decides about a value when it is named as a predicate (`is_safe(x)`, `valid_file_type(x)`)
# or is the value's own test (`x.startswith(...)`); any other call given the value does something
# with it (`self.update(x)`), and its result says how that went, not what the value is.
_PREDICATE_WORDS = ("is_", "has_", "can_", "valid", "allow", "safe", "check", "match", "verify", "permit",
                    "contains", "startswith", "endswith", "fullmatch", "search", "isalnum", "isdigit",
                    "isidentifier", "isascii", "is_relative_to")  # fmt: skip
_VALUE_METHODS = frozenset({"startswith", "endswith", "isalnum", "isdigit", "isidentifier", "isascii",
                            "isdecimal", "isnumeric", "isalpha", "is_relative_to", "match", "fullmatch",
                            "search", "issubset", "issuperset"})  # fmt: skip
_EMPTY = (None, "", b"", 0, True, False)
# names that are the object itself, not a value given to it
_RECEIVERS = frozenset({"self", "cls"})


def _is_empty_literal(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Constant):
        return any(expr.value is e or (type(expr.value) is type(e) and expr.value == e) for e in _EMPTY)
    if isinstance(expr, ast.List | ast.Tuple | ast.Set | ast.Dict):
        return not (expr.elts if not isinstance(expr, ast.Dict) else expr.keys)
    return False


def _callee_short(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _read(expr: ast.AST) -> set[str]:
    """The local names an expression reads (calls' callees left out: `os` in `os.path.x(a)`)."""
    out: set[str] = set()
    stack: list[ast.AST] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.Name):
            out.add(node.id)
            continue
        if isinstance(node, ast.Attribute):
            continue  # `request.POST`, `channel.project_id`: a part of an object, not the value it passes on
        if isinstance(node, ast.Call):
            func = node.func
            # a method's receiver is read (`name.startswith(...)`); a module path (`os.path`) is not
            if isinstance(func, ast.Attribute) and not isinstance(func.value, ast.Attribute):
                stack.append(func.value)
            stack.extend(node.args)
            stack.extend(k.value for k in node.keywords)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return out


def content_checked(test: ast.expr, is_local: Callable[[str], bool], holds: bool | None = None) -> frozenset[str]:
    """The local names whose content the condition inspects (see the module's docstring); with
    `holds`, only those it constrains where it is true (or false): past `if a(x) and b(y): return`
    the code knows neither, past `if a(x) or b(y): return` it knows both."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return content_checked(test.operand, is_local, None if holds is None else not holds)
    if isinstance(test, ast.BoolOp):
        if holds is not None and isinstance(test.op, ast.And) != holds and len(test.values) > 1:
            return frozenset()
        return frozenset().union(*(content_checked(v, is_local, holds) for v in test.values))
    found: set[str] = set()
    if isinstance(test, ast.Compare):
        sides = [test.left, *test.comparators]
        if any(isinstance(op, ast.Is | ast.IsNot) for op in test.ops):
            return frozenset()
        if any(_is_empty_literal(s) for s in sides):
            return frozenset()
        for side in sides:
            if isinstance(side, ast.Call) and _callee_short(side) == "len":
                continue  # `len(x) > N` is a size limit, `len(x) == 0` a presence check
            found |= _read(side)
    elif isinstance(test, ast.Call):
        short = _callee_short(test)
        if short in _PRESENCE_CALLS:
            return frozenset()
        func = test.func
        if short.lower().startswith(_PREDICATE_WORDS):  # `is_safe(name)`, `self.allowed(name)`
            for arg in [*test.args, *(k.value for k in test.keywords)]:
                found |= _read(arg)
        if isinstance(func, ast.Attribute) and short in _VALUE_METHODS:
            found |= _read(func.value)  # `os.path.abspath(name).startswith(...)`: the value's own test
    return frozenset(n for n in found if n not in _RECEIVERS and is_local(n))


# What a value can go through and still be that value, cleaned or taken apart: the result of
# anything else (`requests.get(url)`, `db.load(key)`) is what an operation returned, and a check of
# it says how the operation went, not what its argument was.
_PURE_CALLS = frozenset({"unquote", "unquote_plus", "normpath", "abspath", "realpath", "join", "split", "rsplit",
                         "splitlines", "strip", "lstrip", "rstrip", "lower", "upper", "casefold", "basename",
                         "dirname", "str", "resolve", "Path", "PurePath", "PurePosixPath", "splitext", "replace",
                         "encode", "decode", "urlparse", "urlsplit", "partition", "rpartition",
                         "expanduser"})  # fmt: skip


def _pure(expr: ast.expr) -> bool:
    return all(_callee_short(n) in _PURE_CALLS for n in ast.walk(expr) if isinstance(n, ast.Call))


# A helper read for its checks is short: a longer function does more than check its argument.
MAX_CHECKER_LINES = 30


def checked_parameters(func: ast.FunctionDef | ast.AsyncFunctionDef, *, any_exit: bool = False) -> frozenset[str]:
    """The parameters whose content decides whether a function raises: `def ensure_inside(base, path):
    if not realpath(path).startswith(base): raise PermissionError` checks `path` and `base`. A check
    moved into such a helper, called before the sink on the value, still stands in front of it.
    `any_exit`: a `return` counts too, at any length (a sink helper that refuses what it is given)."""
    if not any_exit and (func.end_lineno or func.lineno) - func.lineno > MAX_CHECKER_LINES:
        return frozenset()
    params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]} - _RECEIVERS
    # each name the body computes from parameters by pure steps, with the parameters it comes from
    derived: dict[str, frozenset[str]] = {p: frozenset({p}) for p in params}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.For):
            source = node.iter if isinstance(node, ast.For) else node.value
            if source is None or not _pure(source):
                continue
            origins = frozenset().union(*(derived[n] for n in _read(source) if n in derived))
            if origins:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for name in (n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)):
                    derived[name] = derived.get(name, frozenset()) | origins
    out: set[str] = set()
    exits = (ast.Raise, ast.Return) if any_exit else (ast.Raise,)
    for node in ast.walk(func):
        if not isinstance(node, ast.If):
            continue
        for branch, holds in ((node.body, False), (node.orelse, True)):  # past a raising body, the test failed
            if any(isinstance(s, exits) for s in branch):
                for name in content_checked(node.test, lambda n: n in derived, holds):
                    out |= derived[name]
    return frozenset(out)


def argument_names(
    call: ast.Call, func: ast.FunctionDef | ast.AsyncFunctionDef, wanted: frozenset[str]
) -> list[ast.expr]:
    """The arguments of a call that fill the `wanted` parameters of the function it calls."""
    positional = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
    if positional and positional[0] in _RECEIVERS and isinstance(call.func, ast.Attribute):
        positional = positional[1:]
    out = [arg for name, arg in zip(positional, call.args, strict=False) if name in wanted]
    out += [k.value for k in call.keywords if k.arg in wanted]
    return out
