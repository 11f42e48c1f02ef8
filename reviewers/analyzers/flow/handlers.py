"""Sources and sinks with more shape than a qualified name: request handler classes, UI frameworks'
input components, archive members, HTTP clients, git's command wrappers, JavaScript evaluators,
and parsers whose safety depends on the library version the project pins.

Request data arrives on `self` in two handler styles the route decorators do not show:

- tornado's `RequestHandler`: `self.get_argument(...)` and its kin, `self.request.path/body/
  arguments/uri/headers`, and the path arguments of `get(self, ...)`/`post(self, ...)`; what
  `self.redirect(...)` is sent to is a redirect, what `self.write(...)`/`self.finish(...)` writes as
  text is HTML (tornado's default content type);
- `http.server.BaseHTTPRequestHandler`: `self.path`, `self.headers`, `self.requestline` and what
  `self.rfile` reads; `self.send_header(name, value)` writes the value unchecked (CWE-113), and a
  `Location` header is a redirect.

A class counts when it derives from one of those, directly or through the project's own base
classes (followed into other modules). UI frameworks: what a streamlit input widget returns
(`st.text_input`, `st.query_params`, ...) and what a gradio event hands its function (the `fn` of
`gr.Interface`, `.click(fn, ...)`, `.submit(...)`, ...) is what the app's user typed.

An archive's member names (`ZipFile.namelist()`, `infolist()`'s `.filename`, `TarFile.getmembers()`'s
`.name`, `getnames()`) are chosen by whoever made the archive: a path source (zip slip, CWE-22) and
nothing else. HTTP clients built from a class (`requests.Session()`, `httpx.Client()`,
`aiohttp.ClientSession()`, `urllib3.PoolManager()`) send where their methods are told (SSRF);
`http.client`'s `putheader`/`putrequest` and pycurl's `setopt(HTTPHEADER)` write header text,
`setopt(URL)` chooses where to connect. GitPython's `repo.git.<command>(...)`, `Git().execute(...)` and
`Repo.clone_from(url, ...)` run git with the values as its arguments (an option such as
`--upload-pack=...` runs a command). JavaScript evaluators (`js2py.eval_js`, `execjs.eval`, a
`MiniRacer().eval`) run their text as code.

lxml before 5.0 resolves entities by default: `etree.XMLParser()` without `resolve_entities=False`,
and `etree.fromstring/parse` without a parser, read local files named by a document's entities
(XXE). From 5.0 the default resolves internal entities only, so the default counts as unsafe only
where the repository pins lxml below 5 (requirements, pyproject.toml, setup.cfg, setup.py).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from reviewers.analyzers.flow import sinks as S
from reviewers.analyzers.flow.project import FunctionNode, ModuleInfo, Project
from reviewers.analyzers.flow.rules import ALL_CLASSES
from reviewers.analyzers.flow.syntax import dotted
from reviewers.analyzers.flow.values import CONSTANT, Origin, Value, of

if TYPE_CHECKING:
    from reviewers.analyzers.flow.engine import Interpreter

TORNADO = "tornado"
HTTP_SERVER = "http.server"
# An offline command (a Django management command): run by a developer, not handed a request; a
# `request` it passes around is one it built itself (`RequestFactory().get("/")`).
COMMAND = "command"
HANDLER_BASES: dict[str, str] = {
    **dict.fromkeys(("tornado.web.RequestHandler", "tornado.websocket.WebSocketHandler"), TORNADO),
    **dict.fromkeys(
        ("http.server.BaseHTTPRequestHandler", "http.server.SimpleHTTPRequestHandler",
         "http.server.CGIHTTPRequestHandler", "BaseHTTPServer.BaseHTTPRequestHandler",
         "SimpleHTTPServer.SimpleHTTPRequestHandler"),
        HTTP_SERVER,
    ),
    **dict.fromkeys(
        ("django.core.management.base.BaseCommand", "django.core.management.base.LabelCommand",
         "django.core.management.base.AppCommand", "django.core.management.BaseCommand"),
        COMMAND,
    ),
}  # fmt: skip
MAX_BASE_DEPTH = 4
TORNADO_ARGUMENT_CALLS = frozenset(
    {"get_argument", "get_arguments", "get_query_argument", "get_query_arguments", "get_body_argument",
     "get_body_arguments", "get_cookie", "decode_argument"}
)  # fmt: skip
TORNADO_VERBS = frozenset({"get", "post", "put", "patch", "delete", "head", "options", "open", "on_message"})
HTTP_SERVER_ATTRIBUTES = frozenset({"path", "headers", "requestline", "raw_requestline"})

STREAMLIT_INPUTS = frozenset(
    {"text_input", "text_area", "chat_input", "file_uploader", "experimental_get_query_params", "data_editor"}
)
GRADIO_BUILDERS = frozenset({"gradio.Interface", "gradio.ChatInterface", "gradio.TabbedInterface"})
GRADIO_LISTENERS = frozenset(
    {"click", "submit", "change", "input", "upload", "select", "blur", "release", "stop", "play", "stream", "then",
     "success", "load"}
)  # fmt: skip

ARCHIVE_ENTRY = "<archive member>"  # a ZipInfo / TarInfo: its name is the archive maker's
ARCHIVE_NAMES = frozenset({"namelist", "getnames"})
ARCHIVE_ENTRIES = frozenset({"infolist", "getmembers", "getinfo", "getmember"})
ARCHIVE_NAME_ATTRIBUTES = frozenset({"filename", "name", "path", "linkname", "orig_filename"})
MEMBER_NAME = "an archive member's name"
ONLY_PATH = ALL_CLASSES - {"path"}

HTTP_CLIENT = "<http client>"
HTTP_CLIENT_CLASSES = frozenset(
    {"requests.Session", "requests.session", "requests.sessions.Session", "httpx.Client", "httpx.AsyncClient",
     "aiohttp.ClientSession", "urllib3.PoolManager", "urllib3.ProxyManager"}
)  # fmt: skip
HTTP_VERBS = frozenset({"get", "post", "put", "patch", "delete", "head", "options", "stream", "ws_connect"})
HTTP_URL_SECOND = frozenset({"request", "urlopen", "build_request"})  # (method, url, ...)
HTTP_LIBRARIES = ("requests", "httpx", "aiohttp", "urllib3")
CLIENT_WORDS = frozenset({"session", "client", "http", "http_client", "_session", "_client", "_http", "sess"})

GIT_COMMAND = "<git command>"
GIT_CLASSES = frozenset({"git.Git", "git.cmd.Git"})
GIT_CLONE = frozenset({"git.Repo.clone_from", "git.repo.Repo.clone_from", "git.repo.base.Repo.clone_from"})

JS_CONTEXT = "<javascript context>"
JS_CLASSES = frozenset({"py_mini_racer.MiniRacer", "py_mini_racer.py_mini_racer.MiniRacer", "js2py.EvalJs",
                        "execjs.get", "execjs.compile", "quickjs.Context"})  # fmt: skip
JS_EVAL_METHODS = frozenset({"eval", "execute", "exec_"})
JS_LIBRARIES = ("py_mini_racer", "js2py", "execjs", "quickjs")

# `lxml==4.9.3`, `"lxml>=4.6,<5"`, poetry's `lxml = "^4.9"`, Pipfile's `lxml = "==4.9"`: the requirement's specifiers
_LXML_REQUIREMENT = re.compile(
    r"""(?im)(?<![\w.-])lxml(?![\w.-])\s*(?:\[[^\]]*\])?\s*(?:=(?!=)\s*)?["']?(?P<spec>[^"'\n#;]*)"""
)
_UPPER_BOUND = re.compile(r"(==|<=|<|~=|\^|~(?!=))\s*(\d+)")
DEPENDENCY_FILES = ("requirements.txt", "requirements/base.txt", "requirements/prod.txt", "pyproject.toml",
                    "setup.cfg", "setup.py", "Pipfile")  # fmt: skip


# --- which handler a class is ------------------------------------------------------------------------


def handler_kind(project: Project | None, info: ModuleInfo, class_name: str | None, depth: int = 0) -> str | None:
    """`TORNADO`, `HTTP_SERVER`, `COMMAND`, or None: what a class derives from, through the project's own bases."""
    if class_name is None or depth > MAX_BASE_DEPTH:
        return None
    cls = info.classes.get(class_name)
    if cls is None:
        return None
    key = f"handler::{info.path}::{class_name}"
    if project is not None and key in project.facts:
        found = project.facts[key]
        return found if isinstance(found, str) else None
    kind: str | None = None
    for base in cls.bases:
        name = dotted(base)
        head, _, rest = name.partition(".")
        qualified = f"{info.aliases.get(head, head)}.{rest}" if rest else info.aliases.get(head, head)
        if qualified in HANDLER_BASES:
            kind = HANDLER_BASES[qualified]
        elif name in info.classes and name != class_name:
            kind = handler_kind(project, info, name, depth + 1)
        elif project is not None and head in info.aliases:
            found = project.resolve(qualified, info.path)
            if found is not None and found[1] in found[0].classes:
                kind = handler_kind(project, found[0], found[1], depth + 1)
        if kind is not None:
            break
    if project is not None:
        project.facts[key] = kind
    return kind


def _on_self(interp: Interpreter, expr: ast.expr) -> bool:
    return isinstance(expr, ast.Name) and expr.id == interp.self_name()


def _kind(interp: Interpreter) -> str | None:
    return handler_kind(interp.project, interp.module, interp.class_name)


def _imports(info: ModuleInfo, roots: tuple[str, ...]) -> bool:
    return any(dotted.split(".")[0] in roots for dotted in info.aliases.values())


# --- sources -------------------------------------------------------------------------------------------


def self_attribute(interp: Interpreter, expr: ast.Attribute) -> Value | None:
    """What `self.<attr>` holds in a request handler: request data or the request object."""
    if not _on_self(interp, expr.value):
        return None
    kind = _kind(interp)
    if kind == TORNADO and expr.attr == "request":
        return of({Origin("request", "self.request", line=expr.lineno)})
    if kind == HTTP_SERVER:
        if expr.attr in HTTP_SERVER_ATTRIBUTES:
            return of({Origin("source", f"self.{expr.attr}", line=expr.lineno)})
        if expr.attr == "rfile":
            return of({Origin("request", "self.rfile", line=expr.lineno)})
    return None


def source_call(interp: Interpreter, call: ast.Call, name: str) -> Value | None:
    """Request data a call returns: tornado's argument getters, streamlit's input widgets."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in TORNADO_ARGUMENT_CALLS and _on_self(interp, func.value):
        if _kind(interp) == TORNADO:
            return of({Origin("source", f"self.{func.attr}()", line=call.lineno)})
    if name.startswith("streamlit.") and name.rsplit(".", 1)[-1] in STREAMLIT_INPUTS:
        return of({Origin("source", f"{name}()", line=call.lineno)})
    return None


def streamlit_attribute(name: str, line: int) -> Value | None:
    if name in ("streamlit.query_params", "streamlit.experimental_get_query_params"):
        return of({Origin("source", name, line=line)})
    return None


def ui_handlers(info: ModuleInfo) -> frozenset[str]:
    """The functions a gradio app hands its users' input to (computed once per module)."""
    cached = info.ui_handlers
    if cached is not None:
        return cached
    found: set[str] = set()
    if _imports(info, ("gradio",)):
        for node in ast.walk(info.tree):
            if isinstance(node, ast.Call):
                found.update(_gradio_functions(info, node))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    if isinstance(target, ast.Attribute) and target.attr in GRADIO_LISTENERS:
                        found.add(node.name)
    info.ui_handlers = frozenset(found)
    return info.ui_handlers


def _gradio_functions(info: ModuleInfo, call: ast.Call) -> list[str]:
    func = call.func
    name = dotted(func)
    head, _, rest = name.partition(".")
    qualified = f"{info.aliases.get(head, head)}.{rest}" if rest else info.aliases.get(head, head)
    listener = isinstance(func, ast.Attribute) and func.attr in GRADIO_LISTENERS
    if qualified not in GRADIO_BUILDERS and not listener:
        return []
    if listener and qualified.split(".")[0] != "gradio" and head in info.aliases:
        return []  # `json.load(...)`: another library's method of the same name
    given = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "fn")]
    return [g.id for g in given if isinstance(g, ast.Name)]


def entry_source(info: ModuleInfo, func: FunctionNode, class_name: str | None, param: str, project: Project | None) -> (
    Value | None
):  # fmt: skip
    """Request data a handler's parameter holds: tornado's path arguments, a gradio function's input."""
    if class_name is not None:
        if func.name in TORNADO_VERBS and handler_kind(project, info, class_name) == TORNADO:
            return of({Origin("source", f"route parameter `{param}`", line=func.lineno)})
        return None
    if func.name in ui_handlers(info):
        return of({Origin("source", f"gradio input `{param}`", line=func.lineno)})
    return None


# --- values of library objects -----------------------------------------------------------------------


def constructed(name: str) -> Value | None:
    """The object a library constructor returns, where its methods are sinks."""
    if name in HTTP_CLIENT_CLASSES:
        return Value(cls=HTTP_CLIENT)
    if name in GIT_CLASSES:
        return Value(cls=GIT_COMMAND)
    if name in JS_CLASSES:
        return Value(cls=JS_CONTEXT)
    return None


def member_names(attr: str, line: int) -> Value | None:
    """What an archive's listing returns: its members' names (or entries), the archive maker's choice."""
    if attr in ARCHIVE_NAMES:
        return of({Origin("source", MEMBER_NAME, cleared=ONLY_PATH, line=line)})
    if attr in ARCHIVE_ENTRIES:
        return of({Origin("source", ARCHIVE_ENTRY, cleared=ALL_CLASSES, line=line)})
    return None


def entry_attribute(value: Value, attr: str) -> Value | None:
    """`.filename` / `.name` of an archive entry: the member's name."""
    entries = [o for o in value.origins if o.kind == "source" and o.what == ARCHIVE_ENTRY]
    if not entries or attr not in ARCHIVE_NAME_ATTRIBUTES:
        return None
    return of({Origin("source", MEMBER_NAME, cleared=ONLY_PATH, line=o.line) for o in entries})


# --- sinks ---------------------------------------------------------------------------------------------


def check_sinks(
    interp: Interpreter, call: ast.Call, name: str, receiver: Value | None, args: list[Value], kwargs: dict[str, Value]
) -> bool:
    """Report the sinks this module knows at a call; True when the call was one of them."""
    func = call.func
    attr = func.attr if isinstance(func, ast.Attribute) else ""
    if name in GIT_CLONE:
        for expr, value in _given(call, args, kwargs, (0,), ("url", "multi_options")):
            interp.sink(call, "command", value, name, argument=expr)
        return True
    if name == "numpy.load":
        pickle = next((k.value for k in call.keywords if k.arg == "allow_pickle"), None)
        if isinstance(pickle, ast.Constant) and pickle.value is True:
            for expr, value in _given(call, args, kwargs, (0,), ("file",)):
                interp.sink(call, "deserialization", value, "numpy.load(allow_pickle=True)",
                            low=interp.worth_a_look("deserialization", expr, value), argument=expr)  # fmt: skip
        return True
    if name in S.XML_PARSE_CALLS and name.startswith("lxml") and lxml_resolves_by_default(interp.project):
        parser = kwargs.get("parser") or (args[1] if len(args) > 1 else None)
        if parser is None and args:
            interp.sink(call, "xxe", args[0], f"{name} (lxml < 5 resolves entities by default)")
            return True
        return False
    if receiver is None or not attr:
        return False
    if not isinstance(func, ast.Attribute):
        return False
    if _on_self(interp, func.value):
        return _handler_sinks(interp, call, attr, args, kwargs)
    owner = dotted(func.value)
    if receiver.cls == HTTP_CLIENT or (
        attr in HTTP_VERBS | HTTP_URL_SECOND
        and owner.rsplit(".", 1)[-1].lower() in CLIENT_WORDS
        and interp.qualified(func.value) != "flask.session"
        and _imports(interp.module, HTTP_LIBRARIES)
    ):
        if attr in HTTP_VERBS:
            spec = (0,)
        elif attr in HTTP_URL_SECOND:
            spec = (1,)
        else:
            return False
        for expr, value in _given(call, args, kwargs, spec, ("url",)):
            interp.sink(call, "ssrf", value, f"{owner or '…'}.{attr}", argument=expr)
        return True
    if receiver.cls == GIT_COMMAND or (owner.endswith(".git") and _imports(interp.module, ("git",))):
        values = [args[0]] if attr == "execute" and args else args
        for value in values:
            parts = value.seq if value.seq is not None else (value,)
            for part in parts:
                interp.sink(call, "command", part, f"{owner or 'git'}.{attr} (git's arguments)")
        return True
    if attr in JS_EVAL_METHODS and (receiver.cls == JS_CONTEXT or _imports(interp.module, JS_LIBRARIES)):
        if args:
            interp.sink(call, "code", args[0], f"{owner or '…'}.{attr} (JavaScript)", argument=call.args[0])
        return True
    if attr == "putheader" and len(args) > 1:
        for value in args[1:]:
            interp.sink(call, "header", value, f"{owner or '…'}.putheader")
        return True
    if attr == "putrequest" and len(args) > 1:
        interp.sink(call, "header", args[1], f"{owner or '…'}.putrequest (the request line)")
        return True
    if attr == "setopt" and len(call.args) == 2 and _imports(interp.module, ("pycurl",)):
        option = dotted(call.args[0]).rsplit(".", 1)[-1]
        if option in ("URL", "PROXY", "CURLOPT_URL"):
            interp.sink(call, "ssrf", args[1], f"{owner or '…'}.setopt({option})")
        elif option in ("HTTPHEADER", "PROXYHEADER", "COOKIE", "USERAGENT", "REFERER"):
            value = args[1]
            for part in value.seq if value.seq is not None else (value,):
                interp.sink(call, "header", part, f"{owner or '…'}.setopt({option})")
        return True
    return False


def _handler_sinks(interp: Interpreter, call: ast.Call, attr: str, args: list[Value], kwargs: dict[str, Value]) -> bool:
    kind = _kind(interp)
    if kind == TORNADO:
        if attr == "redirect":
            for expr, value in _given(call, args, kwargs, (0,), ("url",)):
                interp.sink(call, "redirect", value, "self.redirect", argument=expr)
            return True
        if attr in ("write", "finish") and call.args:
            chunk = call.args[0]
            value = args[0]
            if not isinstance(chunk, ast.Dict | ast.List) and value.items is None and not _not_html(interp):
                interp.sink(call, "xss", value, f"self.{attr} (tornado's response, text/html)", argument=chunk)
            return True
    if kind == HTTP_SERVER and attr == "send_header" and len(args) == 2:
        header = call.args[0]
        text = header.value if isinstance(header, ast.Constant) and isinstance(header.value, str) else ""
        if text.lower() == "location":
            interp.sink(call, "redirect", args[1], "a Location header (send_header)")
        interp.sink(call, "header", args[1], "self.send_header")
        return True
    return False


def _not_html(interp: Interpreter) -> bool:
    """Whether the handler method sets a content type other than HTML (`self.set_header("Content-Type",
    "application/json")`): what it writes is then no page."""
    if interp.func is None:
        return False
    for node in ast.walk(interp.func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in ("set_header", "add_header") or len(node.args) != 2:
            continue
        name, value = node.args
        if isinstance(name, ast.Constant) and str(name.value).lower() == "content-type":
            return not (isinstance(value, ast.Constant) and "html" in str(value.value).lower())
    return False


def _given(
    call: ast.Call, args: list[Value], kwargs: dict[str, Value], positions: tuple[int, ...], keywords: tuple[str, ...]
) -> list[tuple[ast.expr, Value]]:
    out: list[tuple[ast.expr, Value]] = []
    for position in positions:
        if position < len(call.args) and not isinstance(call.args[position], ast.Starred):
            out.append((call.args[position], args[position]))
    out += [(k.value, kwargs[k.arg]) for k in call.keywords if k.arg in keywords]
    return out


# --- library versions --------------------------------------------------------------------------------


def lxml_resolves_by_default(project: Project) -> bool:
    """Whether the repository pins lxml below 5, whose default parser resolves entities."""
    key = "lxml<5"
    if key not in project.facts:
        pinned = False
        for path in DEPENDENCY_FILES:
            text = project.read_file(path)
            if text is None:
                continue
            pinned = pinned or any(lxml_below_5(m.group("spec")) for m in _LXML_REQUIREMENT.finditer(text))
        project.facts[key] = pinned
    return project.facts[key] is True


def lxml_below_5(spec: str) -> bool:
    """Whether a requirement's specifiers keep lxml below 5 (`==4.9.3`, `>=4.6,<5`, `^4.9`, `~=4.2`)."""
    for operator, number in _UPPER_BOUND.findall(spec):
        major = int(number)
        if major < 5 or (operator == "<" and major == 5):
            return True
    return False


def unsafe_parser(call: ast.Call, project: Project) -> Value:
    """An lxml parser factory's result: unsafe when it resolves external entities."""
    entities = next((k.value for k in call.keywords if k.arg == "resolve_entities"), None)
    if entities is None:
        return Value(cls=S.UNSAFE_PARSER) if lxml_resolves_by_default(project) else CONSTANT
    unsafe = isinstance(entities, ast.Constant) and entities.value is True
    return Value(cls=S.UNSAFE_PARSER) if unsafe else CONSTANT
