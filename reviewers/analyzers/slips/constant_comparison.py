"""`slips:constant-comparison`: a comparison whose result the text alone decides.

Reported:

- an attribute compared with itself by `==` or `!=` beside a comparison of the same attribute of two
  objects (`self.w == other.w and self.h == self.h`): the copy-and-paste slip of an `__eq__`;
- anything compared with itself by `is`, `is not`, `<` or `>`: always the same answer;
- `len(...) >= 0` and `len(...) < 0` (either way round): a length is never negative;
- `A op B or A not-op B` (always true) and `A op B and A not-op B` (always false), for the pairs
  `is`/`is not`, `==`/`!=`, `in`/`not in`, `<`/`>=`, `>`/`<=`, with the same `A` and `B` on both sides.

Not caught, on purpose: a value compared with itself by `==` or `!=` on its own (`x != x` is the
idiom that finds a NaN, on names and items alike), a comparison of two literals (`if 0 == 1:`
switches code off on purpose), and anything with a call in it (two calls may answer differently).
Not caught either: conditions that are constant only through what came before (`if x: ... elif
x:`), and `is` with a literal, which is ruff's F632.
"""

from __future__ import annotations

import ast

from reviewers.analyzers.changed_file import Issue

RULE = "slips:constant-comparison"
NEGATIONS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
}
_NAME_SAFE_OPS = (ast.Is, ast.IsNot, ast.Lt, ast.Gt)


def _has_call(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call | ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr) for n in ast.walk(node))


def _same(a: ast.expr, b: ast.expr) -> bool:
    return ast.dump(a) == ast.dump(b) and not _has_call(a)


def _is_len(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and len(node.args) == 1
        and not node.keywords
    )


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == 0


def _pair_verdict(left: ast.expr, op: ast.cmpop, right: ast.expr) -> str | None:
    if _same(left, right):
        return "compares an expression with itself" if isinstance(op, _NAME_SAFE_OPS) else None
    if (_is_len(left) and _is_zero(right) and isinstance(op, ast.GtE | ast.Lt)) or (
        _is_zero(left) and _is_len(right) and isinstance(op, ast.LtE | ast.Gt)
    ):
        return "asks whether a length is negative, which it never is"
    return None


def _single(node: ast.expr) -> tuple[ast.expr, type[ast.cmpop], ast.expr] | None:
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return node.left, type(node.ops[0]), node.comparators[0]
    return None


def _two_objects(left: ast.expr, right: ast.expr) -> bool:
    """`self.w == other.w`: one attribute of two different objects."""
    return (
        isinstance(left, ast.Attribute)
        and isinstance(right, ast.Attribute)
        and left.attr == right.attr
        and ast.dump(left.value) != ast.dump(right.value)
    )


def _bool_verdict(node: ast.BoolOp) -> str | None:
    compares = [c for c in map(_single, node.values) if c is not None]
    if any(op in (ast.Eq, ast.NotEq) and _two_objects(left, right) for left, op, right in compares) and any(
        op in (ast.Eq, ast.NotEq) and isinstance(left, ast.Attribute) and _same(left, right)
        for left, op, right in compares
    ):
        return "compares an attribute with itself where its neighbours compare two objects"
    for i, (a_left, a_op, a_right) in enumerate(compares):
        for b_left, b_op, b_right in compares[i + 1 :]:
            if NEGATIONS[a_op] is b_op and _same(a_left, b_left) and _same(a_right, b_right):
                if isinstance(node.op, ast.Or):
                    return "is always true: one of a test and its opposite always holds"
                return "is always false: a test and its opposite never both hold"
    return None


def constant_comparison_issues(nodes: list[ast.AST], tree: ast.Module, lines: list[str]) -> list[Issue]:
    issues: list[Issue] = []
    for node in nodes:
        verdict: str | None = None
        if not isinstance(node, ast.Compare | ast.BoolOp):
            continue
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            verdict = next(
                (
                    v
                    for left, op, right in zip(operands, node.ops, operands[1:], strict=False)
                    if (v := _pair_verdict(left, op, right)) is not None
                ),
                None,
            )
        else:
            verdict = _bool_verdict(node)
        if verdict is None:
            continue
        issues.append(
            Issue(
                node.lineno,
                RULE,
                "medium",
                "Comparison whose result never changes",
                f"This condition {verdict}, so its result is fixed whatever the data: the test it was meant to make "
                "is not made. Compare what was meant (often the other object's value).",
                end_line=node.end_lineno,
                kind="constant-comparison",
                confidence="high",
            )
        )
    return issues
