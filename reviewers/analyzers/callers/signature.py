"""A Python function's parameters as a call binds them, and whether a call's arguments fit.

Only what the text says for certain: a call that spreads `*args` or `**kwargs` fits anything
(`None` from `bind_error`, never a claim), and so does a signature the caller cannot see whole.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    positional_only: tuple[str, ...]
    positional: tuple[str, ...]  # positional-or-keyword, in order
    keyword_only: tuple[str, ...]
    required: frozenset[str]  # names without a default
    star_args: bool
    star_kwargs: bool

    def describe(self) -> str:
        parts = [*self.positional_only, *(["/"] if self.positional_only else []), *self.positional]
        if self.star_args:
            parts.append("*args")
        elif self.keyword_only:
            parts.append("*")
        parts += self.keyword_only
        if self.star_kwargs:
            parts.append("**kwargs")
        return f"({', '.join(parts)})"


def signature_of(fn: ast.FunctionDef | ast.AsyncFunctionDef, *, drop_first: bool = False) -> Signature:
    """The parameters of a `def`; `drop_first` for a class's `__init__` (its `self`)."""
    args = fn.args
    positional_only = [a.arg for a in args.posonlyargs]
    positional = [a.arg for a in args.args]
    ordered = positional_only + positional
    with_default = set(ordered[len(ordered) - len(args.defaults) :]) if args.defaults else set()
    required = {n for n in ordered if n not in with_default}
    required |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None}
    if drop_first:
        if positional_only:
            required.discard(positional_only[0])
            positional_only = positional_only[1:]
        elif positional:
            required.discard(positional[0])
            positional = positional[1:]
    return Signature(
        tuple(positional_only),
        tuple(positional),
        tuple(a.arg for a in args.kwonlyargs),
        frozenset(required),
        args.vararg is not None,
        args.kwarg is not None,
    )


def spreads(call: ast.Call) -> bool:
    """Whether the call passes `*args` or `**kwargs`: then what it binds is not in the text."""
    return any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)


def bind_error(signature: Signature, call: ast.Call) -> str | None:
    """Why the call cannot bind to the signature (Python's TypeError, in words), or None when it can
    or the call spreads its arguments."""
    if spreads(call):
        return None
    slots = [*signature.positional_only, *signature.positional]
    given = len(call.args)
    if given > len(slots) and not signature.star_args:
        return f"it passes {given} positional arguments where the function takes at most {len(slots)}"
    filled = set(slots[:given])
    for keyword in call.keywords:
        name = keyword.arg
        assert name is not None  # spreads() answered for `**`
        if name in signature.positional or name in signature.keyword_only:
            if name in filled:
                return f"it passes `{name}` twice, by position and by keyword"
            filled.add(name)
        elif not signature.star_kwargs:
            return f"it passes the keyword `{name}`, which the function no longer takes"
    missing = sorted(signature.required - filled, key=lambda n: [*slots, *signature.keyword_only].index(n))
    if missing:
        return f"it does not pass the required `{missing[0]}`"
    return None
