"""Every call of a module with the guards that dominate it: checks on the branch that reaches it,
sanitizers its arguments went through, its own hardening options, and the function's decorators.

One walk per scope (a function, or the module's own statements), in statement order: an `if` whose
branch leaves (`return`, `raise`, `abort`) guards what follows it; a branch guards what it contains;
a check after the call guards nothing. What a condition proves about a name comes from the flow
engine's `guards.facts`, with repository validators judged by their body (`validators`). Names carry
their origins through assignments, so a check on `name` guards `open(os.path.join(BASE, name))`.

The walk is linear in the scope's size: nothing is interpreted twice, loops are walked once.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from reviewers.analyzers.flow.project import FunctionNode, ModuleInfo, Project
from reviewers.analyzers.flow.rules import ABORTS
from reviewers.analyzers.guard_removal.conditions import ConditionGuards
from reviewers.analyzers.guard_removal.helpers import helper_sink_classes
from reviewers.analyzers.guard_removal.model import Guard, Sink
from reviewers.analyzers.guard_removal.model import dotted as _dotted
from reviewers.analyzers.guard_removal.options import (
    CONSUMER_WORDS,
    SIZE_KEYWORDS,
    call_options,
    callee_family,
    ends_options,
)
from reviewers.analyzers.guard_removal.options import const as _const
from reviewers.analyzers.guard_removal.sanitizers import SanitizerGuards
from reviewers.analyzers.guard_removal.scan_base import _text
from reviewers.analyzers.guard_removal.views import CREDENTIAL_HEADERS, ViewGuards, decorator_name, denies
from reviewers.analyzers.python_auth import names_secret

MODULE_SCOPE = "<module>"
# Statements and calls one version of a file may cost (steps, not seconds: the same change gives the
# same answer on a busy machine). The largest module of this repository (1,500 lines) costs about
# 2,400 when every function of it is touched; past the budget the file is named as not checked.
MAX_SCAN_STEPS = 100_000


class ScanBudgetExceeded(Exception):
    """A version of a file cost more than `MAX_SCAN_STEPS`."""


def _exits(stmts: list[ast.stmt], qualified_of: Callable[[ast.expr], str]) -> bool:
    """Whether a block always leaves the function (or the loop) before falling through."""
    for stmt in stmts:
        if isinstance(stmt, ast.Return | ast.Raise | ast.Continue | ast.Break):
            return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            name = qualified_of(stmt.value.func)
            if name in ABORTS or name.rsplit(".", 1)[-1] in ("abort", "exit", "HTTPException"):
                return True
        if isinstance(stmt, ast.If) and stmt.orelse and _exits(stmt.body, qualified_of):
            if _exits(stmt.orelse, qualified_of):
                return True
    return False


def _leaving(found: list[Guard], branch: list[ast.stmt]) -> list[Guard]:
    """The guards of an `if` whose exiting branch leaves the function rather than a loop's turn."""
    if any(isinstance(n, ast.Continue | ast.Break) for s in branch for n in ast.walk(s)):
        return found
    return [replace(g, leaves=True) for g in found]


@dataclass
class _State:
    origins: dict[str, frozenset[str]] = field(default_factory=dict)
    carried: dict[str, tuple[Guard, ...]] = field(default_factory=dict)  # sanitizers a name's value went through
    parsed: dict[str, ast.expr] = field(default_factory=dict)  # names bound to `urlparse(x)`
    options: dict[str, tuple[int, dict[str, ast.expr]]] = field(default_factory=dict)  # `x = {"key": value}`
    ended: dict[str, int] = field(default_factory=dict)  # names bound to a command whose options `--` ends


class ModuleScan(ViewGuards, ConditionGuards, SanitizerGuards):
    """The sinks of every scope of one version of a module, by the scope's qualified name."""

    def __init__(self, project: Project, info: ModuleInfo, text: str, touched: frozenset[int] | None = None) -> None:
        """`touched`: the lines the change wrote or removed in this version; only the functions (and the
        module's own statements) that hold one are walked, so a review costs what the change touched.
        None walks everything."""
        self.project = project
        self.touched = sorted(touched) if touched is not None else None
        lowered = text.lower()
        self._mentions_credentials = any(h in lowered for h in CREDENTIAL_HEADERS)
        self._mentions_csrf = "csrf" in lowered or "seasurf" in lowered
        self.info = info
        self.lines = text.splitlines()
        self.qualified_of: dict[int, str] = {}
        self.patterns: dict[str, str] = {}  # module names bound to re.compile("...")
        self.constants: set[str] = set()
        for stmt in info.tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name, value = stmt.targets[0].id, stmt.value
                if isinstance(value, ast.Call) and self.qualified(value.func) == "re.compile" and value.args:
                    if isinstance(pattern := _const(value.args[0]), str):
                        self.patterns[name] = pattern
                elif isinstance(value, ast.Constant | ast.Set | ast.List | ast.Tuple | ast.Dict | ast.Call):
                    self.constants.add(name)
        self.steps = 0
        self.broken: dict[str, dict[str, str]] = {}  # scope → repository validators called there that do not work
        self._branches = 0  # how many `if` branches the walk is inside
        self._subtrees: dict[int, tuple[frozenset[str], tuple[ast.expr, ...]]] = {}
        self._sanitized: dict[int, Guard | None] = {}
        self._wrappers: dict[int, tuple[str, frozenset[str], str] | None] = {}
        self._local_defs: dict[str, FunctionNode] = {}  # nested functions met so far, by name
        self._checked: dict[int, frozenset[str]] = {}  # repository helpers → the parameters they raise on
        self._shapes: dict[int, tuple[str, tuple[int, int]]] = {}
        self.module_guards = self._module_guards()
        self._verb_methods = self._view_methods()
        self.views = [f for f in info.functions.values() if self._is_view(f)]
        self.scopes: dict[str, list[Sink]] = {}
        self._current = MODULE_SCOPE
        self._scan(info.tree.body, MODULE_SCOPE, None)

    # --- names ----------------------------------------------------------------------------------

    # --- scopes ---------------------------------------------------------------------------------

    def _scan(
        self, body: list[ast.stmt], qualname: str, func: FunctionNode | None, inherited: tuple[Guard, ...] = ()
    ) -> None:
        outer, self._current = self._current, qualname
        sinks: list[Sink] = []
        self.scopes[qualname] = sinks
        state = _State()
        reach = [*inherited, *self._decorator_guards(func)] if func is not None else []
        self._block(body, (), state, sinks, top=func is not None, reach=reach)
        self._current = outer
        if func is not None and self._is_view(func):
            exempt = any(decorator_name(d) == "csrf_exempt" for d in func.decorator_list)
            csrf = [g for g in self.module_guards if g.family == "csrf"]
            if not exempt:
                text = f"CSRF protection (no `csrf_exempt`) on `{_text(self.lines, func)}`"
                csrf.append(Guard("csrf", frozenset({"csrf"}), frozenset(), func.lineno, text, key="view"))
            auth = [g for g in reach if g.classes & {"auth"}]
            auth += [g for g in self.module_guards if g.family in ("login", "permission")]
            first = min([func.lineno, *(d.lineno for d in func.decorator_list)])
            sinks.append(Sink(frozenset({"auth", "csrf"}), "<view>", None, frozenset(), func.lineno,
                              (*auth, *csrf), end_line=func.lineno, start_line=first))  # fmt: skip
        elif func is not None:  # a function that checked its caller's rights is an entry point, view or not
            auth = [g for g in reach if g.classes & {"auth"}]
            first = min([func.lineno, *(d.lineno for d in func.decorator_list)])
            sinks.append(Sink(frozenset({"auth"}), "<view>", None, frozenset(), func.lineno, tuple(auth),
                              end_line=func.lineno, start_line=first))  # fmt: skip
        headers = [g for g in reach if g.family == "header-strip"]
        if headers or func is not None:
            sinks.append(Sink(frozenset({"credentials"}), "<function>", None, frozenset(), getattr(func, "lineno", 1),
                              tuple(headers)))  # fmt: skip

    def _wanted(self, node: ast.stmt) -> bool:
        return self._wanted_span(node, node.end_lineno or node.lineno)

    def _wanted_span(self, node: ast.stmt, last: int) -> bool:
        """Whether the change touched the node's lines (its decorators included) up to `last`."""
        if self.touched is None:
            return True
        decorators = getattr(node, "decorator_list", [])
        first = min([node.lineno, *(d.lineno for d in decorators)])
        at = bisect.bisect_left(self.touched, first)
        return at < len(self.touched) and self.touched[at] <= last

    # --- statements -----------------------------------------------------------------------------

    def _block(
        self,
        stmts: list[ast.stmt],
        active: tuple[Guard, ...],
        state: _State,
        sinks: list[Sink],
        *,
        top: bool = False,
        reach: list[Guard] | None = None,
    ) -> tuple[Guard, ...]:
        for stmt in stmts:
            active = self._statement(stmt, active, state, sinks, top=top, reach=reach)
        return active

    def _statement(  # noqa: C901 - one case per statement kind
        self,
        stmt: ast.stmt,
        active: tuple[Guard, ...],
        state: _State,
        sinks: list[Sink],
        *,
        top: bool,
        reach: list[Guard] | None,
    ) -> tuple[Guard, ...]:
        self._spend(1 + len(active))
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            self._local_defs[stmt.name] = stmt
            prefix = "" if self._current == MODULE_SCOPE else f"{self._current}."
            if self._wanted(stmt):
                self._scan(stmt.body, f"{prefix}{stmt.name}", stmt)
            return active
        if isinstance(stmt, ast.ClassDef):
            inherited = self._class_guards(stmt)
            methods = [i for i in stmt.body if isinstance(i, ast.FunctionDef | ast.AsyncFunctionDef)]
            header_end = (methods[0].lineno - 1) if methods else (stmt.end_lineno or stmt.lineno)
            header_touched = self._wanted_span(stmt, header_end)
            for item in methods:
                if header_touched or self._wanted(item):
                    self._scan(item.body, f"{stmt.name}.{item.name}", item, inherited)
            return active
        if self._current == MODULE_SCOPE and not self._wanted(stmt):
            return active
        if isinstance(stmt, ast.If):
            self._calls(stmt.test, active, state, sinks)
            body_exits, else_exits = _exits(stmt.body, self.qualified), _exits(stmt.orelse, self.qualified)
            test = _Inline(state.parsed).visit(_copy(stmt.test)) if state.parsed else stmt.test
            positive = self._condition(test, True, stmt)
            negative = self._condition(test, False, stmt)
            replaced = self._replaced_by_constants(stmt.body) if not stmt.orelse and not body_exits else set()
            if replaced:  # `if bad(x): x = "/"`: after the `if`, x is the safe constant or passed the check
                self._block(stmt.body, active, state, sinks, reach=reach)
                return (*active, *(g for g in negative if g.names and g.names <= replaced))
            refusal = stmt.body if body_exits else stmt.orelse  # the branch that leaves, when one does
            if top and reach is not None and body_exits != else_exits and denies(refusal):
                reach += self._auth_checks(stmt.test, stmt, refusal)  # `if is_staff: return all()` is no check
            self._branches += 1
            self._block(stmt.body, (*active, *positive), state, sinks, reach=reach)
            self._block(stmt.orelse, (*active, *negative), state, sinks, reach=reach)
            self._branches -= 1
            if body_exits and not else_exits:
                found = [*negative, *self._content_check(test, False, negative, stmt)]
                return (*active, *_leaving(found, stmt.body))
            if else_exits and not body_exits:
                found = [*positive, *self._content_check(test, True, positive, stmt)]
                return (*active, *_leaving(found, stmt.orelse))
            return active
        if isinstance(stmt, ast.Assert):
            return (*active, *self._condition(stmt.test, True, stmt))
        if isinstance(stmt, ast.For | ast.AsyncFor | ast.While):
            header = stmt.iter if isinstance(stmt, ast.For | ast.AsyncFor) else stmt.test
            self._calls(header, active, state, sinks)
            if isinstance(stmt, ast.For | ast.AsyncFor) and reach is not None:
                reach += self._stripped_headers(stmt.iter, stmt, around=stmt)
            inner = active
            if isinstance(stmt, ast.While):  # a loop's bound is no limit on input
                inner = (*active, *(g for g in self._condition(stmt.test, True, stmt) if g.family != "size-limit"))
            done = self._block(stmt.body, inner, state, sinks, reach=reach)
            self._block(stmt.orelse, active, state, sinks, reach=reach)
            # a check in the loop that leaves the function when one element fails stands in front of
            # what runs after the loop: `for m in members: validate(m)` then `extractall(...)`
            before = {id(g) for g in inner}
            return (*active, *(g for g in done if g.leaves and id(g) not in before))
        if isinstance(stmt, ast.With | ast.AsyncWith):
            for context in stmt.items:
                self._calls(context.context_expr, active, state, sinks)
            return self._block(stmt.body, active, state, sinks, top=top, reach=reach)
        if isinstance(stmt, ast.Try):
            after = self._block(stmt.body, active, state, sinks, top=top, reach=reach)
            for handler in stmt.handlers:
                self._block(handler.body, active, state, sinks, reach=reach)
            self._block(stmt.orelse, after, state, sinks, reach=reach)
            self._block(stmt.finalbody, active, state, sinks, reach=reach)
            return after
        if isinstance(stmt, ast.Delete) and reach is not None:
            for target in stmt.targets:
                reach += self._stripped_headers(target, stmt)
            return active
        self._calls(stmt, active, state, sinks)
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            if reach is not None and _dotted(stmt.value.func).rsplit(".", 1)[-1] in ("pop", "remove", "discard"):
                reach += [g for a in stmt.value.args[:1] for g in self._stripped_headers(a, stmt)]
            if top and reach is not None:  # `require_admin(request.user)` on its own line: a check that raises
                reach += self._auth_call(stmt.value, stmt)
            return (*active, *self._checking_call(stmt.value, stmt))
        if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign) and stmt.value is not None:
            targets: list[ast.expr] = list(stmt.targets) if isinstance(stmt, ast.Assign) else [stmt.target]
            self._assign(targets, stmt.value, state, stmt)
            if top and reach is not None and isinstance(stmt.value, ast.Call):  # `x = load_or_refuse(user)`
                reach += self._refusing_call(stmt.value, stmt)
            assigned = {n for t in targets for n in self.names(t)}
            if not isinstance(stmt, ast.AugAssign) and not assigned & self.names(stmt.value):
                active = tuple(g for g in active if not g.names or not g.names <= assigned)
        return active

    def _replaced_by_constants(self, body: list[ast.stmt]) -> set[str]:
        out: set[str] = set()
        for stmt in body:
            if not (isinstance(stmt, ast.Assign) and self.is_const(stmt.value)):
                return set()
            out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        return out

    def _assign(self, targets: list[ast.expr], value: ast.expr, state: _State, stmt: ast.AST) -> None:
        for target in targets:
            if isinstance(target, ast.Name):
                state.options.pop(target.id, None)
                if isinstance(value, ast.Dict):
                    state.options[target.id] = (getattr(stmt, "lineno", 0), {
                        k.value: v for k, v in zip(value.keys, value.values, strict=True)
                        if isinstance(k, ast.Constant) and isinstance(k.value, str)
                    })  # fmt: skip
                if ends_options(value, self.is_const):
                    state.ended[target.id] = getattr(stmt, "lineno", 0)
                else:
                    state.ended.pop(target.id, None)
        if isinstance(value, ast.Call) and self.qualified(value.func).rsplit(".", 1)[-1] in ("urlparse", "urlsplit"):
            for target in targets:
                if isinstance(target, ast.Name):
                    state.parsed[target.id] = value
        used = self.names(value)
        origins = frozenset(used.union(*(state.origins.get(n, frozenset()) for n in used)))
        carried = tuple(g for n in used for g in state.carried.get(n, ()))
        carried += tuple(self._sanitizers(value))
        for target in targets:
            for name in self.names(target):
                state.origins[name] = origins | {name}
                state.carried[name] = carried

    # --- guards ---------------------------------------------------------------------------------

    # --- sinks ----------------------------------------------------------------------------------

    def _calls(self, root: ast.AST, active: tuple[Guard, ...], state: _State, sinks: list[Sink]) -> None:
        for node in self.subtree(root)[1]:
            if isinstance(node, ast.Call):
                self._call(node, active, state, sinks)
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq | ast.NotEq):
                sides = [node.left, node.comparators[0]]
                if any(names_secret(s) for s in sides) and not any(self.is_const(s) for s in sides):
                    names = self._origins(sides, state)
                    sinks.append(Sink(frozenset({"compare"}), "==", None, names, node.lineno, ()))

    def _origins(self, exprs: list[ast.expr], state: _State) -> frozenset[str]:
        """The names a call's arguments are made of, with their origins; module constants left out
        (a call fed only by them takes nothing a check on a value could have constrained)."""
        used = {n for e in exprs for n in self.names(e)}
        found = used.union(*(state.origins.get(n, frozenset()) for n in used))
        return frozenset(n for n in found if not (n.isupper() or n in self.constants))

    def _spend(self, steps: int) -> None:
        self.steps += steps
        if self.steps > MAX_SCAN_STEPS:
            raise ScanBudgetExceeded(f"over {MAX_SCAN_STEPS} steps")

    def _call(self, call: ast.Call, active: tuple[Guard, ...], state: _State, sinks: list[Sink]) -> None:
        self._spend(1 + len(active))
        name = self.qualified_of.get(id(call)) or self.qualified(call.func)
        short = name.rsplit(".", 1)[-1]
        family = callee_family(name)
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        explicit = dict(keywords)
        spread_at = 0
        for spread in (k.value for k in call.keywords if k.arg is None and isinstance(k.value, ast.Name)):
            line, options = state.options.get(spread.id, (0, {}))
            for key, value in options.items():  # `Environment(**options)`
                keywords.setdefault(key, value)
                spread_at = line
        text, in_branch = _text(self.lines, call), self._branches > 0
        classes, own = call_options(call, name, keywords, text, self.is_const, in_branch)
        if spread_at:  # an option set in a dict the call spreads is said where the dict was written
            plain = {(g.family, g.key) for g in call_options(call, name, explicit, text, self.is_const, in_branch)[1]}
            dict_text = self.lines[spread_at - 1].strip() if spread_at <= len(self.lines) else text
            own = [g if (g.family, g.key) in plain else replace(g, line=spread_at, text=dict_text) for g in own]
        helper = False  # a sink only through a repository function's summary
        if not classes and (call.args or call.keywords):
            classes |= helper_sink_classes(self.project, self.info, call, self._current, self.is_const)
            helper = bool(classes)
        if "command" in classes and call.args:
            command = call.args[0]
            where = call.lineno if ends_options(command, self.is_const) else 0
            if isinstance(command, ast.Name):
                where = state.ended.get(command.id, 0)  # the line that wrote the `--`
            if where:
                text = self.lines[where - 1].strip() if where <= len(self.lines) else ""
                own.append(Guard("end-of-options", frozenset({"command"}), frozenset(), where, text))
        consumer = any(w in short.lower() for w in CONSUMER_WORDS)
        relevant = [a for a in call.args] + [v for k, v in keywords.items() if k not in SIZE_KEYWORDS]
        names = self._origins(relevant, state)
        carried = tuple(g for n in names for g in state.carried.get(n, ()))
        # a size limit bounds what a consumer reads, and a check no rule reads guards a call whose danger
        # is plain; neither is read in front of a helper whose body only may reach a sink
        applying = tuple(
            g
            for g in active
            if (not g.names or g.names & names)
            and (g.family != "size-limit" or consumer or (classes and not helper))
            and not (helper and g.family == "content-check")
        )
        direct = tuple(g for a in relevant for g in self._sanitizers(a))
        guarded = (*own, *carried, *applying, *direct)
        end = call.end_lineno or call.lineno
        sinks.append(Sink(frozenset(classes), family, call, names, call.lineno, guarded, end_line=end))


class _Inline(ast.NodeTransformer):
    """`parsed.netloc` read as `urlparse(x).netloc` where `parsed = urlparse(x)`."""

    def __init__(self, parsed: dict[str, ast.expr]) -> None:
        self.parsed = parsed

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id in self.parsed:
            return ast.copy_location(ast.Attribute(self.parsed[node.value.id], node.attr, node.ctx), node)
        return self.generic_visit(node)


def _copy(expr: ast.expr) -> ast.expr:
    try:
        copied = ast.parse(ast.unparse(expr), mode="eval").body
    except (SyntaxError, RecursionError, ValueError, AttributeError):
        return expr  # printed and read back it is not the same test: read it as written
    return ast.copy_location(copied, expr)
