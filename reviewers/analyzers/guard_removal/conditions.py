"""What a condition guards: the facts the flow engine proves about a name (`guards.facts`), the
family of check it is (a URL check, containment, an allow-list, a pattern and how strict it is), a
check known only by its shape (`checks`), and a bound on a value's size."""

from __future__ import annotations

import ast
import re

from reviewers.analyzers.flow import guards
from reviewers.analyzers.flow.rules import ALL_CLASSES, REDIRECT_GUARDS
from reviewers.analyzers.guard_removal.checks import content_checked
from reviewers.analyzers.guard_removal.families import CLASS_CWE
from reviewers.analyzers.guard_removal.model import Guard
from reviewers.analyzers.guard_removal.model import dotted as _dotted
from reviewers.analyzers.guard_removal.options import const as _const
from reviewers.analyzers.guard_removal.scan_base import ScanBase, _text
from reviewers.analyzers.guard_removal.validators import repository_function

_WILD = re.compile(r"\.\*|\.\+|\\S|\[\^")


class ConditionGuards(ScanBase):
    """The guards a condition is; `protections.ModuleScan` decides where they apply."""

    _shapes: dict[int, tuple[str, tuple[int, int]]]

    def _condition(self, test: ast.expr, positive: bool, stmt: ast.stmt) -> list[Guard]:
        proven = guards.facts(
            test, positive, is_const=self.is_const, qualified=self.qualified, validator=self.validator
        )
        out: list[Guard] = []
        if not proven:
            return out + self._limits(test, positive, stmt)
        if id(test) not in self._shapes:
            self._shapes[id(test)] = self._shape(test)
        family, strength = self._shapes[id(test)]
        text = _text(self.lines, stmt)
        for name, classes in proven.items():
            cleared = {"path" if c == guards.PREFIX else c for c in classes} & set(CLASS_CWE)
            shape = "url-check" if family == "containment" and "path" not in cleared else family
            if cleared:
                out.append(Guard(shape, frozenset(cleared), frozenset({name}), stmt.lineno, text, strength=strength))
        out += self._limits(test, positive, stmt)
        return out

    def _shape(self, test: ast.expr) -> tuple[str, tuple[int, int]]:
        """Which family of check a condition is, and, for a pattern, how strict it is."""
        nodes = list(ast.walk(test))
        calls = [n for n in nodes if isinstance(n, ast.Call)]
        for call in calls:
            if repository_function(self.project, self.info, call.func) is not None:
                return "validator", (0, 0)
        shorts = {_dotted(c.func).rsplit(".", 1)[-1] for c in calls}
        attributes = {n.attr for n in nodes if isinstance(n, ast.Attribute)}
        if attributes & {"netloc", "hostname", "scheme", "host"} or shorts & (REDIRECT_GUARDS | {"urlparse"}):
            return "url-check", (0, 0)
        for call in calls:
            short = _dotted(call.func).rsplit(".", 1)[-1]
            if short in ("match", "fullmatch", "search"):
                return "pattern", self._pattern_strength(call, short)
        if shorts & {"startswith", "is_relative_to", "commonpath", "realpath", "abspath", "resolve"} or any(
            isinstance(n, ast.Constant) and isinstance(n.value, str) and ".." in n.value for n in nodes
        ):
            return "containment", (0, 0)
        if any(isinstance(op, ast.In | ast.NotIn | ast.Eq | ast.NotEq) for n in nodes
               if isinstance(n, ast.Compare) for op in n.ops):  # fmt: skip
            return "allow-list", (0, 0)
        return "validation", (0, 0)

    def _content_check(self, test: ast.expr, holds: bool, proven: list[Guard], stmt: ast.stmt) -> list[Guard]:
        """An early exit decided by a value's content that no rule reads (`checks`): past it the test
        `holds` (or not); a check of every class for the names that constrains and nothing proven
        here already covers."""
        covered = {n for g in proven for n in g.names}
        names = content_checked(test, self._is_local, holds) - covered
        if not names:
            return []
        return [Guard("content-check", ALL_CLASSES, names, stmt.lineno, _text(self.lines, stmt))]

    def _pattern_strength(self, call: ast.Call, short: str) -> tuple[int, int]:
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        pattern: object = ...
        if receiver is not None and isinstance(receiver, ast.Name) and receiver.id in self.patterns:
            pattern = self.patterns[receiver.id]
        elif call.args:
            pattern = _const(call.args[0])
        if not isinstance(pattern, str):
            return (0, 0)
        start = short in ("match", "fullmatch") or pattern.startswith(("^", "\\A"))
        end = short == "fullmatch" or pattern.endswith(("$", "\\Z", "\\z"))
        return (int(start) + int(end), -len(_WILD.findall(pattern)))

    def _limits(self, test: ast.expr, positive: bool, stmt: ast.stmt) -> list[Guard]:
        """`len(x) > LIMIT` where it fails (or `len(x) <= LIMIT` where it holds): x is bounded."""
        if not isinstance(test, ast.Compare) or len(test.ops) != 1:
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                return self._limits(test.operand, not positive, stmt)
            if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and not positive:
                return [g for v in test.values for g in self._limits(v, positive, stmt)]
            return []
        op, left, right = test.ops[0], test.left, test.comparators[0]
        for side, other, upper in ((left, right, ast.Gt | ast.GtE), (right, left, ast.Lt | ast.LtE)):
            measured = (
                side.args[0] if isinstance(side, ast.Call) and _dotted(side.func) == "len" and side.args else None
            )
            if measured is None or isinstance(other, ast.Call):
                continue
            bounded_here = not positive if isinstance(op, upper) else positive
            if bounded_here:
                names = self.names(measured)
                return [Guard("size-limit", frozenset({"dos"}), names, stmt.lineno, _text(self.lines, stmt))]
        return []
