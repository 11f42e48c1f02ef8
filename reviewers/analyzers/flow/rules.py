"""What the taint interpreter knows by name: sources, sanitisers, and sinks with their CWE.

Sources are data a person outside the process chose: a web request's parameters, body, headers,
cookies and files (Flask, Django, Starlette/FastAPI, aiohttp shapes), the path and query parameters
of a route handler, command-line arguments and interactive input. The environment, files and
configuration are not sources for injection: the people who set them already run code here.

A sanitiser clears the sink classes it makes safe and no others: `html.escape` makes text safe in
HTML, not in a redirect; `shlex.quote` in a shell command, not in SQL. Conversions to numbers and
UUIDs clear everything.

A route parameter whose converter takes no "/" (Flask's `<name>`/`<string:name>`, Starlette's
`{name}`) is a path-traversal source only once something follows it in the path (`base / name / "x"`
may climb one level with `..`); as the last component it names an entry of its directory. Numeric and
UUID converters are no source at all. Django's converters live in the URLconf, away from the view,
and are not read: a Django view's parameters stay sources whatever their converter.

A query builder (SQLAlchemy's `select`/`insert`/`update`/`delete`, `session.query`, `Model.query`,
Django's `Model.objects`, and every method chained on what they return) binds the values it is given
as parameters: its statement is no SQL text, and `exists()`/`stat()` on it are no file checks. SQL
text stays SQL wherever it goes: `text(...)`, `.raw(...)`, `.extra(...)`, and text spliced into a
builder's positional argument are still sinks.

What this does not catch: sinks reached through `getattr`/dynamic dispatch, frameworks' own wrappers
that are not named here, and data that a project's own code reads from a database (a stored XSS).
Nor a plain (not spliced) request string given to a builder's positional argument that old
SQLAlchemy (< 1.4) coerced to SQL (`.filter(request.args["where"])`, `.order_by(sort)`), nor a
builder the project reaches by a name not listed in `sinks` (a query returned by its own helper is
followed; one from an unknown library call is not). A shared path-method name (`exists`, `stat`) on
a receiver of unknown type still counts as a path check.
"""

from __future__ import annotations

from dataclasses import dataclass

from reviewers.kernel.contracts import Severity


@dataclass(frozen=True, slots=True)
class SinkClass:
    name: str
    cwe: str
    rule: str
    kind: str  # the family `merge_issues` and the verifier's sink check group by
    severity: Severity
    title: str
    body: str


def _sink(name: str, cwe: str, rule: str, kind: str, severity: Severity, title: str, body: str) -> SinkClass:
    return SinkClass(name, cwe, rule, kind, severity, title, body)


SINKS: dict[str, SinkClass] = {
    s.name: s
    for s in (
        _sink("sql", "CWE-89", "python:sql-interpolation", "sql", "high", "SQL statement built from request data",
              "A crafted value changes the statement (SQL injection). Pass values as bound parameters "
              "(`execute(sql, params)`), never spliced into the text."),
        _sink("command", "CWE-78", "python:shell-interpolation", "shell", "high",
              "Command run through a shell with request data in it",
              "Shell metacharacters in the value run arbitrary commands. Pass an argument list without a shell, "
              "or quote the value with shlex.quote."),
        _sink("code", "CWE-94", "python:code-eval", "code-exec", "high", "Request data evaluated as Python code",
              "eval/exec run whatever the value contains. Parse data with json or ast.literal_eval, or map the "
              "input to an allow-list of operations."),
        _sink("deserialization", "CWE-502", "python:unsafe-deserialization", "deserialization", "high",
              "Request data deserialised by a loader that can run code",
              "pickle, marshal, yaml.load and their kin rebuild arbitrary objects, so whoever writes the input runs "
              "code here. Use a data-only format (JSON, yaml.safe_load)."),
        _sink("path", "CWE-22", "python:path-traversal", "path-traversal", "high",
              "File path built from request data without a containment check",
              "A name such as `../../etc/passwd` (or an absolute path) escapes the intended directory. Reduce the "
              "name to its last component (os.path.basename, secure_filename) or resolve the joined path and check "
              "it stays inside the base."),
        _sink("redirect", "CWE-601", "python:open-redirect", "redirect", "medium",
              "Redirect to a URL taken from the request",
              "An attacker sends users to any site through this trusted address (phishing, token theft). Redirect "
              "only to relative paths or to an allow-list of hosts; HTML escaping does not help here."),
        _sink("xxe", "CWE-611", "python:xml-external", "xml", "high",
              "Request XML parsed with external entities enabled",
              "This parser is configured to resolve external entities, so a crafted document reads local files or "
              "reaches internal hosts. Keep resolve_entities=False / feature_external_ges off, or use defusedxml."),
        _sink("xpath", "CWE-643", "python:xpath-injection", "xpath", "high",
              "XPath expression built from request data",
              "Quotes in the value change the query (XPath injection). Pass values as XPath variables "
              "(`tree.xpath('//u[@name=$n]', n=value)`)."),
        _sink("ldap", "CWE-90", "python:ldap-injection", "ldap", "high", "LDAP filter built from request data",
              "Parentheses and `*` in the value change the filter (LDAP injection). Escape it with "
              "ldap.filter.escape_filter_chars (or ldap3's escape_filter_chars)."),
        _sink("xss", "CWE-79", "python:reflected-xss", "xss", "high", "HTML response built from request data",
              "Markup in the value runs as script in the victim's browser (reflected XSS). Render through an "
              "autoescaping template or escape with html.escape / markupsafe.escape."),
        _sink("trust-boundary", "CWE-501", "python:trust-boundary", "trust-boundary", "medium",
              "Request data stored in the session",
              "The session is trusted by later requests; storing unchecked request data there mixes trusted and "
              "untrusted values. Validate it against an allow-list or a type first."),
        _sink("template", "CWE-1336", "python:template-injection", "template", "high",
              "Template built from request data",
              "Whoever controls the template text runs code in the template engine (server-side template "
              "injection). Keep templates fixed and pass the data as context variables."),
        _sink("ssrf", "CWE-918", "python:ssrf", "ssrf", "medium", "Outbound request to a URL taken from the request",
              "The server fetches whatever address it is given, internal services and cloud metadata included "
              "(server-side request forgery). Check the host against an allow-list first."),
        _sink("header", "CWE-113", "python:header-injection", "header", "medium",
              "HTTP header or request line built from request data",
              "A carriage return and line feed in the value end the header and start new ones (header injection, "
              "response or request splitting). Reject CR and LF, or build the value from an allow-list."),
        _sink("weak-random", "CWE-330", "python:weak-random", "weak-random", "high",
              "Secret value made with the non-cryptographic `random` module",
              "`random` is a predictable generator: tokens, session ids, passwords and salts made with it can be "
              "guessed. Use the `secrets` module (secrets.token_urlsafe, secrets.choice)."),
    )
}  # fmt: skip
ALL_CLASSES = frozenset(SINKS)
# Sinks where data of unknown origin (a parameter nobody is known to fill from outside) still earns
# a low-confidence note for a person: the damage is code execution.
LOW_WHEN_UNKNOWN = frozenset({"sql", "command", "code", "deserialization"})

# --- sources ---------------------------------------------------------------------------------------
REQUEST_NAMES = frozenset({"request", "req", "flask.request", "quart.request", "bottle.request"})
REQUEST_PROXIES = frozenset({"flask.request", "quart.request", "bottle.request"})  # the module-level request objects
REQUEST_PARTS = frozenset(
    {"args", "form", "values", "GET", "POST", "FILES", "COOKIES", "META", "query_params", "path_params", "json",
     "get_json", "data", "get_data", "body", "files", "headers", "cookies", "query", "params", "match_info",
     "query_string", "content", "text", "stream", "post", "read", "url", "path", "full_path", "raw_uri",
     # tornado's HTTPServerRequest
     "arguments", "query_arguments", "body_arguments", "uri"}
)  # fmt: skip
# Interactive input only. What a program reads from its standard input is what its operator (or the
# parent process that started it) pipes in: a file they chose, of unknown origin like any file it reads.
SOURCE_CALLS = frozenset({"input", "raw_input", "click.prompt", "typer.prompt"})
SOURCE_ATTRIBUTES = frozenset({"sys.argv"})
ROUTE_DECORATORS = frozenset(
    {"route", "get", "post", "put", "patch", "delete", "api_route", "websocket", "api_view", "view_config"}
)
# Parameters of a route handler that the framework fills with its own objects, not request data.
FRAMEWORK_PARAMS = frozenset({"self", "cls", "db", "session", "response", "background_tasks", "settings", "app"})
REQUEST_ANNOTATIONS = frozenset({"Request", "HttpRequest", "WSGIRequest", "BaseRequest", "web.Request"})
CLEAN_ANNOTATIONS = frozenset({"int", "float", "bool", "UUID", "uuid.UUID", "datetime", "date", "Decimal"})
FRAMEWORK_DEFAULTS = frozenset({"Depends", "Security"})

WEAK_RANDOM = frozenset(
    {f"random.{n}" for n in ("random", "randint", "randrange", "choice", "choices", "sample", "getrandbits",
                              "uniform", "randbytes", "shuffle")}
)  # fmt: skip

# --- sanitisers --------------------------------------------------------------------------------------
# Calls whose result carries nothing of their arguments that any sink cares about.
CLEAN_CALLS = frozenset(
    {"int", "float", "bool", "complex", "len", "abs", "round", "ord", "hash", "id", "isinstance", "uuid.UUID",
     "UUID", "decimal.Decimal", "Decimal", "hmac.compare_digest", "secrets.compare_digest", "url_for",
     "flask.url_for", "reverse", "django.urls.reverse", "os.urandom", "time.time", "datetime.datetime.now"}
)  # fmt: skip
_PATH_NAMES = ("os.path.basename", "posixpath.basename", "ntpath.basename", "werkzeug.utils.secure_filename",
               "secure_filename", "django.utils.text.get_valid_filename", "get_valid_filename",
               "werkzeug.security.safe_join", "werkzeug.utils.safe_join", "safe_join", "flask.safe_join")  # fmt: skip
_HTML_ESCAPES = ("html.escape", "markupsafe.escape", "flask.escape", "escape", "django.utils.html.escape",
                 "django.utils.html.conditional_escape", "bleach.clean", "cgi.escape", "Markup.escape",
                 "xml.sax.saxutils.escape", "jsonify", "flask.jsonify", "render_template", "flask.render_template",
                 "django.shortcuts.render", "render", "JSONResponse", "urllib.parse.quote",
                 "urllib.parse.quote_plus", "tornado.escape.xhtml_escape", "xhtml_escape")  # fmt: skip
SANITISERS: dict[str, frozenset[str]] = {
    **{n: frozenset({"path"}) for n in _PATH_NAMES},
    **{n: frozenset({"xss"}) for n in _HTML_ESCAPES},
    **{n: frozenset({"command"}) for n in ("shlex.quote", "pipes.quote", "shlex.join")},
    # percent-encoding leaves no CR or LF: the text stays one header value or request line
    **{n: frozenset({"xss", "header"}) for n in ("urllib.parse.quote", "urllib.parse.quote_plus")},
    # a query string: `k=v&…`, every value percent-encoded ("/" included), so it names no scheme or host
    **{n: frozenset({"xss", "header", "redirect", "ssrf"}) for n in ("urllib.parse.urlencode", "urlencode")},
    **{n: frozenset({"ldap"}) for n in ("ldap.filter.escape_filter_chars", "ldap3.utils.conv.escape_filter_chars",
                                         "escape_filter_chars", "ldap.dn.escape_dn_chars", "escape_dn_chars")},
    **{n: frozenset({"sql"}) for n in ("psycopg2.sql.Literal", "psycopg2.sql.Identifier", "psycopg.sql.Literal",
                                        "psycopg.sql.Identifier", "sql.Literal", "sql.Identifier")},
}  # fmt: skip
# Calls that join their arguments into one path, in order: the last one is the path's last component.
PATH_JOINS = frozenset(
    {"os.path.join", "posixpath.join", "ntpath.join", "pathlib.Path", "pathlib.PurePath", "pathlib.PurePosixPath",
     "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PureWindowsPath", "anyio.Path", "trio.Path"}
)  # fmt: skip
NORMALISERS = frozenset({"os.path.realpath", "os.path.abspath", "os.path.normpath", "posixpath.normpath"})
# Methods whose result is a bool, a number or hex digits: nothing of the receiver's text survives.
CLEAN_METHODS = frozenset(
    {"startswith", "endswith", "isdigit", "isnumeric", "isdecimal", "isalnum", "isalpha", "isidentifier", "isascii",
     "islower", "isupper", "isspace", "count", "find", "rfind", "index", "exists", "is_file", "is_dir",
     "is_relative_to", "is_absolute", "__len__", "__contains__", "keys",
     # a hash's hex digest: hex digits only, whatever was hashed (a table or file named by a digest)
     "hexdigest"}
)  # fmt: skip
# Methods that take the place of their receiver's last path component (Path(x).name).
PATH_NAME_ATTRIBUTES = frozenset({"name", "stem", "suffix"})
# Calls after which the function does not go on.
ABORTS = frozenset({"abort", "flask.abort", "sys.exit", "exit", "os._exit", "quit", "fastapi.HTTPException"})
# Guards by name: a call whose name says it checks the value clears everything in the branch it guards.
GUARD_WORDS = ("safe", "allowed", "valid", "permitted", "whitelist", "allowlist", "trusted")
REDIRECT_GUARDS = frozenset(
    {"url_has_allowed_host_and_scheme", "django.utils.http.url_has_allowed_host_and_scheme", "is_safe_url"}
)
