"""What the taint interpreter reads off the syntax alone: dotted names, literal text, whether an
expression splices values into text, route decorators and their converters, and the words of an
identifier (a secret's name, a database handle's)."""

from __future__ import annotations

import ast
import re

from reviewers.analyzers.flow import sinks as S
from reviewers.analyzers.flow.project import FunctionNode
from reviewers.analyzers.flow.rules import ROUTE_DECORATORS


def words(identifier: str) -> set[str]:
    out: set[str] = set()
    for part in identifier.replace("-", "_").split("_"):
        buf = ""
        for ch in part:
            if ch.isupper() and buf and not buf[-1].isupper():
                out.add(buf.lower())
                buf = ch
            else:
                buf += ch
        if buf:
            out.add(buf.lower())
    return out


_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "pwd", "nonce", "salt", "otp", "csrf", "xsrf",
                           "session", "sessionid", "apikey", "passphrase"})  # fmt: skip

_KEY_QUALIFIERS = frozenset({"api", "secret", "private", "signing", "access", "encryption", "auth"})


def names_secret(identifier: str) -> bool:
    found = words(identifier)
    if "key" in found and found & _KEY_QUALIFIERS:
        return True
    return bool(found & _SECRET_WORDS) and not found & {"length", "len", "count", "type", "name", "timeout", "url"}


def is_route(func: FunctionNode) -> bool:
    for decorator in func.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
        if name in ROUTE_DECORATORS and not _mock_patch(decorator):
            return True
    return False


def _mock_patch(decorator: ast.expr) -> bool:
    """`@mock.patch("os.path.exists")`, `@patch.object(...)`: a test's mock, not an HTTP PATCH route,
    whose path starts with "/" (or is empty under a router's prefix)."""
    if not isinstance(decorator, ast.Call):
        return False
    owner = dotted(decorator.func.value) if isinstance(decorator.func, ast.Attribute) else ""
    first = const_text(decorator.args[0]) if decorator.args else None
    return owner.endswith("mock") or (first is not None and first != "" and not first.startswith("/"))


# `<name>`, `<string:name>`, `<path:name>`, `<int(signed=True):name>` (Flask, Quart, Werkzeug); `{name}`,
# `{name:path}` (Starlette, FastAPI).
_ROUTE_FIELD = re.compile(r"<(?:(?P<conv>\w+)(?:\([^)]*\))?:)?(?P<name>\w+)>|\{(?P<sname>\w+)(?::(?P<sconv>\w+))?\}")

# Converters whose value holds no "/": a text segment, or a number or UUID (no path at all).
SEGMENT_CONVERTERS = frozenset({"", "default", "string", "str", "any"})

NUMBER_CONVERTERS = frozenset({"int", "float", "uuid"})


def route_converters(func: FunctionNode) -> dict[str, str]:
    """Parameter name → converter ("" for the default) of the placeholders in a route decorator's path."""
    found: dict[str, str] = {}
    for decorator in func.decorator_list:
        if not isinstance(decorator, ast.Call):
            continue
        given = [*decorator.args[:1], *(k.value for k in decorator.keywords if k.arg in ("rule", "path"))]
        path = next((text for text in map(const_text, given) if text is not None), None)
        for match in _ROUTE_FIELD.finditer(path or ""):
            name = match.group("name") or match.group("sname")
            found[name] = match.group("conv") or match.group("sconv") or ""
    return found


def dotted(expr: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return ""
    parts.append(expr.id)
    return ".".join(reversed(parts))


def const_text(expr: ast.expr) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def fragments(expr: ast.expr) -> str:
    """The literal text of an expression: what a shape check reads (`"SELECT ... {x}"` → "SELECT ... ")."""
    return " ".join(n.value for n in ast.walk(expr) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def interpolates(expr: ast.expr) -> bool:
    """Whether the expression splices values into text (an f-string, `%`, `.format`, `+`)."""
    if isinstance(expr, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) for v in expr.values)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod | ast.Add):
        return True
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("format", "join")


_DATABASE_WORDS = frozenset({"cursor", "cur", "conn", "connection", "db", "database", "session", "engine", "con",
                             "c", "txn", "tx", "transaction", "sql", "pool", "objects"})  # fmt: skip

_DATABASE_MODULES = ("sqlite3", "psycopg", "psycopg2", "sqlalchemy", "mysql", "MySQLdb", "pymysql", "aiosqlite",
                     "asyncpg", "django.db", "pandas")  # fmt: skip


def database_like(receiver: str, qualified: str) -> bool:
    """Whether a receiver reads as a database handle (`cur`, `self.conn`, `db.session`, `sqlite3...`)."""
    if qualified.startswith(_DATABASE_MODULES):
        return True
    last = receiver.rsplit(".", 1)[-1]
    return bool(words(last) & _DATABASE_WORDS) if last else True  # a call's result (`conn.cursor().execute`)


def model_manager(expr: ast.expr) -> bool:
    """Whether an expression is a model class's query manager (`User.query`, `Book.objects`): a
    class name, by its capital, not a request's `query`."""
    if not (isinstance(expr, ast.Attribute) and expr.attr in S.ORM_MANAGERS):
        return False
    owner = dotted(expr.value).rsplit(".", 1)[-1]
    return owner[:1].isupper()
