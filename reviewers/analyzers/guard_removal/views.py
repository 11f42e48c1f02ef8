"""What protects a view (or any function that checks its caller's rights): authentication and
permission decorators, mixins and permission classes, checks of the user in its body, CSRF
protection and login hooks for the whole app, and credential headers stripped from a request."""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from reviewers.analyzers.flow.project import FunctionNode
from reviewers.analyzers.flow.rules import GUARD_WORDS
from reviewers.analyzers.guard_removal.model import Guard
from reviewers.analyzers.guard_removal.model import dotted as _dotted
from reviewers.analyzers.guard_removal.scan_base import ScanBase, _text
from reviewers.analyzers.guard_removal.validators import AUTH_CLASSES, judge_call, refuses_access

CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
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
CHECK_WORDS = (*GUARD_WORDS, "check", "validate", "ensure", "verify", "require", "assert")
_ENDINGS = ("", "s", "d", "ed", "er", "ing", "ly")


def named_for_checking(name: str, extra: tuple[str, ...] = ()) -> bool:
    """Whether a function's name says it checks: one of its words is a check word (`validate_path`,
    `is_safe_url`, `require_login`), not a word that merely starts like one (`fetch_checkout_data`)."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    return any(word == w + end for word in words for w in (*CHECK_WORDS, *extra) for end in _ENDINGS)


# What a refusal returns: an error response, a redirect to the login page, a 401 or 403.
_REFUSALS = ("redirect", "forbidden", "denied", "unauthori", "login", "no_permission", "error", "abort", "reject")


def denies(branch: list[ast.stmt]) -> bool:
    """Whether a branch that leaves the function refuses (raises, aborts, returns nothing or an error)
    rather than answers: `if not user.is_staff: raise PermissionDenied` guards what follows, `if
    user.is_staff: return Entry.objects.all()` only chooses what to show."""
    last = branch[-1] if branch else None
    if isinstance(last, ast.Raise):
        return True
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        return True  # `abort(403)`: `_exits` accepted it as leaving
    if not isinstance(last, ast.Return):
        return False
    if last.value is None or (isinstance(last.value, ast.Constant) and last.value.value in (None, False)):
        return True
    for node in ast.walk(last.value):
        if isinstance(node, ast.Constant) and node.value in (401, 403) and not isinstance(node.value, bool):
            return True
        if isinstance(node, ast.Call) and any(w in _dotted(node.func).lower() for w in _REFUSALS):
            return True
        if isinstance(node, ast.Name | ast.Attribute) and any(w in _dotted(node).lower() for w in _REFUSALS):
            return True
    return False


def decorator_name(decorator: ast.expr) -> str:
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


class ViewGuards(ScanBase):
    """The view-level guards of a module; `protections.ModuleScan` walks the rest."""

    _mentions_credentials: bool
    _mentions_csrf: bool
    views: list[FunctionNode]
    _verb_methods: set[int]

    def _view_methods(self) -> set[int]:
        """The methods named for an HTTP verb in a class-based view (`class History(Resource): def get`)."""
        return {
            id(item)
            for cls in self.info.classes.values()
            if any(_dotted(b).rsplit(".", 1)[-1].endswith(_VIEW_BASES) for b in cls.bases)
            for item in cls.body
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in _HTTP_VERBS
        }

    def unguarded_views(self, classes: frozenset[str]) -> list[FunctionNode]:
        """The views whose own decorators do not protect these classes."""
        return [v for v in self.views if not any(g.classes & classes for g in self._decorator_guards(v))]

    def _is_view(self, func: FunctionNode) -> bool:
        if id(func) in self._verb_methods:  # `class History(Resource): def get(self, uuid)`
            return True
        if any(decorator_name(d) in _ROUTE_DECORATORS | {"csrf_exempt"} for d in func.decorator_list):
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
                wrappers = item.value.elts if isinstance(item.value, ast.List | ast.Tuple) else [item.value]
                for guard in self._guards_of_decorators(wrappers):
                    out.append(replace(guard, line=item.lineno, text=_text(self.lines, item)))
        return tuple(out)

    def _decorator_guards(self, func: FunctionNode | ast.ClassDef) -> list[Guard]:
        return self._guards_of_decorators(func.decorator_list)

    def _guards_of_decorators(self, decorators: list[ast.expr]) -> list[Guard]:
        out: list[Guard] = []
        for decorator in decorators:
            name = decorator_name(decorator)
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
                decorator_name(d) == "before_request" for d in stmt.decorator_list
            ):
                judged = _auth_family(" ".join(_dotted(n) for n in ast.walk(stmt) if isinstance(n, ast.Attribute)))
                if judged is not None or any(
                    isinstance(n, ast.Attribute) and n.attr in _AUTH_ATTRIBUTES for n in ast.walk(stmt)
                ):
                    out.append(Guard(judged or "login", AUTH_CLASSES, frozenset(), stmt.lineno, f"def {stmt.name}"))
        return out

    def _auth_call(self, call: ast.Call, stmt: ast.stmt) -> list[Guard]:
        """A call that checks the user and raises, named so (`require_login`, `check_permission`) or
        judged so by its body."""
        judgement = judge_call(self.project, self.info, call.func)
        family = _auth_family(_dotted(call.func).rsplit(".", 1)[-1])
        if judgement is not None and judgement.classes & AUTH_CLASSES:
            family = family or "login"
        elif judgement is not None or not named_for_checking(_dotted(call.func)):
            family = None
        if family is None:
            return []
        return [Guard(family, AUTH_CLASSES, frozenset(), stmt.lineno, _text(self.lines, stmt))]

    def _refusing_call(self, call: ast.Call, stmt: ast.stmt) -> list[Guard]:
        """A repository function whose value is used and whose body refuses the caller (raises
        `PermissionDenied`, answers 403) or checks the user: the check moved into a helper."""
        judgement = judge_call(self.project, self.info, call.func)
        if judgement is None or not judgement.classes & AUTH_CLASSES:
            return []
        return [Guard("permission", AUTH_CLASSES, frozenset(), stmt.lineno, _text(self.lines, stmt))]

    def _auth_checks(self, test: ast.expr, stmt: ast.stmt, refusal: list[ast.stmt]) -> list[Guard]:
        """The check of the user an `if` is, whose `refusal` branch leaves the function: known by the
        attributes and calls it reads, or by the refusal itself (`raise PermissionDenied`, a 403)."""
        attributes = {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
        calls = " ".join(_dotted(n.func) for n in ast.walk(test) if isinstance(n, ast.Call))
        family = "permission" if attributes & _PERMISSION_ATTRIBUTES else None
        family = family or ("login" if attributes & _AUTH_ATTRIBUTES else _auth_family(calls))
        if family is None and any(  # `not user_may_grant_token(user)`: a helper whose body checks the user
            (j := judge_call(self.project, self.info, n.func)) is not None and j.classes & AUTH_CLASSES
            for n in ast.walk(test)
            if isinstance(n, ast.Call)
        ):
            family = "permission"
        if family is None and refuses_access(refusal):
            family = "permission"
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
                if node.value.lower() in CREDENTIAL_HEADERS:
                    out.append(Guard("header-strip", frozenset({"credentials"}), frozenset(), stmt.lineno,
                                     _text(self.lines, stmt), key=node.value.lower()))  # fmt: skip
        return out
