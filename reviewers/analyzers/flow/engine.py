"""A flow-sensitive interpreter of one Python function over abstract values (see `values`).

Statements run in order over an environment of local names; an `if` runs both branches with what
its condition proves (`guards`) and joins them, and a branch that leaves (return, raise, continue,
abort()) contributes nothing after the `if` — which is how a guard dominates the sink after it.
Loops run their body twice. A call to a function of the repository applies its summary
(parameter → return, parameter → sink), computed by the same interpreter with parameters as
symbols and memoised in the `Project`; recursion gets a conservative summary, and every budget
cut is named in `Project.unfinished`. Each interpreter counts the statements and expressions it
runs (`steps`); what the summaries ran is the project's step budget, the same on every machine.

Where the values reach a sink is decided in `sink_checks` (the `SinkChecks` half of the
interpreter: named sinks, their special cases, and how a hit's data came), with the shapes of
`handlers`; what is read off the syntax alone (dotted names, literal text, route decorators) is in
`syntax`.

Two modes: *summary* (record which parameters reach which sinks and what comes back) and *report*
(also record `Hit`s: request data reaching a sink, or a value of unknown origin reaching a sink
where that alone deserves a person's look).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from reviewers.analyzers.flow import guards
from reviewers.analyzers.flow import handlers as H
from reviewers.analyzers.flow import sinks as S
from reviewers.analyzers.flow.project import FunctionNode, ModuleInfo, ParamSink, Project, Summary, statements
from reviewers.analyzers.flow.rules import (
    ABORTS,
    CLEAN_ANNOTATIONS,
    CLEAN_CALLS,
    CLEAN_METHODS,
    FRAMEWORK_DEFAULTS,
    FRAMEWORK_PARAMS,
    LOW_WHEN_UNKNOWN,
    NORMALISERS,
    PATH_JOINS,
    PATH_NAME_ATTRIBUTES,
    REQUEST_ANNOTATIONS,
    REQUEST_NAMES,
    REQUEST_PARTS,
    REQUEST_PROXIES,
    SANITISERS,
    SOURCE_ATTRIBUTES,
    SOURCE_CALLS,
    WEAK_RANDOM,
)
from reviewers.analyzers.flow.sink_checks import (
    COMMAND_LINE_CLEARS,
    LOCAL_USER_CLEARS,
    SinkChecks,
)
from reviewers.analyzers.flow.sink_checks import Hit as Hit  # the hits' type, for python_security
from reviewers.analyzers.flow.syntax import (
    NUMBER_CONVERTERS,
    SEGMENT_CONVERTERS,
    const_text,
    database_like,
    dotted,
    fragments,
    interpolates,
    is_route,
    model_manager,
    names_secret,
    route_converters,
)
from reviewers.analyzers.flow.values import (
    CONSTANT,
    NORMALISED,
    SEGMENT,
    SPLICED,
    UNKNOWN,
    Origin,
    Value,
    appended,
    clear,
    extend_path,
    flat,
    join,
    mapping,
    normalised,
    of,
    sequence,
    with_item,
    without_segment,
)
from reviewers.analyzers.guard_removal.validators import judged_classes
from reviewers.analyzers.patterns import SQL_SHAPE

Mode = Literal["summary", "report"]
Env = dict[str, Value]
MAX_STATEMENTS = 4000  # statements run per function (loops run twice): a generated giant stops here
MAX_CALL_DEPTH = 6  # summaries computed inside summaries
_BUILTINS = frozenset(dir(builtins))
_MUTATORS = frozenset({"append", "add", "insert", "extend", "update", "setdefault", "appendleft", "put", "push"})


URL_CLASSES = frozenset({"redirect", "ssrf"})
_FIXED_ORIGIN = re.compile(r"^(?:/(?!/)|https?://[^/{}%]+/|[^:]*\?)")


def _fixed_origin_text(text: str) -> bool:
    """Whether text that starts a URL fixes its scheme and host: a local path, a full origin with a
    path after it, or anything up to a query string."""
    return bool(_FIXED_ORIGIN.match(text))


def _fixes_origin(expr: ast.expr, value: Value) -> bool:
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str) and _fixed_origin_text(expr.value)
    if isinstance(expr, ast.FormattedValue):
        expr = expr.value
    # a clean computed start (url_for(...), a base URL from settings) fixes the origin too
    chosen_outside = any(o.kind == "source" and "redirect" not in o.cleared for o in value.origins)
    return not chosen_outside and isinstance(expr, ast.Call | ast.Name | ast.Attribute)


_READS = frozenset({"read", "readline", "readlines"})
_FILE_OPENERS = frozenset(
    {"open", "io.open", "codecs.open", "aiofiles.open", "gzip.open", "bz2.open", "lzma.open", "os.fdopen"}
)
# Calls that run a program: what it prints is the program's output, of unknown origin like a file's
# text, not the arguments that started it (a view that returns `git log`'s output for a ref the
# request named reflects git's text, not the request's).
_PROCESS_RUNNERS = frozenset(
    {"subprocess.check_output", "subprocess.run", "subprocess.getoutput", "subprocess.getstatusoutput",
     "subprocess.Popen", "os.popen", "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell"}
)  # fmt: skip


def _statement_base(call: ast.Call, name: str, receiver: Value | None, args: list[Value]) -> Value | None:
    """What a query-builder call's statement starts from, or None when the call builds none: nothing
    from a builder function or a database handle (`select(User)`, `db.select(User)`), the statement
    a chained call is made on (`.filter_by(...)`), the manager a model's `.objects`/`.query` is."""
    func = call.func
    if name in S.ORM_STATEMENT_CALLS:
        return CONSTANT
    if receiver is not None and receiver.cls == S.ORM_STATEMENT:
        return receiver
    if not isinstance(func, ast.Attribute):
        return None
    if model_manager(func.value) and receiver is not None:
        return flat(receiver)
    handle = dotted(func.value)
    database_handle = func.attr in S.ORM_HANDLE_METHODS and handle and database_like(handle, name)
    return CONSTANT if database_handle and _names_models(call, args) else None


def _names_models(call: ast.Call, args: list[Value]) -> bool:
    """Whether a call's arguments read as what a query builder starts from (`db.select(User)`,
    `session.query(User.id)`): models, tables or columns, named and carrying no data (a name the
    analysis cannot see counts: a model from a library), not literals, so that a list's or a
    dict's `insert(0, x)` / `update(data)` on a name like `c` or `session` stays what it is."""
    return (
        bool(call.args)
        and not call.keywords
        and all(
            isinstance(a, ast.Name | ast.Attribute) and all(o.kind == "unknown" for o in v.origins)
            for a, v in zip(call.args, args, strict=False)
        )
    )


def _ends_a_segment(expr: ast.expr) -> bool:
    """Whether text appended after a path segment keeps it one component: a literal without a separator."""
    text = const_text(expr)
    return text is not None and "/" not in text and "\\" not in text


_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdrifxXeEgGc]|%%")
_SUBQUERY_BEFORE = re.compile(r"\b(?:FROM|JOIN)\s*\(\s*$", re.I)
_SUBQUERY_AFTER = re.compile(r"^\s*\)")


def statement_slots(text: str) -> frozenset[int]:
    """The `%` placeholders of an SQL template that hold a whole statement: a subquery's place,
    `SELECT * FROM (%s) AS _ ORDER BY %d` (a query console sorting what its user typed). What fills
    such a place is a statement taken whole, not a value spliced into the program's statement; a
    value's place (`WHERE id IN (%s)`, `name = '%s'`) is not one."""
    slots: set[int] = set()
    index = 0
    for match in _PLACEHOLDER.finditer(text):
        if match.group(0) == "%%":
            continue
        if _SUBQUERY_BEFORE.search(text[: match.start()]) and _SUBQUERY_AFTER.match(text[match.end() :]):
            slots.add(index)
        index += 1
    return frozenset(slots)


def spliced_except(value: Value, slots: frozenset[int]) -> Value:
    """The `%` operand marked as spliced (`SPLICED`), but for the parts that fill a statement's place."""
    if not slots:
        return clear(value, (SPLICED,))
    if value.seq is not None:
        return sequence(part if i in slots else clear(part, (SPLICED,)) for i, part in enumerate(value.seq))
    return value if slots == {0} else clear(value, (SPLICED,))


def attribute(value: Value, attr: str) -> Value:
    """What `value.attr` carries."""
    member = H.entry_attribute(value, attr)
    if member is not None:
        return member
    known = value.field(attr)
    if known is not None:
        return known
    origins: set[Origin] = set()
    for o in value.origins:
        if attr in _READS and o.kind == "source" and o.cleared >= LOCAL_USER_CLEARS:
            origins.add(Origin("unknown", f"{o.what}.{attr}()"))
        elif o.kind == "request":
            if attr in REQUEST_PARTS:
                origins.add(Origin("source", f"request.{attr}", line=o.line))
        elif o.kind == "param":
            origins.add(extend_path(o, attr))
        else:
            origins.add(o)
    out = of(origins)
    if attr in PATH_NAME_ATTRIBUTES:
        out = clear(out, {"path"})
    return out


def resolve_path(value: Value, path: Sequence[str]) -> Value:
    for step in path:
        value = attribute(value, step)
    return value


def substitute(value: Value, binding: dict[str, Value]) -> Value:
    """A summary's symbolic value with the caller's arguments put in for the parameters."""
    parts: list[Value] = []
    for o in value.origins:
        if o.kind == "param":
            actual = binding.get(o.what)
            if actual is not None:
                parts.append(clear(resolve_path(actual, o.path), o.cleared))
        else:
            parts.append(of({o}))
    out = flat(*parts)
    if value.seq is not None:
        out = sequence(substitute(v, binding) for v in value.seq)
    elif value.items is not None:
        out = mapping((k, substitute(v, binding)) for k, v in value.items)
    if value.fields is not None:
        out = replace(out, fields=tuple((k, substitute(v, binding)) for k, v in value.fields), cls=value.cls)
    elif value.cls is not None:
        out = replace(out, cls=value.cls)
    if value.normalised:
        out = replace(out, normalised=True)
    return out


def join_envs(envs: Iterable[Env]) -> Env:
    alive = list(envs)
    if len(alive) == 1:
        return dict(alive[0])
    keys: dict[str, None] = {}
    for env in alive:
        keys.update(dict.fromkeys(env))
    return {k: join(e[k] for e in alive if k in e) for k in keys}


@dataclass
class Interpreter(SinkChecks):
    project: Project
    module: ModuleInfo
    func: FunctionNode | None  # None: the module's own statements
    mode: Mode
    bindings: Env = field(default_factory=dict)
    class_name: str | None = None
    depth: int = 0
    hits: list[Hit] = field(default_factory=list)
    param_sinks: list[ParamSink] = field(default_factory=list)
    returns: list[Value] = field(default_factory=list)
    fields: dict[str, Value] = field(default_factory=dict)
    complete: bool = True
    statements: int = 0
    steps: int = 0  # statements and expressions run: the work the project's step budget counts
    _assigned: dict[str, ast.expr] = field(default_factory=dict)  # name → the expression it was last built from
    _built: set[str] = field(default_factory=set)  # names assigned from text with values spliced in

    # --- driving ---------------------------------------------------------------------------------

    def run(self) -> Env:
        body = self.func.body if self.func is not None else self.module.tree.body
        env, _ = self.block(body, dict(self.bindings))
        return env

    def qualified(self, expr: ast.expr) -> str:
        name = dotted(expr)
        if not name:
            return ""
        head, _, rest = name.partition(".")
        resolved = self.module.aliases.get(head, head)
        return f"{resolved}.{rest}" if rest else resolved

    def where(self, node: ast.AST) -> str:
        return f"{self.module.path}:{getattr(node, 'lineno', 0)}"

    # --- statements ------------------------------------------------------------------------------

    def block(self, stmts: Sequence[ast.stmt], env: Env) -> tuple[Env, bool]:
        """Run statements; (environment after, whether every path left the block)."""
        for stmt in stmts:
            self.statements += 1
            self.steps += 1
            if self.statements > MAX_STATEMENTS:
                self.complete = False
                return env, False
            env, left = self.statement(stmt, env)
            if left:
                return env, True
        return env, False

    def statement(self, stmt: ast.stmt, env: Env) -> tuple[Env, bool]:  # noqa: C901 - one case per statement kind
        if isinstance(stmt, ast.Assign):
            value = self.eval(stmt.value, env)
            for target in stmt.targets:
                self.assign(target, value, env, stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self.assign(stmt.target, self.eval(stmt.value, env), env, stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            current = self.eval(stmt.target, env) if isinstance(stmt.target, ast.Name) else CONSTANT
            added = self.eval(stmt.value, env)
            value = flat(current, added)
            if current.seq is not None:  # `args += x` as `args = args + x`: the items before keep their places
                value = sequence((*current.seq, *(added.seq if added.seq is not None else (flat(added),))))
            # a list keeps the words it started with (`["sh", "-c"]`), where a string is rebuilt
            self.assign(stmt.target, value, env, None if current.seq is not None else stmt.value)
        elif isinstance(stmt, ast.Expr):
            self.eval(stmt.value, env)
            call = stmt.value.value if isinstance(stmt.value, ast.Await) else stmt.value
            if isinstance(call, ast.Call) and self.qualified(call.func) in ABORTS:
                return env, True
        elif isinstance(stmt, ast.Return):
            value = self.eval(stmt.value, env) if stmt.value is not None else CONSTANT
            self.returns.append(value)
            if stmt.value is not None:
                self.check_return(stmt, stmt.value, value)
            return env, True
        elif isinstance(stmt, ast.Raise):
            if stmt.exc is not None:
                self.eval(stmt.exc, env)
            return env, True
        elif isinstance(stmt, ast.Continue | ast.Break):
            return env, True
        elif isinstance(stmt, ast.If):
            return self.branch(stmt.test, stmt.body, stmt.orelse, env)
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            element = self.element(self.eval(stmt.iter, env))
            loop_ends: list[Env] = [dict(env)]
            scope: Env = dict(env)
            for _ in range(2):
                self.assign(stmt.target, element, scope, None)
                scope, _left = self.block(stmt.body, scope)
                loop_ends.append(scope)
                scope = dict(scope)
            env = join_envs(loop_ends)
            env, _ = self.block(stmt.orelse, env)
        elif isinstance(stmt, ast.While):
            while_ends: list[Env] = [dict(env)]
            scope = self.refined(stmt.test, True, env)
            for _ in range(2):
                scope, _left = self.block(stmt.body, scope)
                while_ends.append(scope)
                scope = self.refined(stmt.test, True, dict(scope))
            env = join_envs(while_ends)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                entered = self.eval(item.context_expr, env)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, entered, env, None)
            return self.block(stmt.body, env)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            body_env, body_left = self.block(stmt.body, dict(env))
            try_ends: list[Env] = []
            if not body_left:
                else_env, else_left = self.block(stmt.orelse, body_env)
                if not else_left:
                    try_ends.append(else_env)
            for handler in stmt.handlers:
                start = join_envs([env, body_env])
                if handler.name:
                    start[handler.name] = CONSTANT
                handler_env, handler_left = self.block(handler.body, start)
                if not handler_left:
                    try_ends.append(handler_env)
            if not try_ends:
                final_env, _ = self.block(stmt.finalbody, join_envs([env, body_env]))
                return final_env, True
            return self.block(stmt.finalbody, join_envs(try_ends))
        elif isinstance(stmt, ast.Assert):
            env = self.refined(self.checked_by_name(stmt.test), True, env)
        elif isinstance(stmt, ast.Match):
            subject = self.eval(stmt.subject, env)
            case_ends: list[Env] = []
            for case in stmt.cases:
                case_env = dict(env)
                for node in ast.walk(case.pattern):
                    if isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
                        case_env[node.name] = subject
                case_env, left = self.block(case.body, case_env)
                if not left:
                    case_ends.append(case_env)
            env = join_envs([env, *case_ends])
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            env[stmt.name] = Value(callable_ref=f"{self.module.path}::{stmt.name}") if self.func is None else CONSTANT
        elif isinstance(stmt, ast.Delete | ast.Pass | ast.Global | ast.Nonlocal | ast.Import | ast.ImportFrom):
            pass
        return env, False

    def branch(
        self, test: ast.expr, body: Sequence[ast.stmt], orelse: Sequence[ast.stmt], env: Env
    ) -> tuple[Env, bool]:
        self.eval(test, env)
        test = self.checked_by_name(test)
        true_env, true_left = self.block(body, self.refined(test, True, env))
        false_env, false_left = self.block(orelse, self.refined(test, False, env))
        alive = [e for e, left in ((true_env, true_left), (false_env, false_left)) if not left]
        if not alive:
            return join_envs([true_env, false_env]), True
        return join_envs(alive), False

    def refined(self, test: ast.expr, positive: bool, env: Env) -> Env:
        proven = guards.facts(
            test,
            positive,
            is_const=lambda e: self.eval(e, env).constant,
            qualified=self.qualified,
            validator=lambda call: judged_classes(self.project, self.module, call.func),
        )
        if not proven:
            return dict(env)
        out = dict(env)
        for name, classes in proven.items():
            value = out.get(name) or self.lookup(name, out)
            if guards.PREFIX in classes:
                ok = value.normalised or all(NORMALISED in o.cleared for o in value.origins)
                classes = (classes - {guards.PREFIX}) | ({"path"} if ok else set())
            out[name] = clear(value, classes)
        return out

    def checked_by_name(self, test: ast.expr) -> ast.expr:
        """A condition that tests a name holding a check's result (`ok = is_safe_url(x)` then `if ok:`,
        `x if ok else "/"`) read as that check, so the branch it guards knows what the check proved."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.checked_by_name(test.operand)
            return test if inner is test.operand else ast.UnaryOp(op=ast.Not(), operand=inner)
        if isinstance(test, ast.BoolOp):
            values = [self.checked_by_name(v) for v in test.values]
            return test if values == test.values else ast.BoolOp(op=test.op, values=values)
        if isinstance(test, ast.Name):
            check = self._assigned.get(test.id)
            if isinstance(check, ast.Call | ast.Compare | ast.UnaryOp) and any(
                guards.facts(check, positive, is_const=lambda _: False, qualified=self.qualified)
                for positive in (True, False)
            ):
                return check  # a check's result, not a value computed from the data
        return test

    def assign(self, target: ast.expr, value: Value, env: Env, source: ast.expr | None) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
            if source is not None:
                self._assigned[target.id] = source
                if interpolates(source):
                    self._built.add(target.id)
                else:
                    self._built.discard(target.id)
            self.check_secret_store(target.id, value, target)
        elif isinstance(target, ast.Tuple | ast.List):
            elts = target.elts
            if (
                value.seq is not None
                and len(value.seq) == len(elts)
                and not any(isinstance(e, ast.Starred) for e in elts)
            ):
                for elt, part in zip(elts, value.seq, strict=True):
                    self.assign(elt, part, env, None)
            else:
                for elt in elts:
                    self.assign(elt.value if isinstance(elt, ast.Starred) else elt, flat(value), env, None)
        elif isinstance(target, ast.Subscript):
            self.assign_item(target, value, env)
        elif isinstance(target, ast.Attribute):
            base = target.value
            if isinstance(base, ast.Name) and self.func is not None and base.id == self._self_name():
                self.fields[target.attr] = (
                    join([self.fields[target.attr], value]) if target.attr in self.fields else value
                )
            self.check_secret_store(target.attr, value, target)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, value, env, source)

    def assign_item(self, target: ast.Subscript, value: Value, env: Env) -> None:
        key = self.const_key(target.slice, env)
        base = target.value
        base_name = self.qualified(base)
        if base_name.endswith("session") or base_name.endswith(".session"):
            self.sink(target, "trust-boundary", value, f"{base_name}[...]")
        if base_name.endswith("headers") and isinstance(key, str) and key.lower() == "location":
            self.sink(target, "redirect", value, "a Location header")
        if isinstance(key, str):
            self.check_secret_store(key, value, target)
        if isinstance(base, ast.Name):
            env[base.id] = with_item(self.eval(base, env), key, value)
        elif isinstance(base, ast.Subscript) and isinstance(base.value, ast.Name):
            # cfg["section"]["key"] = v: keep it under (section, key) like ConfigParser.set does
            outer = self.const_key(base.slice, env)
            inner_key = (outer, key) if outer is not None and key is not None else None
            env[base.value.id] = with_item(self.eval(base.value, env), inner_key, value)

    def const_key(self, expr: ast.expr, env: Env) -> Hashable | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str | int | bytes):
            return expr.value
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and isinstance(expr.operand, ast.Constant):
            operand = expr.operand.value
            return -operand if isinstance(operand, int) else None
        return None

    def self_name(self) -> str | None:
        """The name of a method's `self` parameter (None outside a class's method)."""
        return self._self_name()

    def _self_name(self) -> str | None:
        if self.func is None or self.class_name is None:
            return None
        params = [*self.func.args.posonlyargs, *self.func.args.args]
        return params[0].arg if params else None

    # --- expressions -----------------------------------------------------------------------------

    def lookup(self, name: str, env: Env) -> Value:
        if name in env:
            return env[name]
        module_globals = self.module.globals or {}
        if name in module_globals:
            return module_globals[name]
        if name in self.module.aliases:
            if self.module.aliases[name] in REQUEST_PROXIES:  # flask's request proxy, passed around as a value
                return of({Origin("request", self.module.aliases[name])})
            return self.imported(self.module.aliases[name])
        if name in self.module.functions or name in self.module.classes:
            return Value(callable_ref=f"{self.module.path}::{name}")
        if name in _BUILTINS or name.startswith("__") or name.isupper():
            return CONSTANT
        return UNKNOWN

    def imported(self, dotted_name: str) -> Value:
        """The value an imported name stands for: a repository function or class, another module's
        global (its constant, or what it was built from), else a library name (constant)."""
        found = self.project.resolve(dotted_name, self.module.path)
        if found is None:
            return Value(callable_ref=f"lib:{dotted_name}")
        info, rest = found
        if not rest:
            return Value(callable_ref=f"mod:{info.path}")
        head = rest.split(".")[0]
        if head in info.functions or head in info.classes:
            return Value(callable_ref=f"{info.path}::{head}")
        module_globals = module_env(self.project, info, self.depth + 1)
        if head in module_globals:
            return module_globals[head]
        if head in info.aliases and info.aliases[head] != dotted_name:
            return Interpreter(self.project, info, None, "summary", depth=self.depth + 1).imported(info.aliases[head])
        return CONSTANT if head.isupper() else UNKNOWN

    def eval(self, expr: ast.expr, env: Env) -> Value:  # noqa: C901 - one case per expression kind
        self.steps += 1
        if isinstance(expr, ast.Constant):
            return CONSTANT
        if isinstance(expr, ast.Name):
            return self.lookup(expr.id, env)
        if isinstance(expr, ast.Attribute):
            return self.eval_attribute(expr, env)
        if isinstance(expr, ast.Subscript):
            container = self.eval(expr.value, env)
            self.eval(expr.slice, env)
            key = self.const_key(expr.slice, env)
            if key is not None and container.items is not None and (item := container.item(key)) is not None:
                return item
            if isinstance(key, int) and container.seq is not None and -len(container.seq) <= key < len(container.seq):
                return container.seq[key]
            if container.items is not None and key is not None:
                return CONSTANT  # every key of a known mapping is known: this one is not there
            if isinstance(expr.value, ast.Subscript) and key is not None:
                # cfg["section"]["option"] on a ConfigParser that was .set(section, option, value)
                root = self.eval(expr.value.value, env)
                outer = self.const_key(expr.value.slice, env)
                if root.items is not None and outer is not None:
                    return root.item((outer, key)) or CONSTANT
            return flat(container)
        if isinstance(expr, ast.Call):
            return self.eval_call(expr, env)
        if isinstance(expr, ast.Await):
            return self.eval(expr.value, env)
        if isinstance(expr, ast.JoinedStr):
            return self.built_text(expr.values, env)
        if isinstance(expr, ast.FormattedValue):
            return self.eval(expr.value, env)
        if isinstance(expr, ast.BinOp):
            left, right = self.eval(expr.left, env), self.eval(expr.right, env)
            if isinstance(expr.op, ast.Add) and left.seq is not None:
                return sequence((*left.seq, *(right.seq if right.seq is not None else (flat(right),))))
            if isinstance(expr.op, ast.Add | ast.Mod) and fragments(expr):
                slots = statement_slots(const_text(expr.left) or "") if isinstance(expr.op, ast.Mod) else frozenset()
                left, right = clear(left, (SPLICED,)), spliced_except(right, slots)
            if isinstance(expr.op, ast.Add) and _fixes_origin(expr.left, left):
                return flat(left, clear(right, URL_CLASSES))
            if isinstance(expr.op, ast.Mod) and (text := const_text(expr.left)) is not None:
                if _fixed_origin_text(text.split("%", 1)[0]):
                    return flat(left, clear(right, URL_CLASSES))
            if isinstance(expr.op, ast.Div):  # `base / name`: the right side is the path's last component
                return flat(without_segment(left), right)
            if isinstance(expr.op, ast.Add):  # `name + ".txt"` stays one component, `name + "/x"` does not
                return flat(left if _ends_a_segment(expr.right) else without_segment(left), right)
            return flat(without_segment(left), without_segment(right))
        if isinstance(expr, ast.UnaryOp):
            value = self.eval(expr.operand, env)
            return CONSTANT if isinstance(expr.op, ast.Not) else value
        if isinstance(expr, ast.BoolOp):
            return join(self.eval(v, env) for v in expr.values)
        if isinstance(expr, ast.Compare):
            for part in (expr.left, *expr.comparators):
                self.eval(part, env)
            return CONSTANT
        if isinstance(expr, ast.IfExp):
            self.eval(expr.test, env)
            test = self.checked_by_name(expr.test)
            return join([self.eval(expr.body, self.refined(test, True, env)),
                         self.eval(expr.orelse, self.refined(test, False, env))])  # fmt: skip
        if isinstance(expr, ast.List | ast.Tuple | ast.Set):
            # a starred part counts as one item: what comes before it keeps its place (argv[0])
            return sequence(
                flat(self.eval(e.value, env)) if isinstance(e, ast.Starred) else self.eval(e, env) for e in expr.elts
            )
        if isinstance(expr, ast.Dict):
            entries: list[tuple[Hashable, Value]] = []
            loose: list[Value] = []
            for k, v in zip(expr.keys, expr.values, strict=True):
                value = self.eval(v, env)
                key = self.const_key(k, env) if k is not None else None
                if key is None:
                    loose.append(value)
                else:
                    entries.append((key, value))
                    if isinstance(key, str):
                        self.check_secret_store(key, value, v)
            return mapping(entries) if not loose else flat(*(v for _, v in entries), *loose)
        if isinstance(expr, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            inner = dict(env)
            for generator in expr.generators:
                self.assign(generator.target, self.element(self.eval(generator.iter, inner)), inner, None)
                for test in generator.ifs:
                    inner = self.refined(test, True, inner)
            if isinstance(expr, ast.DictComp):
                return flat(self.eval(expr.value, inner))
            return flat(self.eval(expr.elt, inner))
        if isinstance(expr, ast.NamedExpr):
            value = self.eval(expr.value, env)
            self.assign(expr.target, value, env, expr.value)
            return value
        if isinstance(expr, ast.Starred):
            return flat(self.eval(expr.value, env))
        if isinstance(expr, ast.Slice):
            for bound in (expr.lower, expr.upper, expr.step):
                if bound is not None:
                    self.eval(bound, env)
            return CONSTANT
        return CONSTANT

    def built_text(self, parts: Sequence[ast.expr], env: Env) -> Value:
        """An f-string's value; parts after a leading fixed origin ("/path?", a clean URL) cannot
        choose where a redirect or a request goes."""
        values = [self.eval(v, env) for v in parts]
        if any(isinstance(v, ast.Constant) and v.value for v in parts):
            values = [clear(v, (SPLICED,)) for v in values]
        # a segment followed by more than a suffix (".txt") is no longer the path's last component
        values = [v if all(map(_ends_a_segment, parts[i + 1 :])) else without_segment(v) for i, v in enumerate(values)]
        if parts and _fixes_origin(parts[0], values[0]):
            return flat(values[0], *(clear(v, URL_CLASSES) for v in values[1:]))
        return flat(*values)

    def element(self, iterable: Value) -> Value:
        if iterable.seq is not None:
            return join(iterable.seq) if iterable.seq else CONSTANT
        if iterable.items is not None:
            return CONSTANT  # iterating a dict gives its constant keys
        return flat(iterable)

    def eval_attribute(self, expr: ast.Attribute, env: Env) -> Value:
        name = self.qualified(expr)
        if name in SOURCE_ATTRIBUTES:
            return of({Origin("source", name, cleared=COMMAND_LINE_CLEARS, line=expr.lineno)})
        handler = H.self_attribute(self, expr) or H.streamlit_attribute(name, expr.lineno)
        if handler is not None:
            return handler
        owner = dotted(expr.value)
        if expr.attr in REQUEST_PARTS and (
            (self.module.frameworks and (owner in REQUEST_NAMES or owner.endswith(".request")))
            or self.qualified(expr.value) in REQUEST_PROXIES
        ):
            return of({Origin("source", f"request.{expr.attr}", line=expr.lineno)})
        base = self.eval(expr.value, env)
        if base.callable_ref is not None and base.callable_ref.startswith(("mod:", "lib:")):
            prefix, _, target = base.callable_ref.partition(":")
            if prefix == "mod":
                info = self.project.module_at(target)
                if info is not None:
                    if expr.attr in info.functions or expr.attr in info.classes:
                        return Value(callable_ref=f"{info.path}::{expr.attr}")
                    module_globals = module_env(self.project, info, self.depth + 1)
                    if expr.attr in module_globals:
                        return module_globals[expr.attr]
                return CONSTANT if expr.attr.isupper() else UNKNOWN
            return Value(callable_ref=f"lib:{target}.{expr.attr}")
        return attribute(base, expr.attr)

    # --- calls -----------------------------------------------------------------------------------

    def eval_call(self, call: ast.Call, env: Env) -> Value:  # noqa: C901 - the table of call kinds
        func = call.func
        name = self.qualified(func)
        receiver = self.eval(func.value, env) if isinstance(func, ast.Attribute) else None
        callee = self.eval(func, env) if isinstance(func, ast.Name) else None
        args = [self.eval(a, env) for a in call.args]
        kwargs: dict[str, Value] = {}
        for k in call.keywords:
            value = self.eval(k.value, env)
            kwargs[k.arg or "**"] = flat(kwargs["**"], value) if k.arg is None and "**" in kwargs else value
            if k.arg and names_secret(k.arg):
                self.check_secret_store(k.arg, value, k.value)
        everything = flat(*args, *kwargs.values())
        self.check_call_sinks(call, name, receiver, args, kwargs, env)

        if name in SOURCE_CALLS:
            return of({Origin("source", f"{name}()", cleared=LOCAL_USER_CLEARS, line=call.lineno)})
        if (handed := H.source_call(self, call, name)) is not None:
            return handed
        if (made := H.constructed(name)) is not None:
            return made
        if name.endswith((".parse_args", ".parse_known_args")) or name in ("parse_args", "parse_known_args"):
            return of({Origin("source", f"{name}()", cleared=COMMAND_LINE_CLEARS, line=call.lineno)})
        if name in WEAK_RANDOM:
            return of({Origin("weakrand", f"{name}()", line=call.lineno)})
        if name in CLEAN_CALLS:
            return CONSTANT
        if name in SANITISERS:
            return clear(everything, SANITISERS[name])
        if name in NORMALISERS:
            return normalised(everything)
        if name in S.CONFIG_PARSERS or name in ("dict", "collections.OrderedDict", "collections.defaultdict"):
            return mapping(kwargs.items()) if name != "collections.defaultdict" else mapping(())
        if name in ("list", "tuple") and len(args) == 1:
            return args[0] if args[0].seq is not None else flat(args[0])
        if name in ("compile", "builtins.compile"):
            return args[0] if args else kwargs.get("source", CONSTANT)  # the code carries its source, not its file name
        if name in _FILE_OPENERS:
            return UNKNOWN  # what a file holds is not the data that named it (a script path on a command line)
        if name in _PROCESS_RUNNERS:
            return UNKNOWN  # its arguments were checked as a command above; its output is the program's
        if name in S.XML_PARSER_FACTORIES:
            return H.unsafe_parser(call, self.project)
        if name in S.SAX_FACTORIES:
            return Value(cls=S.SAX_PARSER)
        if name in PATH_JOINS:  # `Path(base, name)`, `os.path.join(base, name)`: only the last part stays last
            return flat(*map(without_segment, args[:-1]), *args[-1:], *map(without_segment, kwargs.values()))
        if isinstance(func, ast.Attribute) and func.attr == "joinpath" and receiver is not None:
            return flat(without_segment(receiver), *map(without_segment, args[:-1]), *args[-1:])
        statement = self.orm_statement(call, name, receiver, args, kwargs)
        if statement is not None:
            return statement
        if isinstance(func, ast.Attribute) and receiver is not None and not (receiver.cls and "::" in receiver.cls):
            listed = H.member_names(func.attr, call.lineno)
            if listed is not None:
                return listed
        return without_segment(self.call_result(call, func, name, receiver, callee, args, kwargs, env))

    def orm_statement(
        self, call: ast.Call, name: str, receiver: Value | None, args: list[Value], kwargs: dict[str, Value]
    ) -> Value | None:
        """What a query builder returns (`select(User)`, `db.select(...)`, `session.query(User)`,
        `User.query` / `User.objects`, then `.filter_by(name=x)`, `.where(...)`, `.values(...)` on
        the result): a statement object that carries its values as bound parameters, so they are no
        longer SQL text. Text spliced into a positional argument (`.where(f"name = '{x}'")`, which
        SQLAlchemy before 1.4 coerced to SQL) stays SQL; `text(...)` is a sink of its own. None for
        any other call."""
        base = _statement_base(call, name, receiver, args)
        if base is None:
            return None
        bound = [v if self.spliced_text(expr) else clear(v, {"sql"}) for expr, v in zip(call.args, args, strict=False)]
        return Value(flat(base, *bound, *(clear(v, {"sql"}) for v in kwargs.values())).origins, cls=S.ORM_STATEMENT)

    def spliced_text(self, expr: ast.expr) -> bool:
        """Whether the expression is text with values spliced in, here or where its name was assigned."""
        return interpolates(expr) or (isinstance(expr, ast.Name) and expr.id in self._built)

    def call_result(
        self,
        call: ast.Call,
        func: ast.expr,
        name: str,
        receiver: Value | None,
        callee: Value | None,
        args: list[Value],
        kwargs: dict[str, Value],
        env: Env,
    ) -> Value:
        """What a call that is no source, sanitiser or path join returns: a summary's result, a
        method's, or its arguments' origins."""
        everything = flat(*args, *kwargs.values())

        ref = callee.callable_ref if callee is not None else None
        if ref is None and isinstance(func, ast.Attribute):
            ref_value = self.eval_attribute(func, env) if receiver is not None and receiver.callable_ref else None
            ref = ref_value.callable_ref if ref_value is not None else None
            if ref is None and receiver is not None and receiver.cls and "::" in receiver.cls:
                ref = self.method_ref(receiver.cls, func.attr)
                if ref is not None:
                    return self.apply(call, ref, args, kwargs, receiver)
        if ref is not None and "::" in ref:
            return self.apply(call, ref, args, kwargs, None)

        if isinstance(func, ast.Attribute) and receiver is not None:
            return self.method(call, func, receiver, args, kwargs, env)
        if ref is not None and ref.startswith("lib:"):
            return everything
        return everything if (args or kwargs) else UNKNOWN

    def method(
        self,
        call: ast.Call,
        func: ast.Attribute,
        receiver: Value,
        args: list[Value],
        kwargs: dict[str, Value],
        env: Env,
    ) -> Value:
        attr = func.attr
        target = func.value
        owner = dotted(target)
        if attr in REQUEST_PARTS and (
            any(o.kind == "request" for o in receiver.origins)
            or (self.module.frameworks and (owner in REQUEST_NAMES or owner.endswith(".request")))
            or self.qualified(target) in REQUEST_PROXIES
        ):
            return of(
                {Origin("source", f"request.{attr}()", line=call.lineno)}
            )  # request.get_json(), await request.post()
        const_args = [self.const_key(a, env) for a in call.args]
        if attr in _MUTATORS and isinstance(target, ast.Name):
            current = self.lookup(target.id, env)
            if attr in ("append", "add", "appendleft", "put", "push") and args:
                env[target.id] = appended(current, args[0])
            elif attr == "insert" and len(args) == 2 and current.seq is not None and isinstance(const_args[0], int):
                parts = list(current.seq)
                parts.insert(const_args[0], args[1])
                env[target.id] = sequence(parts)
            elif attr == "extend" and args and current.seq is not None:
                env[target.id] = sequence(
                    (*current.seq, *(args[0].seq if args[0].seq is not None else (flat(args[0]),)))
                )
            elif attr == "setdefault" and len(args) == 2:
                env[target.id] = (
                    with_item(current, const_args[0], args[1]) if current.item(const_args[0]) is None else current
                )
                return current.item(const_args[0]) or args[1]
            else:
                env[target.id] = Value(flat(current, *args, *kwargs.values()).origins, cls=current.cls)
            return CONSTANT
        if attr == "set" and len(args) == 3 and isinstance(target, ast.Name):
            # ConfigParser.set(section, option, value)
            option: Hashable | None = (const_args[0], const_args[1]) if None not in const_args[:2] else None
            env[target.id] = with_item(self.lookup(target.id, env), option, args[2])
            return CONSTANT
        if attr in ("get", "getlist", "pop", "__getitem__", "getint", "getfloat", "getboolean"):
            if attr in ("getint", "getfloat", "getboolean"):
                return CONSTANT
            lookup_key: Hashable | None
            if (
                len(const_args) >= 2
                and receiver.items is not None
                and all(isinstance(k, tuple) for k, _ in receiver.items)
            ):
                lookup_key = (const_args[0], const_args[1])  # ConfigParser.get(section, option)
            else:
                lookup_key = const_args[0] if const_args else None
            key = lookup_key
            result: Value
            if attr == "pop" and receiver.seq is not None and receiver.seq:
                index = key if isinstance(key, int) else -1
                parts = list(receiver.seq)
                if -len(parts) <= index < len(parts):
                    result = parts.pop(index)
                    if isinstance(target, ast.Name):
                        env[target.id] = sequence(parts)
                    return result
            if key is not None and receiver.items is not None:
                item = receiver.item(key)
                if attr == "pop" and isinstance(target, ast.Name) and item is not None:
                    env[target.id] = mapping((k, v) for k, v in receiver.items if k != key)
                default = args[1] if len(args) > 1 and not isinstance(key, tuple) else CONSTANT
                return item if item is not None else default
            return flat(receiver, *(args[1:] if attr == "get" else []))
        if attr == "setFeature" and len(call.args) == 2 and isinstance(target, ast.Name):
            feature = self.qualified(call.args[0])
            on = isinstance(call.args[1], ast.Constant) and bool(call.args[1].value)
            if on and feature.endswith(("feature_external_ges", "feature_external_pes")):
                env[target.id] = Value(cls=S.UNSAFE_PARSER)
            return CONSTANT
        if attr in CLEAN_METHODS:
            return CONSTANT
        if attr in ("read_text", "read_bytes"):
            return UNKNOWN  # a file's content, not its name
        if attr in _READS and any(o.kind == "param" or o.cleared >= LOCAL_USER_CLEARS for o in receiver.origins):
            # a file named on the command line (argparse.FileType): its content is the user's own file;
            # on a parameter, the read is remembered and judged at each call
            return flat(attribute(receiver, attr), *args)
        if attr in ("resolve", "absolute", "realpath"):
            return normalised(flat(receiver, *args))
        if attr == "copy":
            return receiver
        if attr == "values" or attr == "items":
            return flat(receiver)
        if attr == "join":
            return clear(flat(receiver, *args), (SPLICED,))
        if attr == "format":
            return clear(flat(receiver, *args, *kwargs.values()), (SPLICED,))
        return flat(receiver, *args, *kwargs.values())

    def method_ref(self, cls_ref: str, method: str) -> str | None:
        path, _, cls_name = cls_ref.partition("::")
        info = self.project.module_at(path)
        if info is None:
            return None
        if f"{cls_name}.{method}" in info.functions:
            return f"{path}::{cls_name}.{method}"
        cls = info.classes.get(cls_name)
        for base in cls.bases if cls is not None else []:
            base_name = dotted(base)
            if base_name in info.classes and f"{base_name}.{method}" in info.functions:
                return f"{path}::{base_name}.{method}"
        return None

    def apply(
        self, call: ast.Call, ref: str, args: list[Value], kwargs: dict[str, Value], receiver: Value | None
    ) -> Value:
        """A repository function's or class's effect at this call."""
        path, _, qualname = ref.partition("::")
        info = self.project.module_at(path)
        if info is None:
            return flat(*args, *kwargs.values())
        if qualname in info.classes:
            return self.construct(call, info, qualname, args, kwargs)
        if qualname not in info.functions:
            return flat(*args, *kwargs.values())
        summary = summarize(self.project, info, qualname, self.depth + 1)
        binding = bind(summary.params, args, kwargs, receiver)
        for sink in summary.sinks:
            actual = binding.get(sink.param)
            if actual is not None:
                # what the function does to a segment before its sink is not known here
                value = without_segment(clear(resolve_path(actual, sink.path), sink.cleared))
                self.sink(call, sink.cls, value, sink.call, via=sink.where)
        return substitute(summary.returns, binding)

    def construct(
        self, call: ast.Call, info: ModuleInfo, cls_name: str, args: list[Value], kwargs: dict[str, Value]
    ) -> Value:
        ref = f"{info.path}::{cls_name}"
        instance = Value(flat(*args, *kwargs.values()).origins, cls=ref)
        init = self.method_ref(ref, "__init__")
        if init is None:
            declared = [
                n.target.id for n in info.classes[cls_name].body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            ]  # fmt: skip
            fields = dict(zip(declared, args, strict=False))
            fields.update({k: v for k, v in kwargs.items() if k != "**"})
            return replace(instance, fields=tuple(fields.items()))
        init_path, _, init_name = init.partition("::")
        init_info = self.project.module_at(init_path)
        if init_info is None:
            return instance
        summary = summarize(self.project, init_info, init_name, self.depth + 1)
        binding = bind(summary.params, args, kwargs, instance)
        for sink in summary.sinks:
            actual = binding.get(sink.param)
            if actual is not None:
                self.sink(
                    call, sink.cls, clear(resolve_path(actual, sink.path), sink.cleared), sink.call, via=sink.where
                )
        return replace(instance, fields=tuple((k, substitute(v, binding)) for k, v in summary.fields))

    def worth_a_look(self, cls: str, expr: ast.expr, value: Value) -> bool:
        """Whether a sink fed by a value of unknown origin deserves a person's look: SQL text with
        values spliced in, a shell command, code to evaluate, or data to unpickle."""
        if value.constant:
            return False
        if cls == "sql":
            built = interpolates(expr) or (isinstance(expr, ast.Name) and expr.id in self._built)
            return built and bool(SQL_SHAPE.search(self.text_of(expr)))
        return cls in LOW_WHEN_UNKNOWN


def bind(
    params: tuple[str, ...], args: list[Value], kwargs: dict[str, Value], receiver: Value | None
) -> dict[str, Value]:
    names = list(params)
    out: dict[str, Value] = {}
    if receiver is not None and names:
        out[names.pop(0)] = receiver
    for name, value in zip(names, args, strict=False):
        out[name] = value
    for key, value in kwargs.items():
        if key in params:
            out[key] = value
    return out


def parameters(func: FunctionNode) -> list[ast.arg]:
    a = func.args
    return [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs, *([a.kwarg] if a.kwarg else [])]


def module_env(project: Project, info: ModuleInfo, depth: int = 0) -> dict[str, Value]:
    """A module's globals after its own statements run (computed once; an import cycle sees {})."""
    if info.globals is None:
        info.globals = {}
        interpreter = Interpreter(project, info, None, "summary", depth=depth)
        try:
            info.globals = interpreter.run()
        finally:
            project.steps += interpreter.steps
    return info.globals


def summarize(project: Project, info: ModuleInfo, qualname: str, depth: int = 0) -> Summary:
    key = f"{info.path}::{qualname}"
    func = info.functions[qualname]
    params = tuple(p.arg for p in parameters(func))
    if key in project.summaries:
        return project.summaries[key]
    conservative = Summary(params, flat(*(of({Origin("param", p)}) for p in params)), complete=False)
    if key in project.in_progress:
        return conservative  # recursion: the call passes its arguments through, and is cut here
    cut = f"over {MAX_CALL_DEPTH} nested calls" if depth > MAX_CALL_DEPTH else project.summary_cut()
    if cut is not None:
        project.unfinished.setdefault(key.replace("::", ":"), cut)
        return conservative
    project.in_progress.add(key)
    try:
        module_env(project, info, depth)
        class_name = qualname.split(".")[0] if "." in qualname else None
        bindings: Env = {p: of({Origin("param", p)}) for p in params}
        if class_name is not None and params:
            bindings[params[0]] = Value(bindings[params[0]].origins, cls=f"{info.path}::{class_name}")
        interpreter = Interpreter(project, info, func, "summary", bindings, class_name, depth)
        try:
            interpreter.run()
        except RecursionError:
            interpreter.complete = False
        finally:
            project.steps += interpreter.steps
        returns = join(interpreter.returns) if interpreter.returns else CONSTANT
        summary = Summary(
            params, returns, tuple(dict.fromkeys(interpreter.param_sinks)), tuple(interpreter.fields.items()),
            interpreter.complete,
        )  # fmt: skip
        if not interpreter.complete:
            project.unfinished.setdefault(key.replace("::", ":"), f"over {MAX_STATEMENTS} statements")
    finally:
        project.in_progress.discard(key)
    project.summaries[key] = summary
    return summary


def entry_bindings(info: ModuleInfo, func: FunctionNode, class_name: str | None, project: Project | None = None) -> Env:
    """What a function's parameters hold when nobody known calls it: request data for a route's
    parameters, a request object for `request`, otherwise a value of unknown origin."""
    params = parameters(func)
    route = is_route(func)
    names = [p.arg for p in params]
    own = names[1:] if class_name is not None else names
    django_view = "django" in info.frameworks and bool(own) and own[0] in ("request", "req")
    defaults = dict(
        zip([p.arg for p in [*func.args.posonlyargs, *func.args.args]][::-1], func.args.defaults[::-1], strict=False)
    )
    defaults.update(
        {p.arg: d for p, d in zip(func.args.kwonlyargs, func.args.kw_defaults, strict=True) if d is not None}
    )
    converters = route_converters(func) if route else {}
    out: Env = {}
    for index, p in enumerate(params):
        annotation = ast.unparse(p.annotation) if p.annotation is not None else ""
        default = defaults.get(p.arg)
        default_call = dotted(default.func) if isinstance(default, ast.Call) else ""
        if index == 0 and class_name is not None:
            out[p.arg] = Value(of({Origin("param", p.arg)}).origins, cls=f"{info.path}::{class_name}")
        elif (handed := H.entry_source(info, func, class_name, p.arg, project)) is not None:
            out[p.arg] = handed
        elif (info.frameworks and p.arg in ("request", "req")) or annotation.rsplit(".", 1)[-1] in REQUEST_ANNOTATIONS:
            out[p.arg] = of({Origin("request", p.arg, line=func.lineno)})
        elif (route or django_view) and annotation in CLEAN_ANNOTATIONS:
            out[p.arg] = CONSTANT
        elif (route or django_view) and (
            p.arg in FRAMEWORK_PARAMS or default_call.rsplit(".", 1)[-1] in FRAMEWORK_DEFAULTS
        ):
            out[p.arg] = UNKNOWN
        elif route and converters.get(p.arg) in NUMBER_CONVERTERS:
            out[p.arg] = CONSTANT
        elif route and converters.get(p.arg) in SEGMENT_CONVERTERS:
            segment = frozenset({SEGMENT})
            out[p.arg] = of({Origin("source", f"route parameter `{p.arg}`", cleared=segment, line=func.lineno)})
        elif route or django_view:
            out[p.arg] = of({Origin("source", f"route parameter `{p.arg}`", line=func.lineno)})
        else:
            out[p.arg] = of({Origin("param", p.arg)})
    return out


def analyse_module(project: Project, info: ModuleInfo) -> list[tuple[Hit, str]]:
    """Every hit in a module: its own statements, then each function and method, with the scope's
    name; a function cut by a budget is named in `project.unfinished`."""
    found: list[tuple[Hit, str]] = []
    top = Interpreter(project, info, None, "report")
    info.globals = {}
    try:
        info.globals = top.run()
    except RecursionError:
        project.unfinished.setdefault(info.path, "nesting too deep")
    found += [(h, "<module>") for h in top.hits]
    for qualname, func in info.functions.items():
        found += [(h, qualname) for h in analyse_function(project, info, qualname, func)]
    known = {id(f) for f in info.functions.values()}
    for node in statements(info.tree):  # functions nested in functions: their own scope, parameters unknown
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and id(node) not in known:
            found += [(h, node.name) for h in analyse_function(project, info, node.name, node)]
    return found


def analyse_function(project: Project, info: ModuleInfo, qualname: str, func: FunctionNode) -> list[Hit]:
    class_name = qualname.split(".")[0] if "." in qualname and qualname.split(".")[0] in info.classes else None
    interpreter = Interpreter(
        project, info, func, "report", entry_bindings(info, func, class_name, project), class_name
    )
    try:
        interpreter.run()
    except RecursionError:
        interpreter.complete = False
    if not interpreter.complete:
        project.unfinished.setdefault(f"{info.path}:{qualname}", f"over {MAX_STATEMENTS} statements")
    return interpreter.hits
