"""Security checks on a Python syntax tree: where a value flows, not only what a line says.

Parsing is not executing: `ast.parse` reads the text. Values are followed within a function (see
`taint` for what counts as outside data), and only lines the change added are reported. Severity
policy, per rule:

- `python:sql-interpolation` (high): SQL text built by interpolating a non-constant value, reaching
  an execute-like call;
- `python:shell-interpolation` (high): a command built from a non-constant value run through a shell;
- `python:code-eval` (high): eval/exec of a non-literal;
- `python:unsafe-deserialization` (high; medium for joblib, full_load, torch.load): deserializers
  that run code, whatever their input;
- `python:path-traversal`: outside data joined to a directory and opened with no containment check
  (high), or a function's parameter joined to a fixed absolute directory on the server (medium) —
  a parameter joined to a package-relative folder (fixtures, resources) says nothing;
- `python:template-injection` (high), `python:open-redirect`, `python:ssrf`, `python:xml-external`
  (medium): outside data used as a template's source, a redirect target, an outbound URL, or XML
  parsed by a parser that resolves entities;
- the authentication checks of `python_auth` (timing-unsafe compare, fast password hash, TLS off).

A sink fed only by constants never fires.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.patterns import SQL_SHAPE
from reviewers.analyzers.python_auth import auth_issues
from reviewers.analyzers.taint import TAINT_SINKS, Taint
from reviewers.kernel.contracts import Confidence, Severity

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
# The absolute folders of a server: a caller's name joined to one of these reaches the real filesystem.
_ABSOLUTE_DIR = re.compile(r"^(?:/|~|[A-Za-z]:\\)")
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


def _constants_only(expr: ast.expr, assigned: dict[str, list[ast.expr]]) -> bool:
    """Whether every name spliced into an expression is a constant: an UPPER_CASE module constant
    or a local assigned only literals (`f"SELECT * FROM {TABLE}"`). Such text is fixed by the
    code, so no input can change the statement."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute | ast.Subscript):
            return False
        if isinstance(node, ast.Name) and not node.id.isupper():
            values = assigned.get(node.id)
            if not values or not all(_is_constant(v) for v in values):
                return False
    return True


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
        self.module_constants = {
            t.id: node.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name)
        }

    def report(
        self, nodes: list[ast.AST], rule: str, kind: str, severity: Severity, title: str, body: str,
        confidence: Confidence = "high",
    ) -> None:  # fmt: skip
        """Report at the first of the given nodes' lines that the change added."""
        for node in nodes:
            line = getattr(node, "lineno", 0)
            end = getattr(node, "end_lineno", None) or line
            changed = [n for n in range(line, end + 1) if self.file.is_changed(n)]
            if changed:
                self.issues.append(Issue(changed[0], rule, severity, title, body, kind=kind, confidence=confidence))
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
        for node, rule, kind, severity, title, body in auth_issues(root, nodes, self.aliases):
            self.report([node], rule, kind, severity, title, body)
        if isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef):
            taint = Taint(root, nodes, self.aliases)
            self.check_taint_sinks(nodes, taint)
            self.check_path_traversal(root, nodes, assigned, taint)

    def check_taint_sinks(self, nodes: list[ast.AST], taint: Taint) -> None:
        """Outside data reaching a template, a redirect, an outbound request or an XML parser."""
        for node in nodes:
            if not isinstance(node, ast.Call) or not (node.args or node.keywords):
                continue
            name = qualified_name(node.func, self.aliases)
            sink = TAINT_SINKS.get(name) or TAINT_SINKS.get(name.rsplit(".", 1)[-1] if "." not in name else "")
            if sink is None and isinstance(node.func, ast.Attribute) and node.func.attr == "from_string":
                sink = TAINT_SINKS["from_string"]
            first = _first_arg(node, "url")
            if sink is not None and first is not None and taint.tainted(first):
                rule, kind, severity, title, body = sink
                self.report([node], rule, kind, severity, title, body)

    def check_call(self, call: ast.Call, assigned: dict[str, list[ast.expr]]) -> None:
        name = qualified_name(call.func, self.aliases)
        attr = call.func.attr if isinstance(call.func, ast.Attribute) else name.rsplit(".", 1)[-1]
        first = _first_arg(call, "sql") if attr in SQL_SINK_ATTRS else None
        if first is not None:
            built = [
                v for v in self._values(first, assigned) if interpolated_sql(v) and not _constants_only(v, assigned)
            ]
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
        self,
        func: ast.FunctionDef | ast.AsyncFunctionDef,
        nodes: list[ast.AST],
        assigned: dict[str, list[ast.expr]],
        taint: Taint,
    ) -> None:
        """A joined path opened with no containment check in the function: high when the joined part
        is outside data, medium when it is a parameter and the base is a fixed absolute folder."""
        params = {
            a.arg
            for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
            if a.arg not in ("self", "cls")
            and (a.annotation is None or _TEXTLIKE_ANNOTATION.search(ast.unparse(a.annotation)))
        }
        source = "\n".join(self.file.lines[func.lineno - 1 : func.end_lineno or func.lineno])
        if CONTAINMENT.search(source):
            return

        def mentions_param(expr: ast.expr) -> bool:
            return any(isinstance(n, ast.Name) and n.id in params for n in ast.walk(expr))

        # One assignment deep: `p = Path(name)` carries the caller's value as well as `name` does.
        params |= {name for name, values in assigned.items() if any(mentions_param(v) for v in values)}

        def join_parts(expr: ast.expr) -> tuple[ast.expr, list[ast.expr]] | None:
            """(base, joined parts) of a path join, or None."""
            if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
                return expr.left, [expr.right]
            if isinstance(expr, ast.Call):
                name = qualified_name(expr.func, self.aliases)
                if name in PATH_JOINERS and len(expr.args) >= 2:
                    return expr.args[0], list(expr.args[1:])
                if isinstance(expr.func, ast.Attribute) and expr.func.attr == "joinpath":
                    return expr.func.value, list(expr.args)
            if isinstance(expr, ast.JoinedStr) and expr.values:
                head = expr.values[0]
                return (head, list(expr.values[1:])) if "/" in _constant_text(head) else None
            return None

        def judge(expr: ast.expr) -> tuple[Severity, Confidence] | None:
            parts = join_parts(expr)
            if parts is None:
                return None
            base, joined = parts
            if any(taint.tainted(p) for p in joined):
                return "high", "high"
            if any(mentions_param(p) for p in joined) and self.absolute_base(base):
                return "medium", "medium"
            return None

        judged_names = {
            name: verdict for name, values in assigned.items() for v in values if (verdict := judge(v)) is not None
        }

        def joined(expr: ast.expr) -> tuple[Severity, Confidence] | None:
            while isinstance(expr, ast.Attribute | ast.Call):
                if (verdict := judge(expr)) is not None:
                    return verdict
                expr = expr.value if isinstance(expr, ast.Attribute) else expr.func
            if isinstance(expr, ast.Name) and expr.id in judged_names:
                return judged_names[expr.id]
            return judge(expr)

        for node in nodes:
            if not isinstance(node, ast.Call):
                continue
            name = qualified_name(node.func, self.aliases)
            target: ast.expr | None = None
            if name in FILE_OPENERS and node.args:
                target = node.args[0]
            elif isinstance(node.func, ast.Attribute) and node.func.attr in PATH_METHODS:
                target = node.func.value
            verdict = joined(target) if target is not None else None
            if verdict is not None:
                severity, confidence = verdict
                self.report(
                    [node], "python:path-traversal", "path-traversal", severity,
                    "Caller-supplied name joined to a directory without a containment check",
                    "A name such as `../../etc/passwd` (or an absolute path) escapes the directory. Resolve the "
                    "joined path and check it is inside the base (`path.resolve().is_relative_to(base)`), or "
                    "reduce the name to its last component.",
                    confidence,
                )  # fmt: skip

    def absolute_base(self, expr: ast.expr) -> bool:
        """Whether a path expression starts at a fixed absolute folder (`"/srv/data"`, `Path("/var")`,
        a module constant holding one, or one of those with more parts joined)."""
        if isinstance(expr, ast.Constant):
            return isinstance(expr.value, str) and bool(_ABSOLUTE_DIR.match(expr.value))
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
            return self.absolute_base(expr.left)
        if isinstance(expr, ast.Call) and expr.args:
            if qualified_name(expr.func, self.aliases) in PATH_JOINERS or (
                isinstance(expr.func, ast.Attribute) and expr.func.attr in ("expanduser", "resolve", "absolute")
            ):
                return self.absolute_base(expr.args[0])
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            return expr.func.attr in ("expanduser",) and self.absolute_base(expr.func.value)
        if isinstance(expr, ast.Name) and expr.id in self.module_constants:
            return self.absolute_base(self.module_constants[expr.id])
        return False


def python_security_issues(file: ChangedFile) -> list[Issue] | None:
    """The syntax-tree checks, or None when the file is not Python that parses (use the line rules)."""
    tree = file.python_tree
    if tree is None:
        return None
    checker = _Checker(file, tree)
    for root, nodes in scopes(tree):
        checker.check_scope(root, nodes)
    return checker.issues
