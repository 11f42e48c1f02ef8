"""Validators judged by what their body does, not by their name.

A repository function called as a guard (`if not is_safe_url(target): abort(400)`, `check_path(name)`,
`@require_login`) protects only what its body checks. A redirect check must constrain both the scheme
and the host (`javascript:alert(1)` has no host; `//evil.example` has no scheme); a containment check
must compare resolved paths (`realpath`/`resolve` with `is_relative_to`, `commonpath` or `startswith`),
not characters (`os.path.commonprefix("/srv/app2", "/srv/app")` is "/srv/app") and not a string
replacement (`"....//".replace("../", "")` is "../"). A function known not to work is no guard, and
a flow "guarded" only by it is reported as if unguarded.

What this does not catch: a validator whose body delegates to another repository function (judged
by the callee's name only), and checks split across several functions.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from reviewers.analyzers.flow.project import FunctionNode, ModuleInfo, Project

URL_CLASSES = frozenset({"redirect", "ssrf"})
PATH_CLASSES = frozenset({"path"})
AUTH_CLASSES = frozenset({"auth"})
_HOST_PARTS = frozenset({"netloc", "hostname", "host"})
_URL_PARSERS = frozenset({"urlparse", "urlsplit", "urlunparse", "URL", "furl", "parse_url"})
_KNOWN_URL_VALIDATORS = frozenset({"url_has_allowed_host_and_scheme"})
_NORMALISERS = frozenset({"realpath", "abspath", "resolve", "normpath", "absolute"})
_PATH_COMPARES = frozenset({"is_relative_to", "commonpath", "startswith", "relative_to"})
_SAFE_JOINS = frozenset({"safe_join"})
_AUTH_ATTRIBUTES = frozenset({"is_authenticated", "is_anonymous", "has_perm", "has_perms", "has_permission",
                              "is_staff", "is_superuser", "is_admin", "check_permission", "has_role"})  # fmt: skip


# Exceptions that refuse a request for want of authentication or permission.
_DENIALS = frozenset({"PermissionDenied", "Forbidden", "Unauthorized", "NotAuthenticated", "HTTPForbidden",
                      "HTTPUnauthorized", "AuthenticationFailed", "NotAuthorized"})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Judgement:
    """The sink classes a validator's body really protects (empty: it is known not to work), and why."""

    classes: frozenset[str]
    why: str

    @property
    def works(self) -> bool:
        return bool(self.classes)


def _short(expr: ast.expr) -> str:
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Name):
        return expr.id
    return ""


# A review judges each validator once per place it is asked from; the key is the function's node.
JUDGED_CACHE_SIZE = 512


@functools.lru_cache(maxsize=JUDGED_CACHE_SIZE)
def judge_body(func: FunctionNode) -> Judgement | None:
    """What a repository function's body checks, or None when it is not a check this module reads."""
    calls: set[str] = set()
    attributes: set[str] = set()
    replaces_dots = False
    schemes = False  # the scheme constrained by name, or by asking for a path that starts with "/"
    for node in ast.walk(func):
        if isinstance(node, ast.Call):
            name = _short(node.func)
            calls.add(name)
            if name == "startswith" and node.args and isinstance(node.args[0], ast.Constant):
                schemes = schemes or node.args[0].value == "/"
            if name == "replace" and node.args:
                first = node.args[0]
                replaces_dots = replaces_dots or (
                    isinstance(first, ast.Constant) and isinstance(first.value, str) and ".." in first.value
                )
        elif isinstance(node, ast.Attribute):
            attributes.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            schemes = schemes or node.value.rstrip(":/").lower() in ("http", "https", "javascript", "data")
    if calls & _KNOWN_URL_VALIDATORS:
        return Judgement(URL_CLASSES, "delegates to url_has_allowed_host_and_scheme")
    if calls & _URL_PARSERS or attributes & (_HOST_PARTS | {"scheme"}):
        host, scheme = bool(attributes & _HOST_PARTS), "scheme" in attributes or schemes
        if host and scheme:
            return Judgement(URL_CLASSES, "checks the URL's scheme (or that it is a path) and host")
        missing = "scheme" if host else "host"
        return Judgement(
            frozenset(),
            f"checks the URL's {'host' if host else 'scheme'} but not its {missing}, so a URL such as "
            f"{'`javascript:...` or `///evil.example`' if host else '`https://evil.example`'} passes",
        )
    if calls & _SAFE_JOINS:
        return Judgement(PATH_CLASSES, "joins with safe_join")
    normalised = bool(calls & _NORMALISERS)
    compares = bool(calls & _PATH_COMPARES)
    if "commonprefix" in calls and not calls & {"commonpath", "is_relative_to", "relative_to"}:
        return Judgement(
            frozenset(),
            "compares paths with os.path.commonprefix, which compares characters, not path components "
            "(`/srv/app-secrets` shares the prefix `/srv/app`), and does not resolve `..`",
        )
    if normalised and compares:
        return Judgement(PATH_CLASSES, "compares the resolved path with its base")
    if replaces_dots:
        return Judgement(
            frozenset(),
            "removes `../` by string replacement, which `....//` survives (it becomes `../`), and "
            "leaves absolute paths alone",
        )
    if attributes & _AUTH_ATTRIBUTES or calls & _AUTH_ATTRIBUTES:
        return Judgement(AUTH_CLASSES, "checks the user's authentication or permissions")
    if _denies(func):
        return Judgement(AUTH_CLASSES, "refuses the request with 401 or 403 unless its check passes")
    return None


def _denies(func: FunctionNode) -> bool:
    """Whether a function answers 401/403 or raises an authorization error on some path: a
    decorator's wrapper that refuses the request unless an API key matches is an authentication check
    whatever it is called."""
    return refuses_access([func])


def refuses_access(code: list[ast.stmt]) -> bool:
    """Whether code answers 401/403 or raises an authorization error (`PermissionDenied`) somewhere."""
    for node in (n for stmt in code for n in ast.walk(stmt)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if _short(raised) in _DENIALS:
                return True
        elif isinstance(node, ast.Return | ast.Call):
            if any(isinstance(c, ast.Constant) and c.value in (401, 403) and not isinstance(c.value, bool)
                   for c in ast.walk(node)):  # fmt: skip
                return True
    return False


def repository_function(project: Project, info: ModuleInfo, func: ast.expr) -> FunctionNode | None:
    """The repository function a call names (in this module or one it imports), or None."""
    name = _dotted(func)
    if not name:
        return None
    if name in info.functions:
        return info.functions[name]
    head, _, rest = name.partition(".")
    target = info.aliases.get(head)
    if target is None:
        return None
    found = project.resolve(f"{target}.{rest}" if rest else target, info.path)
    if found is None:
        return None
    module, inner = found
    return module.functions.get(inner)


def _dotted(expr: ast.expr) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        inner = _dotted(expr.value)
        return f"{inner}.{expr.attr}" if inner else ""
    return ""


def judge_call(project: Project, info: ModuleInfo, func: ast.expr) -> Judgement | None:
    """The judgement of the repository function a call names, or None."""
    target = repository_function(project, info, func)
    return judge_body(target) if target is not None else None


def judged_classes(project: Project, info: ModuleInfo, func: ast.expr) -> frozenset[str] | None:
    """The classes a called repository validator protects by its body (empty: none, it does not
    work), or None when the call is no repository function or its body is not a check read here."""
    judgement = judge_call(project, info, func)
    if judgement is None or judgement.classes == AUTH_CLASSES:
        return None  # a check of the user says nothing about a value: the engine keeps reading its name
    return judgement.classes
