"""What a condition proves about the names it tests, in the branch where it holds or fails.

`if x in ALLOWED:` proves x is one of a fixed set (safe for every sink) where it holds; `if x not in
ALLOWED: return` proves the same after the `if`, because the other branch left. The interpreter
applies these facts to the branch they dominate, so a check after the sink, or in another branch,
proves nothing. Facts are sink classes to clear, plus markers that combine (a realpath'd path that
starts with the base; a redirect target that starts with "/" and not "//").

What this does not catch: checks done by a helper that raises (`validate(x)` on its own line)
unless its name says it checks (`ensure_safe_path(x)` is read as a guard only when it is an `if`'s
condition), and facts about one element of a container.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from reviewers.analyzers.flow.rules import ALL_CLASSES, GUARD_WORDS, REDIRECT_GUARDS
from reviewers.analyzers.flow.values import LOCAL_SLASH, NOT_DOUBLE_SLASH

PREFIX = "~prefix"  # the value starts with a base: a containment check once the path is normalised
Facts = dict[str, set[str]]
_TEXT_TRANSFORMS = frozenset({"lower", "upper", "strip", "casefold", "lstrip", "rstrip"})
_URL_PARTS = frozenset({"netloc", "hostname", "scheme", "host"})
_URL_PARSERS = frozenset(
    {"urlparse", "urlsplit", "urllib.parse.urlparse", "urllib.parse.urlsplit", "urlparse.urlparse"}
)
_VALIDATING_METHODS = frozenset({"isdigit", "isnumeric", "isdecimal", "isalnum", "isalpha", "isidentifier"})
_CLEAN_TYPES = frozenset({"int", "float", "bool", "UUID", "uuid.UUID", "Decimal"})
_URL_CLASSES = frozenset({"redirect", "ssrf"})


def _subject(expr: ast.expr, qualified: Callable[[ast.expr], str]) -> tuple[str, bool] | None:
    """(name, via a URL part) of the name a test is about: `x`, `x.lower()`, `urlparse(x).netloc`."""
    if isinstance(expr, ast.Name):
        return expr.id, False
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _TEXT_TRANSFORMS:
        return _subject(expr.func.value, qualified)
    if isinstance(expr, ast.Attribute) and expr.attr in _URL_PARTS and isinstance(expr.value, ast.Call):
        call = expr.value
        if qualified(call.func).rsplit(".", 1)[-1] in {p.rsplit(".", 1)[-1] for p in _URL_PARSERS} and call.args:
            inner = _subject(call.args[0], qualified)
            return (inner[0], True) if inner else None
    return None


def _add(facts: Facts, name: str, classes: set[str] | frozenset[str]) -> None:
    facts.setdefault(name, set()).update(classes)


def _merge_and(parts: list[Facts]) -> Facts:
    out: Facts = {}
    for part in parts:
        for name, classes in part.items():
            _add(out, name, classes)
    return out


def _merge_or(parts: list[Facts]) -> Facts:
    if not parts:
        return {}
    names = set(parts[0]).intersection(*parts[1:])
    return {n: set.intersection(*(p[n] for p in parts)) for n in names}


# A repository function's judgement by its body (`guard_removal.validators`): the classes it really
# protects (empty: known not to work), or None when its body says nothing and its name is trusted.
Validator = Callable[[ast.Call], frozenset[str] | None]


def facts(
    cond: ast.expr,
    positive: bool,
    *,
    is_const: Callable[[ast.expr], bool],
    qualified: Callable[[ast.expr], str],
    validator: Validator | None = None,
) -> Facts:
    """Name → sink classes (and markers) the condition clears where it is `positive`."""
    out = _facts(cond, positive, is_const, qualified, validator)
    for classes in out.values():
        if LOCAL_SLASH in classes and NOT_DOUBLE_SLASH in classes:
            classes.add("redirect")
    return out


def _facts(
    cond: ast.expr,
    positive: bool,
    is_const: Callable[[ast.expr], bool],
    qualified: Callable[[ast.expr], str],
    validator: Validator | None = None,
) -> Facts:
    if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Not):
        return _facts(cond.operand, not positive, is_const, qualified, validator)
    if isinstance(cond, ast.BoolOp):
        parts = [_facts(v, positive, is_const, qualified, validator) for v in cond.values]
        conjunction = isinstance(cond.op, ast.And) == positive
        return _merge_and(parts) if conjunction else _merge_or(parts)
    out: Facts = {}
    if isinstance(cond, ast.Compare) and len(cond.ops) == 1:
        _compare(cond, positive, is_const, qualified, out)
    elif isinstance(cond, ast.Call):
        judged = validator(cond) if validator is not None else None
        if judged is None:
            _call(cond, positive, qualified, out)
        elif positive:  # a repository validator protects what its body checks, whatever its name
            for arg in [*cond.args, *(k.value for k in cond.keywords)]:
                if (subject := _subject(arg, qualified)) is not None:
                    _add(out, subject[0], judged)
    elif not positive and (subject := _subject(cond, qualified)) and subject[1]:
        _add(out, subject[0], _URL_CLASSES)  # `if urlparse(x).netloc: abort()`: a relative URL after it
    elif isinstance(cond, ast.Name) and not positive:
        _add(out, cond.id, ALL_CLASSES)  # `if not x:` / `x or default`: x is empty or None there
    return out


def _compare(
    cond: ast.Compare,
    positive: bool,
    is_const: Callable[[ast.expr], bool],
    qualified: Callable[[ast.expr], str],
    out: Facts,
) -> None:
    op, left, right = cond.ops[0], cond.left, cond.comparators[0]
    holds = isinstance(op, ast.In | ast.Eq | ast.Is)
    if isinstance(op, ast.In | ast.NotIn) and isinstance(left, ast.Constant) and isinstance(left.value, str):
        subject = _subject(right, qualified)
        if subject and (".." in left.value or left.value in ("/", "\\")) and positive != holds:
            _add(out, subject[0], {"path"})  # `if ".." in name: abort()`
        return
    for side, other in ((left, right), (right, left)):
        if isinstance(side, ast.Call) and qualified(side.func).endswith(("commonpath", "commonprefix")):
            if positive == holds:
                for node in ast.walk(side):
                    if isinstance(node, ast.Name):
                        _add(out, node.id, {"path"})
            return
        subject = _subject(side, qualified)
        if subject is None:
            continue
        name, via_url = subject
        if positive != holds:
            continue
        if via_url:
            _add(out, name, _URL_CLASSES)  # the host compared with a known one, or with ""
        elif is_const(other):
            _add(out, name, ALL_CLASSES)
        return


def _call(cond: ast.Call, positive: bool, qualified: Callable[[ast.expr], str], out: Facts) -> None:
    name = qualified(cond.func)
    func = cond.func
    if isinstance(func, ast.Attribute) and (subject := _subject(func.value, qualified)) is not None:
        target = subject[0]
        if func.attr in _VALIDATING_METHODS and positive:
            _add(out, target, ALL_CLASSES)
        elif func.attr == "startswith" and cond.args:
            prefix = cond.args[0]
            text = prefix.value if isinstance(prefix, ast.Constant) and isinstance(prefix.value, str) else None
            if text is not None and text.startswith("//"):
                if not positive:
                    _add(out, target, {NOT_DOUBLE_SLASH})
            elif text == "/":
                if positive:
                    _add(out, target, {LOCAL_SLASH})
            elif text is not None and text.startswith(("http://", "https://")) and text.count("/") >= 3:
                if positive:
                    _add(out, target, _URL_CLASSES)  # a fixed trusted origin
            elif positive:
                _add(out, target, {PREFIX})
        elif func.attr == "is_relative_to" and positive:
            _add(out, target, {"path"})
    if not positive:
        return
    short = name.rsplit(".", 1)[-1]
    if short in ("match", "fullmatch") and cond.args:
        argument = cond.args[-1] if name.startswith("re.") or "." not in name else cond.args[0]
        if (subject := _subject(argument, qualified)) is not None:
            _add(out, subject[0], ALL_CLASSES)
        return
    if name == "isinstance" and len(cond.args) == 2:
        types = cond.args[1].elts if isinstance(cond.args[1], ast.Tuple) else [cond.args[1]]
        if all(qualified(t) in _CLEAN_TYPES for t in types) and (subject := _subject(cond.args[0], qualified)):
            _add(out, subject[0], ALL_CLASSES)
        return
    if name in REDIRECT_GUARDS or short in REDIRECT_GUARDS:
        for arg in [*cond.args, *(k.value for k in cond.keywords)]:
            if (subject := _subject(arg, qualified)) is not None:
                # a URL checked against the allowed hosts may be kept in the session for a later redirect
                _add(out, subject[0], _URL_CLASSES | {"trust-boundary"})
        return
    if any(word in short.lower() for word in GUARD_WORDS):
        for arg in cond.args:
            if (subject := _subject(arg, qualified)) is not None:
                _add(out, subject[0], ALL_CLASSES)
