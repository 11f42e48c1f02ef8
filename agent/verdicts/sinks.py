"""Whether an injection sink receives only constants.

bandit's B608 and our own SQL rule see an f-string reaching `execute` and speak up; when every
value spliced in is a literal, a module constant built from literals, or a loop variable over a
literal tuple, no input reaches the sink and the claim of an injection is false. The value is
followed back through assignments within the function (and the module's own constants), never
across calls.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from reviewers.analyzers.pysyntax import parse_python
from reviewers.kernel.contracts import Finding
from reviewers.kernel.errors import PythonSyntaxError
from reviewers.paths import language_of

SINK_FAMILIES = frozenset({"sql", "shell", "code-exec"})
SQL_SINKS = frozenset({"execute", "executemany", "executescript", "exec_driver_sql", "raw", "read_sql",
                       "read_sql_query", "text", "mogrify"})  # fmt: skip
SHELL_SINKS = frozenset({"system", "popen", "getoutput", "getstatusoutput", "create_subprocess_shell"})
SUBPROCESS_SINKS = frozenset({"run", "call", "check_call", "check_output", "Popen"})
CODE_SINKS = frozenset({"eval", "exec"})
DATA_KEYWORDS = ("sql", "statement", "query", "operation", "cmd", "command", "args", "source")
MAX_RESOLVE_DEPTH = 8  # assignments followed from the sink back to literals


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_sink(call: ast.Call, family: str) -> bool:
    name = _callee(call)
    if family == "sql":
        return name in SQL_SINKS
    if family == "code-exec":
        return name in CODE_SINKS
    shell_true = any(
        k.arg == "shell" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords
    )
    return name in SHELL_SINKS or (name in SUBPROCESS_SINKS and shell_true)


def _data_argument(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in DATA_KEYWORDS), None)


def _scope_nodes(root: ast.AST) -> list[ast.AST]:
    nodes: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(root))
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    return nodes


def _bindings(nodes: list[ast.AST]) -> dict[str, list[ast.expr]]:
    """Name → every expression assigned to it in a scope (a loop variable gets its iterable)."""
    out: dict[str, list[ast.expr]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name) and node.value:
            out.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension) and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, []).append(node.iter)
    return out


@dataclass
class _ConstantFlow:
    """Follows a value back through assignments; `names` collects the constants it rests on."""

    local: dict[str, list[ast.expr]]
    module: dict[str, list[ast.expr]]
    parameters: set[str]
    names: dict[str, int] = field(default_factory=dict)

    def constant(self, expr: ast.expr, depth: int = 0) -> bool:
        if depth > MAX_RESOLVE_DEPTH:
            return False
        if isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.JoinedStr):
            return all(self.constant(v, depth + 1) for v in expr.values)
        if isinstance(expr, ast.FormattedValue):
            return self.constant(expr.value, depth + 1)
        if isinstance(expr, ast.BinOp):
            return self.constant(expr.left, depth + 1) and self.constant(expr.right, depth + 1)
        if isinstance(expr, ast.List | ast.Tuple | ast.Set):
            return all(self.constant(e, depth + 1) for e in expr.elts)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.keywords:
            # "...".join(CONSTANTS) and "...".format(CONSTANT): string methods of constants
            return self.constant(expr.func.value, depth + 1) and all(self.constant(a, depth + 1) for a in expr.args)
        if isinstance(expr, ast.Name):
            return self._name(expr.id, depth)
        return False

    def _name(self, name: str, depth: int) -> bool:
        if name in self.parameters:
            return False
        values = self.local.get(name) or self.module.get(name)
        if not values:
            return False  # imported, global or built-in: not known to be constant
        if all(self.constant(v, depth + 1) for v in values):
            self.names.setdefault(name, min(getattr(v, "lineno", 0) for v in values))
            return True
        return False


def _enclosing_scope(tree: ast.Module, line: int) -> ast.AST:
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end and node.lineno >= getattr(best, "lineno", 0):
                best = node
    return best


def _parameters(scope: ast.AST) -> set[str]:
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return set()
    a = scope.args
    star = [p for p in (a.vararg, a.kwarg) if p is not None]
    return {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, *star]}


def sink_gets_constants(finding: Finding, *, family: str | None, head_text: str | None) -> str | None:
    """Why an injection claim is false: every sink call at the finding receives a constant value."""
    if family not in SINK_FAMILIES or head_text is None or language_of(finding.path) != "python":
        return None
    try:
        tree = parse_python(head_text, finding.path)
    except PythonSyntaxError:
        return None
    scope = _enclosing_scope(tree, finding.line)
    nodes = _scope_nodes(scope)
    local = _bindings(nodes)
    flow = _ConstantFlow(local, _bindings(_scope_nodes(tree)) if scope is not tree else local, _parameters(scope))
    lo, hi = finding.line, max(finding.line, finding.end_line)
    assigned_here = {name for name, values in local.items() if any(lo <= getattr(v, "lineno", 0) <= hi for v in values)}
    relevant: list[tuple[ast.Call, ast.expr]] = []
    for node in nodes:
        if not isinstance(node, ast.Call) or not _is_sink(node, family):
            continue
        data = _data_argument(node)
        if data is None:
            continue
        on_line = node.lineno <= hi and (node.end_lineno or node.lineno) >= lo
        fed_here = any(isinstance(n, ast.Name) and n.id in assigned_here for n in ast.walk(data))
        if on_line or fed_here:
            relevant.append((node, data))
    if not relevant or not all(flow.constant(data) for _, data in relevant):
        return None
    call = relevant[0][0]
    rests_on = ", ".join(f"`{n}` (line {line})" for n, line in sorted(flow.names.items(), key=lambda kv: kv[1]))
    built = f"built only from constants: {rests_on}" if rests_on else "a literal"
    return f"the value reaching `{_callee(call)}()` at {finding.path}:{call.lineno} is {built}"
