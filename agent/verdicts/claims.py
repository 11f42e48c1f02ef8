"""Whether the code at head supports what a rule claims.

A static rule states a fact about the repository ("`x` was removed", "no test exercises `f`",
"user data reaches this SQL text"); the rule looked at one file, the verifier looks at the head
tree. When the tree contradicts the claim the finding is a false positive, and the reason names
the line that contradicts it:

- a removed-symbol claim, when the symbol is still defined at head in a module the changed file
  uses (moved to a base class or another module it imports);
- an untested-code claim, when a test at head names every symbol the finding lists;
- an injection claim, when the value that reaches the sink is built from constants only.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from reviewers.analyzers.tests_lookup import distinctive, is_test_path, module_tokens
from reviewers.contracts import Finding, SearchHit, Workspace, language_of
from reviewers.errors import InputError

REMOVED_SYMBOL_RULES = frozenset({"tests:removed-symbol"})
UNTESTED_RULES = frozenset({"tests:untested-new"})
MODEL_RULES = frozenset({"", "llm"})
# A model's finding makes the same claims in its own words; its title says which.
_SAYS_REMOVED = re.compile(r"\b(?:removed|deleted|no longer exists?|was dropped)\b", re.IGNORECASE)
_SAYS_UNTESTED = re.compile(r"\b(?:untested|not tested|no tests?|without tests?|lacks? tests?)\b", re.IGNORECASE)
MAX_DEFINITION_HITS = 200  # definitions of one name across a repository; past this, say nothing
_BACKTICKED = re.compile(r"`([A-Za-z_][\w.]*)`")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
_IMPORT_LINE = re.compile(r"\s*(?:from|import|use|require|#include)\b|.*\brequire\(")
_DEFINITION_KEYWORDS = r"(def|class|function|func|fn|fun|interface|struct|enum|trait|type)"


def _claims(finding: Finding, rules: frozenset[str], words: re.Pattern[str]) -> bool:
    """Whether a finding makes a claim: a rule that states it, or a model's title that says it."""
    return finding.rule in rules or (finding.rule in MODEL_RULES and bool(words.search(finding.title)))


def claimed_symbols(finding: Finding) -> list[str]:
    """The symbols a finding talks about: the identifiers it quotes in backticks (the last part of
    a dotted name), else the first word of its title. Paths in backticks are skipped."""
    names: list[str] = []
    for quoted in _BACKTICKED.findall(finding.body):
        if "/" in quoted or quoted.endswith((".py", ".js", ".ts")):
            continue
        name = quoted.rsplit(".", 1)[-1]
        if _IDENTIFIER.match(name) and name not in names:
            names.append(name)
    if not names:
        first = finding.title.split(" ", 1)[0]
        if _IDENTIFIER.match(first):
            names.append(first)
    return names


@dataclass
class HeadTree:
    """The head tree as the claim checks read it, with file texts cached for one verification."""

    workspace: Workspace
    _texts: dict[str, str | None] = field(default_factory=dict)
    _test_paths: list[str] | None = None

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            self._texts[path] = self.workspace.read_file(path)
        return self._texts[path]

    def test_paths(self) -> list[str]:
        if self._test_paths is None:
            self._test_paths = [p for p in self.workspace.list_paths() if is_test_path(p)]
        return self._test_paths

    def search(self, pattern: str) -> list[SearchHit]:
        try:
            return self.workspace.search(pattern, max_hits=MAX_DEFINITION_HITS)
        except InputError:  # a pattern the backend refuses (or a grep that timed out) leaves the claim standing
            return []


def _definition_hits(tree: HeadTree, name: str) -> list[SearchHit]:
    escaped = re.escape(name)
    hits = tree.search(rf"\b{_DEFINITION_KEYWORDS}\s+{escaped}\b")
    hits += tree.search(rf"^\s*{escaped}\s*(:[^=]*)?=([^=]|$)")
    return [h for h in hits if not is_test_path(h.path) and language_of(h.path) != "other"]


def _uses_module(text: str, *, finding_path: str, hit_path: str) -> bool:
    """Whether the changed file imports the module a definition lives in (or is that module)."""
    if hit_path == finding_path:
        return True
    imports = [line for line in text.splitlines() if _IMPORT_LINE.match(line)]
    return any(re.search(rf"(?<![\w]){re.escape(t)}\b", line) for t in module_tokens(hit_path) for line in imports)


def removed_symbol_still_defined(finding: Finding, tree: HeadTree) -> str | None:
    """Why a "`x` was removed" claim is false: where `x` is still defined at head."""
    if not _claims(finding, REMOVED_SYMBOL_RULES, _SAYS_REMOVED):
        return None
    symbols = claimed_symbols(finding)[:1]
    text = tree.text(finding.path)
    if not symbols or text is None:
        return None
    name = symbols[0]
    for hit in _definition_hits(tree, name):
        if _uses_module(text, finding_path=finding.path, hit_path=hit.path):
            where = "in the same file" if hit.path == finding.path else f"in a module {finding.path} uses"
            return f"`{name}` is still defined at head {where}: {hit.path}:{hit.line} `{hit.text.strip()[:80]}`"
    return None


def _test_reference(tree: HeadTree, name: str, source_path: str) -> tuple[str, int, str] | None:
    word = re.compile(rf"\b{re.escape(name)}\b")
    tokens = [] if distinctive(name) else [re.compile(rf"\b{re.escape(t)}\b") for t in module_tokens(source_path)]
    for path in tree.test_paths():
        text = tree.text(path)
        if text is None or (tokens and not any(t.search(text) for t in tokens)):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if word.search(line):
                return path, number, line.strip()
    return None


def tested_after_all(finding: Finding, tree: HeadTree) -> str | None:
    """Why a "no test exercises `f`" claim is false: a test at head names every symbol listed."""
    if not _claims(finding, UNTESTED_RULES, _SAYS_UNTESTED):
        return None
    symbols = claimed_symbols(finding)
    if not symbols:
        return None
    found = [(name, _test_reference(tree, name, finding.path)) for name in symbols]
    if any(ref is None for _, ref in found):
        return None
    named = "; ".join(f"{ref[0]}:{ref[1]} uses `{name}`" for name, ref in found if ref is not None)
    return f"a test at head does reference it: {named}"


# --- sinks that receive only constants ---------------------------------------------------------

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
        tree = ast.parse(head_text)
    except (SyntaxError, ValueError):
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
