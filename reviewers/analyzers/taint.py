"""Where outside data enters a Python function, and whether a value still carries it.

A *source* is data someone outside the process chose: a web request's parameters, body, headers,
cookies, files and path parameters (Flask, Django, Starlette/FastAPI, aiohttp shapes); the
parameters of a function registered as a route; command-line arguments (`sys.argv`, argparse's
`parse_args()`); the environment; interactive input; and data read from a file or a socket. A value
is *tainted* when it is a source or is computed from one; taint follows assignments inside one
function until nothing changes. Sanitisers are not modelled: each sink says what check it accepts.

Parsing is not executing: everything here reads the syntax tree.
"""

from __future__ import annotations

import ast

from reviewers.kernel.contracts import Severity

# `request.args["x"]`, `request.GET.get("x")`, `request.query_params`, `await request.json()`, ...
REQUEST_NAMES = frozenset({"request", "req", "flask.request", "self.request"})
REQUEST_PARTS = frozenset(
    {"args", "form", "values", "GET", "POST", "FILES", "COOKIES", "META", "query_params", "path_params", "json",
     "get_json", "data", "body", "files", "headers", "cookies", "query", "params", "match_info", "query_string",
     "content", "text", "stream", "form_data", "url", "path", "full_path"}
)  # fmt: skip
# Calls whose result is outside data whatever their arguments.
SOURCE_CALLS = frozenset(
    {"input", "raw_input", "os.getenv", "os.environ.get", "sys.stdin.read", "sys.stdin.readline", "click.prompt",
     "typer.prompt", "getpass.getpass", "socket.recv", "json.load", "yaml.safe_load"}
)  # fmt: skip
# Methods that read data from a file, a socket or a stream.
READ_METHODS = frozenset({"read", "readline", "readlines", "read_text", "read_bytes", "recv", "recvfrom"})
SOURCE_ATTRIBUTES = frozenset({"sys.argv", "os.environ"})
ROUTE_DECORATORS = frozenset(
    {"route", "get", "post", "put", "patch", "delete", "api_route", "websocket", "api_view", "view_config"}
)


def dotted(expr: ast.expr) -> str:
    """`a.b.c` for a chain of attributes on a name, else ""."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return ""
    parts.append(expr.id)
    return ".".join(reversed(parts))


def is_route(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A function registered as a web route (`@app.get(...)`, `@router.post`, `@api_view`)."""
    for decorator in func.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
        if name in ROUTE_DECORATORS:
            return True
    return False


def _parameters(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = func.args
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return {n for n in names if n not in ("self", "cls")}


class Taint:
    """The tainted local names of one function, and a test for any expression in it."""

    def __init__(self, func: ast.FunctionDef | ast.AsyncFunctionDef, nodes: list[ast.AST], aliases: dict[str, str]):
        self.aliases = aliases
        self.names: set[str] = _parameters(func) if is_route(func) else set()
        self.names |= {"request"} & _parameters(func)  # a handler's request object, by any framework
        assignments: list[tuple[list[str], ast.expr]] = []
        for node in nodes:
            if isinstance(node, ast.Assign):
                assignments.append(
                    ([n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)], node.value)
                )
            elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name) and node.value:
                assignments.append(([node.target.id], node.value))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                assignments.append(([n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)], node.iter))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                names = [n.id for n in ast.walk(node.optional_vars) if isinstance(n, ast.Name)]
                assignments.append((names, node.context_expr))
        changed = True
        while changed:  # to a fixed point: `a = request.args["p"]; b = a.strip(); path = BASE / b`
            changed = False
            for targets, value in assignments:
                if self.tainted(value) and not set(targets) <= self.names:
                    self.names |= set(targets)
                    changed = True

    def _qualified(self, expr: ast.expr) -> str:
        name = dotted(expr)
        if not name:
            return ""
        head, _, rest = name.partition(".")
        resolved = self.aliases.get(head, head)
        return f"{resolved}.{rest}" if rest else resolved

    def is_source(self, expr: ast.expr) -> bool:
        name = self._qualified(expr)
        if name in SOURCE_ATTRIBUTES:
            return True
        if isinstance(expr, ast.Attribute):
            owner = dotted(expr.value)
            if expr.attr in REQUEST_PARTS and (owner in REQUEST_NAMES or owner.endswith(".request")):
                return True
        if isinstance(expr, ast.Call):
            called = self._qualified(expr.func)
            if called in SOURCE_CALLS or called.endswith(".parse_args"):
                return True
            if isinstance(expr.func, ast.Attribute) and expr.func.attr in READ_METHODS:
                return True
        return False

    def tainted(self, expr: ast.expr) -> bool:
        """Whether any part of the expression is a source or a tainted name."""
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id in self.names:
                return True
            if isinstance(node, ast.expr) and self.is_source(node):
                return True
        return False


# sink (qualified call name or method name) → (rule, kind, severity, title, body)
Sink = tuple[str, str, Severity, str, str]
TAINT_SINKS: dict[str, Sink] = {}
_TEMPLATE: Sink = ("python:template-injection", "template", "high", "Template built from outside data",
             "Whoever controls the template text runs code in the template engine (server-side template "
             "injection). Keep templates fixed and pass the data as context variables.")  # fmt: skip
_REDIRECT: Sink = ("python:open-redirect", "redirect", "medium", "Redirect to a URL taken from the request",
             "An attacker can send users to any site through this trusted address (phishing, token theft). "
             "Redirect only to relative paths or to an allow-list of hosts.")  # fmt: skip
_SSRF: Sink = ("python:ssrf", "ssrf", "medium", "Outbound request to a URL taken from outside data",
         "The server will fetch whatever address it is given, internal services and cloud metadata included "
         "(server-side request forgery). Check the host against an allow-list before the request.")  # fmt: skip
_XML: Sink = ("python:xml-external", "xml", "medium", "Outside XML parsed by a parser that resolves entities",
        "Entity expansion and external entities let a crafted document read local files or exhaust memory. "
        "Parse untrusted XML with defusedxml.")  # fmt: skip
for _name in (
    "jinja2.Template",
    "Template",
    "render_template_string",
    "flask.render_template_string",
    "from_string",
    "mako.template.Template",
    "django.template.Template",
):
    TAINT_SINKS[_name] = _TEMPLATE
for _name in (
    "redirect",
    "flask.redirect",
    "RedirectResponse",
    "starlette.responses.RedirectResponse",
    "fastapi.responses.RedirectResponse",
    "HttpResponseRedirect",
    "django.shortcuts.redirect",
):
    TAINT_SINKS[_name] = _REDIRECT
for _lib in ("requests", "httpx"):
    for _verb in ("get", "post", "put", "patch", "delete", "head", "request", "stream"):
        TAINT_SINKS[f"{_lib}.{_verb}"] = _SSRF
for _name in ("urllib.request.urlopen", "urlopen", "urllib.request.Request"):
    TAINT_SINKS[_name] = _SSRF
for _name in (
    "xml.etree.ElementTree.fromstring",
    "xml.etree.ElementTree.parse",
    "xml.etree.ElementTree.XML",
    "lxml.etree.fromstring",
    "lxml.etree.parse",
    "lxml.etree.XML",
    "xml.dom.minidom.parseString",
    "xml.dom.minidom.parse",
    "xml.sax.parseString",
    "xml.sax.parse",
):
    TAINT_SINKS[_name] = _XML
