"""What the parts of the guard-removal scan (`protections.ModuleScan`) share: the module they read,
its constants, and the names under a node."""

from __future__ import annotations

import ast

from reviewers.analyzers.flow.project import ModuleInfo, Project
from reviewers.analyzers.guard_removal.model import dotted as _dotted
from reviewers.analyzers.guard_removal.validators import judge_call

_NOTHING: frozenset[str] = frozenset()
_NESTED = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _text(lines: list[str], node: ast.AST) -> str:
    line = getattr(node, "lineno", 0)
    return lines[line - 1].strip() if 1 <= line <= len(lines) else ""


class ScanBase:
    """The state every part of the scan reads; `protections.ModuleScan` sets it up."""

    project: Project
    info: ModuleInfo
    lines: list[str]
    constants: set[str]
    patterns: dict[str, str]  # module names bound to re.compile("...")
    broken: dict[str, dict[str, str]]  # scope → repository validators called there that do not work
    _current: str  # the scope being walked
    _subtrees: dict[int, tuple[frozenset[str], tuple[ast.expr, ...]]]

    def qualified(self, expr: ast.expr) -> str:
        name = _dotted(expr)
        if not name:
            return ""
        head, _, rest = name.partition(".")
        resolved = self.info.aliases.get(head, head)
        return f"{resolved}.{rest}" if rest else resolved

    def is_const(self, expr: ast.expr) -> bool:
        if isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.Name):
            return expr.id.isupper() or expr.id in self.constants
        if isinstance(expr, ast.Attribute):
            return expr.attr.isupper()
        if isinstance(expr, ast.Set | ast.List | ast.Tuple):
            return all(isinstance(e, ast.Constant) for e in expr.elts)
        return False

    def validator(self, call: ast.Call) -> frozenset[str] | None:
        judgement = judge_call(self.project, self.info, call.func)
        if judgement is not None and not judgement.works:
            self.broken.setdefault(self._current, {})[_dotted(call.func)] = judgement.why
        return judgement.classes if judgement is not None else None

    def subtree(self, root: ast.AST) -> tuple[frozenset[str], tuple[ast.expr, ...]]:
        """The names under a node and its calls and comparisons (nested functions and lambdas left
        out), each node's computed once per module: a call nested in a call is not walked again."""
        memo = self._subtrees
        if id(root) in memo:
            return memo[id(root)]
        stack: list[tuple[ast.AST, list[ast.AST] | None]] = [(root, None)]
        while stack:
            node, children = stack.pop()
            if children is None:
                if id(node) in memo:
                    continue
                inner = [c for c in ast.iter_child_nodes(node) if not isinstance(c, _NESTED)]
                stack.append((node, inner))
                stack.extend((c, None) for c in inner if id(c) not in memo)
                continue
            if not children:
                memo[id(node)] = (frozenset({node.id}) if isinstance(node, ast.Name) else _NOTHING, ())
                continue
            names: set[str] = set()
            found: list[ast.expr] = [node] if isinstance(node, ast.Call | ast.Compare) else []
            for child in children:
                child_names, child_found = memo[id(child)]
                names |= child_names
                found += child_found
            if isinstance(node, ast.Name):
                names.add(node.id)
            memo[id(node)] = (frozenset(names), tuple(found))
        return memo[id(root)]

    def names(self, expr: ast.AST) -> frozenset[str]:
        return self.subtree(expr)[0]

    def _is_local(self, name: str) -> bool:
        """A name a function binds (not a module, a constant or a module-level definition)."""
        return not (
            name in self.info.aliases
            or name.isupper()
            or name in self.constants
            or name in self.info.functions
            or name in self.info.classes
        )
