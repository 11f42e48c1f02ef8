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
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from reviewers.analyzers.flow import guards
from reviewers.analyzers.flow.project import FunctionNode, ModuleInfo, Project
from reviewers.analyzers.flow.rules import ABORTS, ALL_CLASSES, GUARD_WORDS, REDIRECT_GUARDS, SANITISERS
from reviewers.analyzers.guard_removal.checks import argument_names, checked_parameters, content_checked
from reviewers.analyzers.guard_removal.families import CLASS_CWE
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
from reviewers.analyzers.guard_removal.validators import AUTH_CLASSES, judge_call, repository_function
from reviewers.analyzers.python_auth import names_secret

_CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
_LOGIN_WORDS = ("login", "auth", "authenticated", "jwt", "token_required", "signed_in")
_PERMISSION_WORDS = ("permission", "role", "admin", "staff", "superuser", "passes_test", "owner")
_AUTH_ATTRIBUTES = frozenset({"is_authenticated", "is_anonymous", "is_active"})
_PERMISSION_ATTRIBUTES = frozenset({"has_perm", "has_perms", "has_permission", "is_staff", "is_superuser",
                                    "is_admin", "check_permission", "has_role", "can"})  # fmt: skip
_ROUTE_DECORATORS = frozenset({"route", "get", "post", "put", "patch", "delete", "api_route", "api_view",
                               "view_config"})  # fmt: skip
# A method named for an HTTP verb in a class of one of these kinds handles requests (Flask-RESTful's
# `Resource`, Flask's `MethodView`, Django's `View`, tornado's `RequestHandler`, DRF's `APIView`)
_VIEW_BASES = ("Resource", "View", "Handler", "ViewSet", "Endpoint")
_HTTP_VERBS = frozenset({"get", "post", "put", "patch", "delete", "head", "options"})
# the class attribute that names a view's permission classes (Django REST framework)
_PERMISSION_SETTINGS = frozenset({"permission_classes"})
# the class attributes that wrap every method of a view (Flask's `View.decorators`, Flask-RESTful's
# `Resource.method_decorators`)
_DECORATOR_SETTINGS = frozenset({"decorators", "method_decorators"})
_CHECK_WORDS = (*GUARD_WORDS, "check", "validate", "ensure", "verify", "require", "assert")
# A helper that applies a sanitizer for its caller is short; a longer function does more than clean
# its argument, and is not read for one.
MAX_WRAPPER_LINES = 15
_WILD = re.compile(r"\.\*|\.\+|\\S|\[\^")


MODULE_SCOPE = "<module>"
# Statements and calls one version of a file may cost (steps, not seconds: the same change gives the
# same answer on a busy machine). The largest module of this repository (1,500 lines) costs about
# 2,400 when every function of it is touched; past the budget the file is named as not checked.
MAX_SCAN_STEPS = 100_000


class ScanBudgetExceeded(Exception):
    """A version of a file cost more than `MAX_SCAN_STEPS`."""


def _text(lines: list[str], node: ast.AST) -> str:
    line = getattr(node, "lineno", 0)
    return lines[line - 1].strip() if 1 <= line <= len(lines) else ""


_NOTHING: frozenset[str] = frozenset()
_NESTED = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


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


def _decorator_name(decorator: ast.expr) -> str:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _auth_family(words: str) -> str | None:
    lowered = words.lower()
    if any(w in lowered for w in _PERMISSION_WORDS):
        return "permission"
    if any(w in lowered for w in _LOGIN_WORDS):
        return "login"
    return None


@dataclass
class _State:
    origins: dict[str, frozenset[str]] = field(default_factory=dict)
    carried: dict[str, tuple[Guard, ...]] = field(default_factory=dict)  # sanitizers a name's value went through
    parsed: dict[str, ast.expr] = field(default_factory=dict)  # names bound to `urlparse(x)`
    options: dict[str, tuple[int, dict[str, ast.expr]]] = field(default_factory=dict)  # `x = {"key": value}`
    ended: dict[str, int] = field(default_factory=dict)  # names bound to a command whose options `--` ends


class ModuleScan:
    """The sinks of every scope of one version of a module, by the scope's qualified name."""

    def __init__(self, project: Project, info: ModuleInfo, text: str, touched: frozenset[int] | None = None) -> None:
        """`touched`: the lines the change wrote or removed in this version; only the functions (and the
        module's own statements) that hold one are walked, so a review costs what the change touched.
        None walks everything."""
        self.project = project
        self.touched = sorted(touched) if touched is not None else None
        lowered = text.lower()
        self._mentions_credentials = any(h in lowered for h in _CREDENTIAL_HEADERS)
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
        self._verb_methods = {
            id(item)
            for cls in info.classes.values()
            if any(_dotted(b).rsplit(".", 1)[-1].endswith(_VIEW_BASES) for b in cls.bases)
            for item in cls.body
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in _HTTP_VERBS
        }
        self.views = [f for f in info.functions.values() if self._is_view(f)]
        self.scopes: dict[str, list[Sink]] = {}
        self._current = MODULE_SCOPE
        self._scan(info.tree.body, MODULE_SCOPE, None)

    # --- names ----------------------------------------------------------------------------------

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
            exempt = any(_decorator_name(d) == "csrf_exempt" for d in func.decorator_list)
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

    def unguarded_views(self, classes: frozenset[str]) -> list[FunctionNode]:
        """The views whose own decorators do not protect these classes."""
        return [v for v in self.views if not any(g.classes & classes for g in self._decorator_guards(v))]

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

    def _is_view(self, func: FunctionNode) -> bool:
        if id(func) in self._verb_methods:  # `class History(Resource): def get(self, uuid)`
            return True
        if any(_decorator_name(d) in _ROUTE_DECORATORS | {"csrf_exempt"} for d in func.decorator_list):
            return True
        params = [a.arg for a in func.args.args]
        return bool(params) and params[0] == "request" or (len(params) > 1 and params[:2] == ["self", "request"])

    def _class_guards(self, cls: ast.ClassDef) -> tuple[Guard, ...]:
        """What protects every method of a class-based view: an authentication mixin among its bases
        (`LoginRequiredMixin`), a decorator on the class (`method_decorator(login_required, ...)`), or
        its `permission_classes` (`IsAuthenticated`; `AllowAny` protects nothing)."""
        out = self._decorator_guards(cls)
        for base in cls.bases:
            if (family := _auth_family(_dotted(base).rsplit(".", 1)[-1])) is not None:
                out.append(Guard(family, AUTH_CLASSES, frozenset(), base.lineno, _text(self.lines, base)))
        for item in cls.body:
            if isinstance(item, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in _PERMISSION_SETTINGS for t in item.targets
            ):
                elements = item.value.elts if isinstance(item.value, ast.List | ast.Tuple) else [item.value]
                for element in elements:
                    if (family := _auth_family(_dotted(element).rsplit(".", 1)[-1])) is not None:
                        text = _text(self.lines, item)
                        out.append(Guard(family, AUTH_CLASSES, frozenset(), item.lineno, text, key=_dotted(element)))
            if isinstance(item, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in _DECORATOR_SETTINGS for t in item.targets
            ):  # `method_decorators = [auth.check_token]`: every method of the view is wrapped
                holder = ast.FunctionDef(name="", decorator_list=list(getattr(item.value, "elts", [item.value])))
                for guard in self._decorator_guards(holder):
                    out.append(replace(guard, line=item.lineno, text=_text(self.lines, item)))
        return tuple(out)

    def _decorator_guards(self, func: FunctionNode | ast.ClassDef) -> list[Guard]:
        out: list[Guard] = []
        for decorator in func.decorator_list:
            name = _decorator_name(decorator)
            if name == "method_decorator" and isinstance(decorator, ast.Call) and decorator.args:
                name = _dotted(decorator.args[0]).rsplit(".", 1)[-1]
            family = _auth_family(name)
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            judgement = judge_call(self.project, self.info, target)
            if judgement is not None and judgement.classes & AUTH_CLASSES:
                family = family or "login"
            elif judgement is not None or name in ("route", "csrf_exempt"):
                family = None
            if family is not None:
                out.append(Guard(family, AUTH_CLASSES, frozenset(), decorator.lineno, _text(self.lines, decorator)))
        return out

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

    def _module_guards(self) -> list[Guard]:
        """CSRF protection switched on for the app, and an authentication check run before every request."""
        out: list[Guard] = []
        for node in ast.walk(self.info.tree) if self._mentions_csrf else ():
            if isinstance(node, ast.Call):
                name = self.qualified(node.func)
                if name.endswith(("CSRFProtect", "CsrfProtect", "csrf.init_app", "SeaSurf")):
                    out.append(Guard("csrf", frozenset({"csrf"}), frozenset(), node.lineno,
                                     _text(self.lines, node), key="app"))  # fmt: skip
        for stmt in self.info.tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                _decorator_name(d) == "before_request" for d in stmt.decorator_list
            ):
                judged = _auth_family(" ".join(_dotted(n) for n in ast.walk(stmt) if isinstance(n, ast.Attribute)))
                if judged is not None or any(
                    isinstance(n, ast.Attribute) and n.attr in _AUTH_ATTRIBUTES for n in ast.walk(stmt)
                ):
                    out.append(Guard(judged or "login", AUTH_CLASSES, frozenset(), stmt.lineno, f"def {stmt.name}"))
        return out

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
            if top and reach is not None and (body_exits or else_exits):
                reach += self._auth_checks(stmt.test, stmt)
            self._branches += 1
            self._block(stmt.body, (*active, *positive), state, sinks, reach=reach)
            self._block(stmt.orelse, (*active, *negative), state, sinks, reach=reach)
            self._branches -= 1
            if body_exits and not else_exits:
                after = [*negative, *self._content_check(test, negative, stmt)]
                return (*active, *_leaving(after, stmt.body))
            if else_exits and not body_exits:
                after = [*positive, *self._content_check(test, positive, stmt)]
                return (*active, *_leaving(after, stmt.orelse))
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

    def _content_check(self, test: ast.expr, proven: list[Guard], stmt: ast.stmt) -> list[Guard]:
        """An early exit decided by a value's content that no rule reads (`checks`): a check of
        every class for the names it inspects and nothing proven here already covers."""
        covered = {n for g in proven for n in g.names}
        names = content_checked(test, self._is_local) - covered
        if not names:
            return []
        return [Guard("content-check", ALL_CLASSES, names, stmt.lineno, _text(self.lines, stmt))]

    def _is_local(self, name: str) -> bool:
        """A name a function binds (not a module, a constant or a module-level definition)."""
        return not (
            name in self.info.aliases
            or name.isupper()
            or name in self.constants
            or name in self.info.functions
            or name in self.info.classes
        )

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

    def _auth_call(self, call: ast.Call, stmt: ast.stmt) -> list[Guard]:
        """A call that checks the user and raises, named so (`require_login`, `check_permission`) or
        judged so by its body."""
        judgement = judge_call(self.project, self.info, call.func)
        family = _auth_family(_dotted(call.func).rsplit(".", 1)[-1])
        if judgement is not None and judgement.classes & AUTH_CLASSES:
            family = family or "login"
        elif judgement is not None or not any(w in _dotted(call.func).lower() for w in _CHECK_WORDS):
            family = None
        if family is None:
            return []
        return [Guard(family, AUTH_CLASSES, frozenset(), stmt.lineno, _text(self.lines, stmt))]

    def _auth_checks(self, test: ast.expr, stmt: ast.stmt) -> list[Guard]:
        attributes = {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
        calls = " ".join(_dotted(n.func) for n in ast.walk(test) if isinstance(n, ast.Call))
        family = "permission" if attributes & _PERMISSION_ATTRIBUTES else None
        family = family or ("login" if attributes & _AUTH_ATTRIBUTES else _auth_family(calls))
        if family is None:
            return []
        return [Guard(family, AUTH_CLASSES, frozenset(), stmt.lineno, _text(self.lines, stmt))]

    def _stripped_headers(self, expr: ast.AST, stmt: ast.stmt, around: ast.stmt | None = None) -> list[Guard]:
        """Credentials taken out of a request's headers: `del headers["Authorization"]`,
        `headers.pop("Cookie", None)`, or a loop over such names whose body drops them."""
        if not self._mentions_credentials:
            return []
        if around is not None and not any(
            isinstance(n, ast.Delete)
            or (isinstance(n, ast.Call) and _dotted(n.func).rsplit(".", 1)[-1] in ("pop", "remove", "discard"))
            for n in ast.walk(around)
        ):
            return []
        out: list[Guard] = []
        for node in ast.walk(expr):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.lower() in _CREDENTIAL_HEADERS:
                    out.append(Guard("header-strip", frozenset({"credentials"}), frozenset(), stmt.lineno,
                                     _text(self.lines, stmt), key=node.value.lower()))  # fmt: skip
        return out

    def _checking_call(self, call: ast.Call, stmt: ast.stmt) -> list[Guard]:
        """A call on its own line that raises unless its argument is safe: a repository validator
        judged by its body, or, when its body says nothing, one named for checking."""
        judgement = judge_call(self.project, self.info, call.func)
        names = frozenset(n for a in call.args for n in self.names(a))
        text = _text(self.lines, stmt)
        if judgement is not None:
            if not judgement.works:
                self.broken.setdefault(self._current, {})[_dotted(call.func)] = judgement.why
            works = judgement.works
            return [Guard("validator", judgement.classes, names, stmt.lineno, text, leaves=True)] if works else []
        short = _dotted(call.func).rsplit(".", 1)[-1].lower()
        target = repository_function(self.project, self.info, call.func) if names else None
        if target is not None and any(w in short for w in _CHECK_WORDS):
            return [Guard("validator", ALL_CLASSES | {"dos"}, names, stmt.lineno, text, leaves=True)]
        if target is not None and (checked := self._checked_arguments(call, target)):
            return [Guard("validator", ALL_CLASSES | {"dos"}, checked, stmt.lineno, text, leaves=True)]
        return []

    def _checked_arguments(self, call: ast.Call, target: FunctionNode) -> frozenset[str]:
        """The names of the arguments a repository helper raises on unless their content passes."""
        if id(target) not in self._checked:
            self._checked[id(target)] = checked_parameters(target)
        wanted = self._checked[id(target)]
        return frozenset(n for a in argument_names(call, target, wanted) for n in self.names(a)) if wanted else _NOTHING

    def _sanitizers(self, expr: ast.expr) -> list[Guard]:
        """The sanitizers (and repository validators that return the cleaned value) in an expression."""
        out: list[Guard] = []
        for node in self.subtree(expr)[1]:
            if isinstance(node, ast.Call):
                if id(node) not in self._sanitized:
                    self._sanitized[id(node)] = self._sanitizer(node)
                if (guard := self._sanitized[id(node)]) is not None:
                    out.append(guard)
        return out

    def _sanitizer(self, node: ast.Call) -> Guard | None:
        name = self.qualified_of.get(id(node)) or self.qualified(node.func)
        short = name.rsplit(".", 1)[-1]
        names = frozenset(n for a in node.args for n in self.names(a))
        text = _text(self.lines, node)
        classes = SANITISERS.get(name) or SANITISERS.get(short)
        if classes is not None:
            family = "safe-join" if short == "safe_join" else "escape" if "xss" in classes else "sanitizer"
            return Guard(family, classes, names, node.lineno, text, key=short)
        if (judgement := judge_call(self.project, self.info, node.func)) is not None and judgement.works:
            return Guard("validator", judgement.classes, names, node.lineno, text)
        target = repository_function(self.project, self.info, node.func) if names else None
        if judgement is None and target is not None and (checked := self._checked_arguments(node, target)):
            return Guard("validator", ALL_CLASSES, checked, node.lineno, text)  # a check moved into a helper
        if (inner := self._wrapped_sanitizer(node.func)) is not None:
            return Guard(inner[0], inner[1], names, node.lineno, text, key=inner[2])
        return None

    def _wrapped_sanitizer(self, func: ast.expr) -> tuple[str, frozenset[str], str] | None:
        """(family, classes, key) of the sanitizer a repository or nested function applies to what it
        is given: `def conditional_escape(text): return escape(text) if autoescape else text` escapes.
        A sanitizer moved into a helper is still applied."""
        target = repository_function(self.project, self.info, func)
        if target is None and isinstance(func, ast.Name):
            target = self._local_defs.get(func.id)
        if target is None or (target.end_lineno or target.lineno) - target.lineno > MAX_WRAPPER_LINES:
            return None
        if id(target) not in self._wrappers:
            found: tuple[str, frozenset[str], str] | None = None
            for node in ast.walk(target):
                if isinstance(node, ast.Call):
                    name = self.qualified(node.func)
                    short = name.rsplit(".", 1)[-1]
                    classes = SANITISERS.get(name) or SANITISERS.get(short)
                    if classes is not None:
                        family = "safe-join" if short == "safe_join" else "escape" if "xss" in classes else "sanitizer"
                        found = (family, classes, short)
                        break
            self._wrappers[id(target)] = found
        return self._wrappers[id(target)]

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
        if not classes and (call.args or call.keywords):
            classes |= helper_sink_classes(self.project, self.info, call, self._current, self.is_const)
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
        applying = tuple(
            g for g in active if (not g.names or g.names & names) and (g.family != "size-limit" or consumer or classes)
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
