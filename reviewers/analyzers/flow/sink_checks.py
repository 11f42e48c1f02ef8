"""The sinks at a call, a return or an assignment: which argument of which call carries what to a
sink, and the hit (or, in a summary, the parameter that reaches it) that follows.

`SinkChecks` is the part of the interpreter (`engine.Interpreter`) that decides, once the values are
known, whether they reach a sink: named calls (`sinks.CALL_SINKS`), the special cases with more
logic than "this argument" (a shell list, a YAML loader, a parser's options, an SQL method on a
database handle, an LDAP search, a response's content type), and the shapes `handlers` knows
(request handler classes, HTTP clients, git's wrappers). It also says how a hit's data came: request
data (high), the program's own command line or a whole statement (low), or a value of unknown
origin where the damage alone deserves a look (low).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from reviewers.analyzers.flow import handlers as H
from reviewers.analyzers.flow import sinks as S
from reviewers.analyzers.flow.project import FunctionNode, ModuleInfo, ParamSink, Project
from reviewers.analyzers.flow.rules import LOW_WHEN_UNKNOWN
from reviewers.analyzers.flow.syntax import (
    const_text,
    database_like,
    dotted,
    fragments,
    interpolates,
    is_route,
    model_manager,
    names_secret,
)
from reviewers.analyzers.flow.values import CONSTANT, SEGMENT, SPLICED, Value, flat, of
from reviewers.analyzers.patterns import SQL_SHAPE

if TYPE_CHECKING:
    from reviewers.analyzers.flow.engine import Interpreter

    Env = dict[str, Value]

# Command-line arguments and interactive input come from the person running the program: a file
# they name or a page they would see is theirs to choose; what they splice into SQL, a shell or
# code still crosses a boundary (a wrapper script, a cron job fed by others).
LOCAL_USER_CLEARS = frozenset({"path", "redirect", "xss", "trust-boundary", "template", "ssrf"})

# A program's own command line (sys.argv, argparse's result) is its operator's: a shell command built
# from it runs as the person who could type that command themselves. A person may still look (a
# wrapper run by others, sudo), but it is no request data: at most a low-confidence note.
COMMAND_LINE = "~command-line"

COMMAND_LINE_CLEARS = LOCAL_USER_CLEARS | {COMMAND_LINE}

# What an operator could run themselves: a shell command, the Python an application server imports
# and evaluates from the `module:app` it is started with, a pickle or checkpoint file they name (a
# training script's `--checkpoint`: loading it runs what they chose), and SQL against a database the
# program opens on their behalf. SQL was left out once ("the program holds the credentials"), but on
# real history every SQL statement built from a command line was the operator's own tool on their
# own database (commix's session store, asciimatics' coverage fixer): 0 right of 3. It is listed for
# a person (low), where a wrapper run by others would matter, never posted as injection.
OPERATOR_RUNS = frozenset({"command", "code", "deserialization", "sql"})

# Sinks whose input is a statement: request data that is the whole of it (a query console's SQL
# box: Snuba's admin, django-sql-dashboard) is a feature to check the access to, not an injection.
WHOLE_STATEMENT_CLASSES = frozenset({"sql"})

_SAFE_YAML_LOADERS = frozenset({"SafeLoader", "CSafeLoader", "BaseLoader"})


@dataclass(frozen=True, slots=True)
class Hit:
    node: ast.AST
    cls: str
    confidence: Literal["high", "low"]
    origin: str  # what the data is: "request.args", "route parameter `name`", "parameter `cmd`"
    call: str  # the sink, in words
    via: str = ""  # "pkg/db.py:12" when the sink is inside a called function
    built: ast.AST | None = None  # where the sink's text was spliced together, when that is elsewhere
    command_line: bool = False  # the data is the program's own command line (see COMMAND_LINE)
    whole: bool = False  # the data is the whole statement, spliced into no text of the program's


def _not_local(value: Value) -> Value:
    """The value without what the person running the program typed: a command-line tool that runs
    the program its user names (`--python`, `git -c core.editor`) does what it is for; a web request
    choosing the program does not."""
    return of(o for o in value.origins if not (o.kind == "source" and o.cleared >= LOCAL_USER_CLEARS))


class SinkChecks:
    """The sink half of `engine.Interpreter` (see the module's docstring)."""

    if TYPE_CHECKING:  # the interpreter's state and its expression side, which `engine.Interpreter` has
        project: Project
        module: ModuleInfo
        func: FunctionNode | None
        hits: list[Hit]
        param_sinks: list[ParamSink]
        _assigned: dict[str, ast.expr]
        _built: set[str]

        def qualified(self, expr: ast.expr) -> str: ...
        def where(self, node: ast.AST) -> str: ...
        def lookup(self, name: str, env: Env) -> Value: ...
        def method_ref(self, cls_ref: str, method: str) -> str | None: ...
        def worth_a_look(self, cls: str, expr: ast.expr, value: Value) -> bool: ...

    def sink(
        self, node: ast.AST, cls: str, value: Value, call: str, *, via: str = "", low: bool = False,
        argument: ast.expr | None = None,
    ) -> None:  # fmt: skip
        """Data reaching a sink: a hit for request data (or, with `low`, for data of unknown origin),
        and, in a summary, the parameters that reach it. `argument` is the sink's argument: a local
        name assigned from spliced text points the hit at that assignment, where the defect is."""
        built = self._assigned.get(argument.id) if isinstance(argument, ast.Name) else None
        built = built if built is not None and interpolates(built) else None
        live = [o for o in value.origins if cls not in o.cleared and not (cls == "path" and SEGMENT in o.cleared)]
        sources = [o for o in live if o.kind == "source"]
        command_line = bool(sources) and all(COMMAND_LINE in o.cleared for o in sources)
        if sources and cls in OPERATOR_RUNS and command_line:
            self.hits.append(Hit(node, cls, "low", sources[0].what, call, via, built, command_line=True))
        elif sources and cls in WHOLE_STATEMENT_CLASSES and not any(SPLICED in o.cleared for o in sources):
            self.hits.append(Hit(node, cls, "low", sources[0].what, call, via, built, whole=True))
        elif sources:
            self.hits.append(Hit(node, cls, "high", sources[0].what, call, via, built, command_line=command_line))
        for o in live:
            if o.kind == "param":
                self.param_sinks.append(ParamSink(o.what, o.path, o.cleared, cls, via or self.where(node), call))
        if not sources and low and cls in LOW_WHEN_UNKNOWN and any(o.kind in ("param", "unknown") for o in live):
            param = next((o for o in live if o.kind == "param"), None)
            what = f"parameter `{param.what}`" if param is not None else "a value of unknown origin"
            self.hits.append(Hit(node, cls, "low", what, call, via, built))

    def arg(
        self, call: ast.Call, args: list[Value], kwargs: dict[str, Value], spec: S.ArgSink
    ) -> list[tuple[ast.expr, Value]]:
        out: list[tuple[ast.expr, Value]] = []
        for position in spec.positions:
            if position < len(call.args) and not isinstance(call.args[position], ast.Starred):
                out.append((call.args[position], args[position]))
        for k in call.keywords:
            if k.arg in spec.keywords:
                out.append((k.value, kwargs[k.arg]))
        return out

    def check_call_sinks(  # noqa: C901 - one branch per sink family
        self, call: ast.Call, name: str, receiver: Value | None, args: list[Value], kwargs: dict[str, Value], env: Env
    ) -> None:
        func = call.func
        attr = func.attr if isinstance(func, ast.Attribute) else ""
        spec = S.CALL_SINKS.get(name)
        if spec is not None:
            if spec.cls == "xss" and not self.html_response(call, name):
                return
            for expr, value in self.arg(call, args, kwargs, spec):
                self.sink(call, spec.cls, value, name, low=self.worth_a_look(spec.cls, expr, value), argument=expr)
            return
        if H.check_sinks(cast("Interpreter", self), call, name, receiver, args, kwargs):
            return
        if name in ("yaml.load", "yaml.load_all"):
            loader = next(
                (k.value for k in call.keywords if k.arg == "Loader"), call.args[1] if len(call.args) > 1 else None
            )
            if isinstance(loader, ast.Name) and loader.id in self._assigned:
                loader = self._assigned[loader.id]  # `loader = yaml.SafeLoader` on the line before
            if loader is None or self.qualified(loader).rsplit(".", 1)[-1] not in _SAFE_YAML_LOADERS:
                if call.args:
                    self.sink(
                        call,
                        "deserialization",
                        args[0],
                        name,
                        low=self.worth_a_look("deserialization", call.args[0], args[0]),
                    )
            return
        if name == "torch.load":
            weights = next((k.value for k in call.keywords if k.arg == "weights_only"), None)
            if not (isinstance(weights, ast.Constant) and weights.value is True) and call.args:
                self.sink(call, "deserialization", args[0], name)
            return
        if name in S.SUBPROCESS_CALLS:
            self.check_subprocess(call, name, args, kwargs)
            return
        if name in S.XML_PARSE_CALLS:
            parser = kwargs.get("parser") or (args[1] if len(args) > 1 and name.startswith("lxml") else None)
            if parser is not None and parser.cls == S.UNSAFE_PARSER and args:
                self.sink(call, "xxe", args[0], name)
            return
        if receiver is None or not attr:
            return
        receiver_name = dotted(func.value) if isinstance(func, ast.Attribute) else ""
        if attr in S.ORM_SQL_TEXT and (
            receiver.cls == S.ORM_STATEMENT or (isinstance(func, ast.Attribute) and model_manager(func.value))
        ):
            for expr, value in self.arg(call, args, kwargs, S.ORM_SQL_TEXT[attr]):
                self.sink(
                    call, "sql", value, f"{receiver_name or '…'}.{attr}", low=self.worth_a_look("sql", expr, value),
                    argument=expr,
                )  # fmt: skip
        elif attr in S.SQL_METHODS:
            pairs = self.arg(call, args, kwargs, S.ArgSink("sql", (0,), ("sql", "statement", "query", "operation")))
            for expr, value in pairs:
                text = self.text_of(expr)
                sql_text = bool(SQL_SHAPE.search(text))
                if attr in S.SQL_SHAPE_METHODS and not sql_text:
                    continue
                if not sql_text and not database_like(receiver_name, name):
                    continue  # `executor.execute(task)`: an execute that is not shown to take SQL
                self.sink(
                    call, "sql", value, f"{receiver_name or '…'}.{attr}", low=self.worth_a_look("sql", expr, value),
                    argument=expr,
                )  # fmt: skip
        elif attr in S.PATH_METHODS and isinstance(func, ast.Attribute):
            if self.may_be_path(call, attr, receiver):
                self.sink(call, "path", receiver, f"Path.{attr}")
        elif attr in S.XPATH_METHODS and call.args:
            self.sink(call, "xpath", args[0], f"{receiver_name or '…'}.xpath")
        elif (
            attr in S.ELEMENTPATH_METHODS
            and call.args
            and any(c in self.text_of(call.args[0]) for c in ("[@", "//", "/"))
        ):
            if not name.startswith(("re.", "str.")):
                self.sink(call, "xpath", args[0], f"{receiver_name or '…'}.{attr}")
        elif attr in S.LDAP_METHODS:
            self.check_ldap(call, name, receiver_name, args, kwargs)
        elif attr in S.TEMPLATE_METHODS and call.args:
            self.sink(call, "template", args[0], f"{receiver_name or '…'}.from_string")
        elif attr in ("parse", "feed", "parseString") and receiver.cls == S.UNSAFE_PARSER and call.args:
            self.sink(call, "xxe", args[0], f"{receiver_name}.{attr}")
        elif attr in ("update", "setdefault") and (receiver_name.endswith("session")):
            self.sink(call, "trust-boundary", flat(*args, *kwargs.values()), f"{receiver_name}.{attr}")
        elif attr == "set_cookie":
            value = args[1] if len(args) > 1 else kwargs.get("value", CONSTANT)
            key = const_text(call.args[0]) if call.args else None
            if key and names_secret(key):
                self.check_secret_store(key, value, call)

    def check_subprocess(self, call: ast.Call, name: str, args: list[Value], kwargs: dict[str, Value]) -> None:
        shell = next((k.value for k in call.keywords if k.arg == "shell"), None)
        if name == "asyncio.create_subprocess_exec" or name.startswith("os.spawn") or name.startswith("os.posix"):
            argv = args[1:] if name.startswith("os.spawn") else args
            if argv:
                self.sink(call, "command", _not_local(argv[0]), name)
            return
        command_expr = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "args"), None)
        if command_expr is None:
            return
        command = args[0] if call.args else kwargs["args"]
        if isinstance(shell, ast.Constant) and shell.value is True:
            self.sink(
                call, "command", command, f"{name}(shell=True)",
                low=self.worth_a_look("command", command_expr, command), argument=command_expr,
            )  # fmt: skip
            return
        if command.seq is not None:
            parts = command.seq
            words_ = self.list_words(command_expr)
            if len(words_) >= 2 and words_[0] in S.SHELLS and words_[1] in ("-c", "/c", "-Command", "-lc"):
                # later items are the script's positional parameters ($0, $1), not shell text
                script = parts[2] if len(parts) > 2 else CONSTANT
                self.sink(call, "command", script, f'{name}(["{words_[0]}", "{words_[1]}", …])')
            elif parts and not any(k.arg == "executable" for k in call.keywords):
                self.sink(call, "command", _not_local(parts[0]), f"{name} (the program)")
            return
        if not any(k.arg == "executable" for k in call.keywords):
            self.sink(call, "command", _not_local(command), name)

    def list_words(self, expr: ast.expr) -> list[str]:
        """The literal words at the start of a command list (followed through one local name)."""
        if isinstance(expr, ast.Name):
            source = self._assigned.get(expr.id)
            return fragments(source).split() if source is not None else []
        if isinstance(expr, ast.List | ast.Tuple):
            out: list[str] = []
            for e in expr.elts:
                text = const_text(e)
                if text is None:
                    break
                out.append(text)
            return out
        return []

    def check_ldap(
        self, call: ast.Call, name: str, receiver_name: str, args: list[Value], kwargs: dict[str, Value]
    ) -> None:
        if name.startswith(("re.", "regex.")) or receiver_name in ("re", "regex"):
            return
        scope_style = len(call.args) >= 3 or (len(call.args) == 2 and "SCOPE" in self.qualified(call.args[1]))
        filter_pos = 2 if scope_style else 1
        filter_expr = (
            call.args[filter_pos]
            if len(call.args) > filter_pos
            else next((k.value for k in call.keywords if k.arg in ("filterstr", "search_filter")), None)
        )
        if filter_expr is None:
            return
        text = self.text_of(filter_expr)
        looks_ldap = ("(" in text and "=" in text) or "ldap" in receiver_name.lower() or "conn" in receiver_name.lower()
        if scope_style:
            looks_ldap = looks_ldap or "SCOPE" in self.qualified(call.args[1])
        if not looks_ldap:
            return
        filter_value = (
            args[filter_pos]
            if len(call.args) > filter_pos
            else next(kwargs[k] for k in ("filterstr", "search_filter") if k in kwargs)
        )
        self.sink(call, "ldap", filter_value, f"{receiver_name or '…'}.{name.rsplit('.', 1)[-1]}")
        if call.args:
            self.sink(call, "ldap", args[0], f"{receiver_name or '…'}.{name.rsplit('.', 1)[-1]} (base DN)")

    def html_response(self, call: ast.Call, name: str) -> bool:
        """Whether a response call's content type is HTML (or left to a default that is)."""
        for k in call.keywords:
            if k.arg == "headers":
                return False  # the headers may set the content type: not known to be HTML
            if k.arg in ("mimetype", "content_type", "media_type"):
                text = const_text(k.value)
                return text is not None and "html" in text
        if name.endswith("HTMLResponse"):
            return True
        # aiohttp's and Starlette's plain responses default to text/plain or no type at all
        return not name.startswith(("aiohttp", "starlette", "fastapi", "web."))

    def check_return(self, stmt: ast.Return, expr: ast.expr, value: Value) -> None:
        if self.func is None or not is_route(self.func) or not self.module.frameworks & {"flask", "quart", "bottle"}:
            return
        body = expr.elts[0] if isinstance(expr, ast.Tuple) and expr.elts else expr
        part = value.seq[0] if isinstance(expr, ast.Tuple) and value.seq else value
        if isinstance(body, ast.Name) and body.id not in self._built:
            # a bare name: text from the query, a form or a header is returned as HTML; a JSON body
            # comes back as a dict, which Flask serialises
            part = of(o for o in part.origins if not o.what.endswith(("json", "get_json", "files")))
        elif not (isinstance(body, ast.JoinedStr | ast.BinOp) or interpolates(body) or self.builds_text(body)):
            return
        self.sink(stmt, "xss", part, "the route's response body")

    def may_be_path(self, call: ast.Call, attr: str, receiver: Value) -> bool:
        """Whether a path method's receiver may be a path. A name that other APIs share (`exists`,
        `stat`) is no path method on a value known to be something else: a query builder's
        statement, an instance of one of the project's classes that defines the method, or a call
        with a positional argument (pathlib's take none: `cache.exists(key)`). A receiver of
        unknown type still counts."""
        if attr not in S.SHARED_PATH_METHODS:
            return True
        if call.args or receiver.cls == S.ORM_STATEMENT:
            return False
        return not (receiver.cls and "::" in receiver.cls and self.method_ref(receiver.cls, attr) is not None)

    def builds_text(self, expr: ast.expr) -> bool:
        """Whether a returned call is to one of the repository's functions (which builds the body)."""
        if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)):
            return False
        return "::" in (self.lookup(expr.func.id, {}).callable_ref or "")

    def check_secret_store(self, name: str, value: Value, node: ast.AST) -> None:
        if names_secret(name) and any(o.kind == "weakrand" for o in value.origins):
            origin = next(o for o in value.origins if o.kind == "weakrand")
            self.hits.append(Hit(node, "weak-random", "high", origin.what, f"`{name}`"))

    def text_of(self, expr: ast.expr) -> str:
        if isinstance(expr, ast.Name):
            source = self._assigned.get(expr.id)
            return fragments(source) if source is not None else ""
        return fragments(expr)
