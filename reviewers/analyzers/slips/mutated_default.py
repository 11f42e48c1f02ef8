"""`slips:mutated-default`: a mutable default argument that the function changes.

`def add(item, into=[]): into.append(item)` keeps one list for every call that leaves `into` out,
so each call sees what the earlier ones added. ruff's B006 reports every mutable default, changed
or not (right in 3 of 40 findings judged on held-out history, 21 debatable: a default nobody
mutates is harmless); this rule reports only a default the body mutates:
`.append/.extend/.insert/.add/.update/.setdefault/.pop/.popitem/.remove/.discard/.clear/.sort/.reverse`,
an item assigned or deleted (`into[k] = v`, `del into[k]`) or an augmented assignment (`into += [...]`).

Not caught, on purpose: a parameter the body rebinds anywhere (`into = list(into)`, `if into is
None: into = []`: the order of rebinding and mutation is not followed), a command-line option's
default (typer, click: the framework passes a value on every call), a parameter named as a
cache (`_cache`, `memo`, `seen` with a leading underscore: sharing across calls is the point), a
default that is a call of anything but `list`/`dict`/`set`, and mutation through an alias
(`items = into; items.append(...)`) or through a function the parameter is handed to.
"""

from __future__ import annotations

import ast

from reviewers.analyzers.changed_file import Issue
from reviewers.analyzers.ruff import cli_framework_default

RULE = "slips:mutated-default"
MUTATORS = frozenset(
    {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "remove", "discard", "clear",
     "sort", "reverse"}
)  # fmt: skip
CACHE_WORDS = ("cache", "memo")


def _mutable(default: ast.expr) -> bool:
    if isinstance(default, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp | ast.SetComp):
        return True
    return (
        isinstance(default, ast.Call)
        and isinstance(default.func, ast.Name)
        and default.func.id in ("list", "dict", "set")
        and not default.keywords
    )


def _defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[ast.arg, ast.expr]]:
    positional = [*fn.args.posonlyargs, *fn.args.args]
    pairs = list(zip(positional[len(positional) - len(fn.args.defaults) :], fn.args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d is not None]
    return pairs


def _is(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _first_mutation(body: list[ast.stmt], name: str) -> ast.AST | None:
    """The first node of the body that mutates `name`, or None (also when the body rebinds it)."""
    found: ast.AST | None = None
    for stmt in body:
        augmented = {id(n.target) for n in ast.walk(stmt) if isinstance(n, ast.AugAssign)}
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
                if id(node) not in augmented:
                    return None  # rebound somewhere: too little is known of the order
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and any(
                a.arg == name for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            ):
                return None  # an inner function's own parameter of the same name
            hit = (
                (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in MUTATORS
                    and _is(node.func.value, name)
                )
                or (isinstance(node, ast.AugAssign) and _is(node.target, name))
                or (
                    isinstance(node, ast.Subscript)
                    and isinstance(node.ctx, ast.Store | ast.Del)
                    and _is(node.value, name)
                )
            )
            if hit and found is None:
                found = node
    return found


def mutated_default_issues(nodes: list[ast.AST], tree: ast.Module, lines: list[str]) -> list[Issue]:
    issues: list[Issue] = []
    for fn in nodes:
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for arg, default in _defaults(fn):
            name = arg.arg
            if not _mutable(default) or name.startswith("_") or any(w in name.lower() for w in CACHE_WORDS):
                continue
            if cli_framework_default(tree, default.lineno):
                continue  # typer and click pass the option's value on every call
            mutation = _first_mutation(fn.body, name)
            if mutation is None:
                continue
            where = getattr(mutation, "lineno", fn.lineno)
            issues.append(
                Issue(
                    default.lineno,
                    RULE,
                    "medium",
                    f"Mutable default `{name}` is changed by {fn.name}",
                    f"The default of `{name}` is built once, when `def {fn.name}` runs, and line {where} changes it: "
                    "every later call that leaves the argument out sees what earlier calls put there. Default to "
                    f"`None` and build a new one inside (`if {name} is None: {name} = ...`).",
                    kind="mutable-default",
                    confidence="high",
                )
            )
    return issues
