"""Security checks on a Python syntax tree: where a value flows, not only what a line says.

Parsing is not executing: `ast.parse` reads the text. The checks follow values one assignment deep
within a function — enough for `query = f"..."; cur.execute(query)` and `(BASE / name).read_bytes()` —
and report only on lines the change added:

- SQL text built by interpolation that reaches an execute-like call;
- a command built from a variable run through a shell (`shell=True`, `os.system`);
- eval/exec of a non-literal;
- deserializers that run code (pickle, marshal, unsafe YAML, torch.load without weights_only);
- a function parameter joined to a directory and opened, with no containment check in the function.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.patterns import SQL_SHAPE
from reviewers.kernel.contracts import Severity

SQL_SINK_ATTRS = frozenset(
    {"execute", "executemany", "executescript", "exec_driver_sql", "raw", "read_sql", "read_sql_query", "text",
     "mogrify"}
)  # fmt: skip
SHELL_CALLS = frozenset(
    {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput", "asyncio.create_subprocess_shell"}
)
SUBPROCESS_CALLS = frozenset(
    {"subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output", "subprocess.Popen"}
)
DESERIALIZERS: dict[str, Severity] = {
    "pickle.load": "high", "pickle.loads": "high", "pickle.Unpickler": "high", "_pickle.loads": "high",
    "cPickle.load": "high", "cPickle.loads": "high", "dill.load": "high", "dill.loads": "high",
    "marshal.load": "high", "marshal.loads": "high", "shelve.open": "high", "jsonpickle.decode": "high",
    "pandas.read_pickle": "high", "yaml.unsafe_load": "high", "yaml.unsafe_load_all": "high",
    "joblib.load": "medium", "yaml.full_load": "medium",
}  # fmt: skip
SAFE_YAML_LOADERS = frozenset({"SafeLoader", "CSafeLoader", "BaseLoader"})
FILE_OPENERS = frozenset(
    {"open", "io.open", "os.open", "codecs.open", "aiofiles.open", "os.remove", "os.unlink", "os.rmdir",
     "os.listdir", "os.scandir", "shutil.copy", "shutil.copyfile", "shutil.copy2", "shutil.move", "shutil.rmtree",
     "send_file", "flask.send_file", "FileResponse", "starlette.responses.FileResponse",
     "fastapi.responses.FileResponse", "tarfile.open", "zipfile.ZipFile"}
)  # fmt: skip
PATH_METHODS = frozenset(
    {"read_bytes", "read_text", "write_bytes", "write_text", "open", "unlink", "rmdir", "iterdir", "touch",
     "rename", "replace", "symlink_to", "hardlink_to"}
)  # fmt: skip
PATH_JOINERS = frozenset({"os.path.join", "posixpath.join", "pathlib.Path", "Path", "PurePath", "pathlib.PurePath"})
# Anything in a function that shows its author thought about containment.
CONTAINMENT = re.compile(
    r"is_relative_to|relative_to\(|commonpath|secure_filename|safe_join|basename|send_from_directory|"
    r"\.name\b|['\"]\.\.['\"]\s+(?:not\s+)?in\b|os\.sep\s+in\b|(?:resolve|realpath|abspath|normpath)\b.*startswith"
    r"|startswith.*(?:resolve|realpath|abspath|normpath)\b",
    re.DOTALL,
)
_TEXTLIKE_ANNOTATION = re.compile(r"\b(?:str|Path|PurePath|PathLike|AnyStr|Any|bytes)\b")


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name → dotted name for every import in the module (`pk` → `pickle`, `loads` → `pickle.loads`)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def qualified_name(expr: ast.expr, aliases: dict[str, str]) -> str:
    """`pk.loads` → `pickle.loads` when `import pickle as pk`; "" for anything not a dotted name."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return ""
    parts.append(aliases.get(expr.id, expr.id))
    return ".".join(reversed(parts))


def scopes(tree: ast.Module) -> Iterator[tuple[ast.AST, list[ast.AST]]]:
    """Each function (and the module) with the nodes that belong to it, nested functions excluded."""
    roots: list[ast.AST] = [tree] + [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for root in roots:
        nodes: list[ast.AST] = []
        stack = list(ast.iter_child_nodes(root))
        while stack:
            node = stack.pop()
            nodes.append(node)
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                stack.extend(ast.iter_child_nodes(node))
        yield root, nodes


def _assignments(nodes: list[ast.AST]) -> dict[str, list[ast.expr]]:
    out: dict[str, list[ast.expr]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name) and node.value:
            out.setdefault(node.target.id, []).append(node.value)
    return out


def _is_constant(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Constant):
        return True
    if isinstance(expr, ast.List | ast.Tuple):
        return all(_is_constant(e) for e in expr.elts)
    return False


def _constant_text(expr: ast.expr) -> str:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else ""


def _flatten_add(expr: ast.expr) -> list[ast.expr]:
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _flatten_add(expr.left) + _flatten_add(expr.right)
    return [expr]


def interpolated_sql(expr: ast.expr) -> bool:
    """Whether an expression builds SQL text by splicing values into it."""
    if isinstance(expr, ast.JoinedStr):
        text = "".join(_constant_text(v) for v in expr.values)
        return any(isinstance(v, ast.FormattedValue) for v in expr.values) and bool(SQL_SHAPE.search(text))
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        return bool(SQL_SHAPE.search(_constant_text(expr.left)))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format":
        return bool(SQL_SHAPE.search(_constant_text(expr.func.value)))
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        parts = _flatten_add(expr)
        text = " ".join(_constant_text(p) for p in parts)
        has_sql = bool(SQL_SHAPE.search(text)) or any(interpolated_sql(p) for p in parts)
        return has_sql and any(not _is_constant(p) for p in parts)
    return False


def _first_arg(call: ast.Call, keyword: str) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


class _Checker:
    def __init__(self, file: ChangedFile, tree: ast.Module) -> None:
        self.file = file
        self.aliases = import_aliases(tree)
        self.issues: list[Issue] = []

    def report(self, nodes: list[ast.AST], rule: str, kind: str, severity: Severity, title: str, body: str) -> None:
        """Report at the first of the given nodes' lines that the change added."""
        for node in nodes:
            line = getattr(node, "lineno", 0)
            end = getattr(node, "end_lineno", None) or line
            changed = [n for n in range(line, end + 1) if self.file.is_changed(n)]
            if changed:
                self.issues.append(Issue(changed[0], rule, severity, title, body, kind=kind))
                return

    def _values(self, expr: ast.expr, assigned: dict[str, list[ast.expr]]) -> list[ast.expr]:
        """The expression itself, or what a local name was assigned (one level)."""
        if isinstance(expr, ast.Name) and expr.id in assigned:
            return assigned[expr.id]
        return [expr]

    def check_scope(self, root: ast.AST, nodes: list[ast.AST]) -> None:
        assigned = _assignments(nodes)
        for node in nodes:
            if isinstance(node, ast.Call):
                self.check_call(node, assigned)
        if isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef):
            self.check_path_traversal(root, nodes, assigned)

    def check_call(self, call: ast.Call, assigned: dict[str, list[ast.expr]]) -> None:
        name = qualified_name(call.func, self.aliases)
        attr = call.func.attr if isinstance(call.func, ast.Attribute) else name.rsplit(".", 1)[-1]
        first = _first_arg(call, "sql") if attr in SQL_SINK_ATTRS else None
        if first is not None:
            built = [v for v in self._values(first, assigned) if interpolated_sql(v)]
            if built:
                self.report(
                    [*built, call], "python:sql-interpolation", "sql", "high",
                    "SQL statement built by string interpolation",
                    "Values spliced into the SQL text let a crafted input change the statement (SQL injection). "
                    "Pass them as bound parameters (`execute(sql, params)`).",
                )  # fmt: skip
            return
        command = _first_arg(call, "args")
        shell = _keyword(call, "shell")
        spliced = command is not None and any(not _is_constant(v) for v in self._values(command, assigned))
        shell_on = isinstance(shell, ast.Constant) and shell.value is True
        if spliced and (name in SHELL_CALLS or (name in SUBPROCESS_CALLS and shell_on)):
            self.report(
                [call], "python:shell-interpolation", "shell", "high",
                "Command line built from a variable and run through a shell",
                "A value with shell metacharacters (`;`, `$()`, spaces) runs arbitrary commands. Pass an argument "
                "list without `shell=True`, or quote the value with shlex.quote.",
            )  # fmt: skip
        elif name in ("eval", "exec") and command is not None and not _is_constant(command):
            self.report(
                [call], "python:code-eval", "code-exec", "high", f"{name}() of a non-literal value",
                f"{name}() runs whatever the value contains; if any part of it comes from outside this is code "
                "execution. Parse data with ast.literal_eval or json instead.",
            )  # fmt: skip
        else:
            self.check_deserializer(call, name)

    def check_deserializer(self, call: ast.Call, name: str) -> None:
        severity = DESERIALIZERS.get(name)
        if name in ("yaml.load", "yaml.load_all"):
            loader = _keyword(call, "Loader") or (call.args[1] if len(call.args) > 1 else None)
            loader_name = qualified_name(loader, self.aliases).rsplit(".", 1)[-1] if loader is not None else ""
            severity = None if loader_name in SAFE_YAML_LOADERS else "high"
        elif name == "torch.load":
            weights_only = _keyword(call, "weights_only")
            safe = isinstance(weights_only, ast.Constant) and weights_only.value is True
            severity = None if safe else "medium"
        if severity is not None:
            self.report(
                [call], "python:unsafe-deserialization", "deserialization", severity,
                f"{name}() can execute code from the data it reads",
                f"{name} rebuilds arbitrary objects, so whoever can write the input can run code here. Use a "
                "data-only format (JSON, yaml.safe_load, weights_only=True) for anything not produced by this process.",
            )  # fmt: skip

    def check_path_traversal(
        self, func: ast.FunctionDef | ast.AsyncFunctionDef, nodes: list[ast.AST], assigned: dict[str, list[ast.expr]]
    ) -> None:
        params = {
            a.arg
            for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
            if a.arg not in ("self", "cls")
            and (a.annotation is None or _TEXTLIKE_ANNOTATION.search(ast.unparse(a.annotation)))
        }
        if not params:
            return
        source = "\n".join(self.file.lines[func.lineno - 1 : func.end_lineno or func.lineno])
        if CONTAINMENT.search(source):
            return

        def mentions_param(expr: ast.expr) -> bool:
            return any(isinstance(n, ast.Name) and n.id in params for n in ast.walk(expr))

        # One assignment deep: `p = Path(name)` carries the caller's value as well as `name` does.
        params |= {name for name, values in assigned.items() if any(mentions_param(v) for v in values)}

        def is_join(expr: ast.expr) -> bool:
            if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
                return mentions_param(expr.right)
            if isinstance(expr, ast.Call):
                name = qualified_name(expr.func, self.aliases)
                if name in PATH_JOINERS and len(expr.args) >= 2:
                    return any(mentions_param(a) for a in expr.args[1:])
                if isinstance(expr.func, ast.Attribute) and expr.func.attr == "joinpath":
                    return any(mentions_param(a) for a in expr.args)
            if isinstance(expr, ast.JoinedStr):
                text = "".join(_constant_text(v) for v in expr.values)
                return "/" in text and mentions_param(expr)
            return False

        joined_names = {name for name, values in assigned.items() if any(is_join(v) for v in values)}

        def joined(expr: ast.expr) -> bool:
            while isinstance(expr, ast.Attribute | ast.Call):
                if is_join(expr):
                    return True
                expr = expr.value if isinstance(expr, ast.Attribute) else expr.func
            return is_join(expr) or (isinstance(expr, ast.Name) and expr.id in joined_names)

        for node in nodes:
            if not isinstance(node, ast.Call):
                continue
            name = qualified_name(node.func, self.aliases)
            target: ast.expr | None = None
            if name in FILE_OPENERS and node.args:
                target = node.args[0]
            elif isinstance(node.func, ast.Attribute) and node.func.attr in PATH_METHODS:
                target = node.func.value
            if target is not None and joined(target):
                self.report(
                    [node], "python:path-traversal", "path-traversal", "high",
                    "Caller-supplied name joined to a directory without a containment check",
                    "A name such as `../../etc/passwd` (or an absolute path) escapes the directory. Resolve the "
                    "joined path and check it is inside the base (`path.resolve().is_relative_to(base)`), or "
                    "reduce the name to its last component.",
                )  # fmt: skip


def python_security_issues(file: ChangedFile) -> list[Issue] | None:
    """The syntax-tree checks, or None when the file is not Python that parses (use the line rules)."""
    tree = file.python_tree
    if tree is None:
        return None
    checker = _Checker(file, tree)
    for root, nodes in scopes(tree):
        checker.check_scope(root, nodes)
    return checker.issues
