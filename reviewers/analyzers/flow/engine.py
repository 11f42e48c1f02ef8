"""A flow-sensitive interpreter of one Python function over abstract values (see `values`).

Statements run in order over an environment of local names; an `if` runs both branches with what
its condition proves (`guards`) and joins them, and a branch that leaves (return, raise, continue,
abort()) contributes nothing after the `if` — which is how a guard dominates the sink after it.
Loops run their body twice. A call to a function of the repository applies its summary
(parameter → return, parameter → sink), computed by the same interpreter with parameters as
symbols and memoised in the `Project`; recursion gets a conservative summary, and every budget
cut is named in `Project.unfinished`. Each interpreter counts the statements and expressions it
runs (`steps`); what the summaries ran is the project's step budget, the same on every machine.

This module is the interpreter proper: statements, expressions, branches and guards, and the
summaries and entry points. What a call evaluates to (sources, sanitisers, query builders, methods
of known values, the repository's functions through their summaries) is `calls.CallHandling`; where
the values reach a sink, `sink_checks.SinkChecks` (named sinks, their special cases, how a hit's
data came), with the shapes of `handlers`; what is read off the syntax alone, `syntax`.

Two modes: *summary* (record which parameters reach which sinks and what comes back) and *report*
(also record `Hit`s: request data reaching a sink, or a value of unknown origin reaching a sink
where that alone deserves a person's look).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from reviewers.analyzers.flow import guards
from reviewers.analyzers.flow import handlers as H
from reviewers.analyzers.flow.calls import TEMPLATE_LOADER_METHODS, CallHandling, attribute
from reviewers.analyzers.flow.project import FunctionNode, ModuleInfo, ParamSink, Project, Summary, statements
from reviewers.analyzers.flow.rules import (
    ABORTS,
    CLEAN_ANNOTATIONS,
    FRAMEWORK_DEFAULTS,
    FRAMEWORK_PARAMS,
    LOW_WHEN_UNKNOWN,
    REQUEST_ANNOTATIONS,
    REQUEST_NAMES,
    REQUEST_PARTS,
    REQUEST_PROXIES,
    SOURCE_ATTRIBUTES,
)
from reviewers.analyzers.flow.sink_checks import (
    COMMAND_LINE_CLEARS,
)
from reviewers.analyzers.flow.sink_checks import Hit as Hit  # the hits' type, for python_security
from reviewers.analyzers.flow.syntax import (
    NUMBER_CONVERTERS,
    SEGMENT_CONVERTERS,
    const_text,
    dotted,
    fragments,
    interpolates,
    is_route,
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
    clear,
    flat,
    join,
    mapping,
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


def join_envs(envs: Iterable[Env]) -> Env:
    alive = list(envs)
    if len(alive) == 1:
        return dict(alive[0])
    keys: dict[str, None] = {}
    for env in alive:
        keys.update(dict.fromkeys(env))
    return {k: join(e[k] for e in alive if k in e) for k in keys}


@dataclass
class Interpreter(CallHandling):
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
            self.names_checked_template(stmt.value, env)
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
            self.names_checked_template(stmt.value, env)
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

    def names_checked_template(self, expr: ast.expr, env: Env) -> None:
        """After `get_template(name)` returned, `name` names a template inside the template directories
        (the loader refuses any other: Django's safe_join, Jinja's split_template_path), so it no
        longer steers a path out of them."""
        if not isinstance(expr, ast.Call) or not expr.args or not isinstance(expr.args[0], ast.Name):
            return
        func = expr.func
        loader_method = isinstance(func, ast.Attribute) and func.attr in TEMPLATE_LOADER_METHODS
        receiver = self.eval(func.value, env) if loader_method and isinstance(func, ast.Attribute) else None
        if self.template_loader(func, self.qualified(func), receiver):
            name = expr.args[0].id
            env[name] = clear(env.get(name) or self.lookup(name, env), {"path"})

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

    def worth_a_look(self, cls: str, expr: ast.expr, value: Value) -> bool:
        """Whether a sink fed by a value of unknown origin deserves a person's look: SQL text with
        values spliced in, a shell command, code to evaluate, or data to unpickle."""
        if value.constant:
            return False
        if cls == "sql":
            built = interpolates(expr) or (isinstance(expr, ast.Name) and expr.id in self._built)
            return built and bool(SQL_SHAPE.search(self.text_of(expr)))
        return cls in LOW_WHEN_UNKNOWN


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
    offline = class_name is not None and H.handler_kind(project, info, class_name) == H.COMMAND
    request_named = bool(info.frameworks) and not offline  # a parameter named `request` holds one
    django_view = "django" in info.frameworks and bool(own) and own[0] in ("request", "req") and not offline
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
        elif (request_named and p.arg in ("request", "req")) or annotation.rsplit(".", 1)[-1] in REQUEST_ANNOTATIONS:
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
