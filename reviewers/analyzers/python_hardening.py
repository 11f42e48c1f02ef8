"""Security defects a Python syntax tree shows without following data: cookies set without their
flags (CWE-614, CWE-1004), md5/sha1 used for a password or a signature (CWE-328), and credentials
written into the code (CWE-798).

- `python:insecure-cookie`: `set_cookie(...)` with `secure` or `httponly` absent or literally False
  (every framework's default is off). A flag passed as a variable is the caller's choice and says
  nothing; a deletion (`max_age=0`, empty value) carries no data.
- `python:weak-hash`: hashlib.md5/sha1 (or `hashlib.new("md5")`) whose input names a password or
  secret, or whose result is stored as a password, signature or token, or computed in a function
  that signs or hashes passwords. `usedforsecurity=False`, checksums and cache keys say nothing.
  HMAC with sha1 is not reported (still sound as a MAC: TOTP and OAuth 1 use it).
- `python:hardcoded-credential`: a string literal that reads like a real credential (digits or
  symbols, or long) assigned to, passed as, compared with, or defaulted for a credential name.
  Placeholders, environment variable names, field names and empty values say nothing.

What this does not catch: credentials assembled from pieces, cookies set through raw
`Set-Cookie` headers, and hashes chosen through a variable algorithm name.
"""

from __future__ import annotations

import ast
import re

from reviewers.analyzers.flow.syntax import dotted, words
from reviewers.kernel.contracts import Confidence, Severity

HardeningIssue = tuple[
    ast.AST, str, str, Severity, str, str, str, Confidence
]  # node, rule, kind, sev, title, body, cwe, conf

_WEAK_HASHES = frozenset({"hashlib.md5", "hashlib.sha1", "md5", "sha1", "Crypto.Hash.MD5.new", "Crypto.Hash.SHA.new"})
_PASSWORD_WORDS = frozenset({"password", "passwd", "pwd", "passphrase", "secret", "credential", "credentials"})
_PURPOSE_WORDS = _PASSWORD_WORDS | frozenset({"signature", "sig", "signed", "sign", "token"})
_CREDENTIAL_WORDS = frozenset({"password", "passwd", "pwd", "passphrase", "secret", "apikey", "token"})
_KEY_QUALIFIERS = frozenset({"api", "secret", "private", "access", "signing", "auth", "encryption"})
_NOT_A_VALUE_WORDS = frozenset({"name", "names", "field", "fields", "header", "url", "uri", "path", "file", "env",
                                "var", "prefix", "type", "length", "len", "min", "max", "label", "hint", "prompt",
                                "param", "key", "endpoint", "policy", "format", "pattern", "regex", "attr", "column",
                                "id", "template", "placeholder", "message", "msg", "error", "kind", "mode", "scope",
                                "expiry", "expires", "ttl", "timeout", "count", "encoding", "method"})  # fmt: skip
_PLACEHOLDER = re.compile(
    r"(?i)(example|changeme|change[_\-]?me|dummy|placeholder|xxx|\*\*\*|redacted|your[_\-]|<[^>]*>|\$\{|\{\{|%\(|%s|"
    r"fake|sample|todo|^test|^none$|^null$|^secret$|^password$|\{[a-z_]*\}|"
    r"^(?:string|str|int|bool|boolean|number|object|any|bytes)\??$)"
)
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]+$")
MIN_CREDENTIAL_CHARS = 6
LONG_CREDENTIAL_CHARS = 12


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def credential_name(name: str) -> bool:
    """Whether an identifier (or a dict key shaped like one) names a credential's value."""
    if not _IDENTIFIER.match(name):
        return False  # "python:weak-password-hash", "a password" are text, not a field
    found = words(name)
    if found & _NOT_A_VALUE_WORDS - {"key"}:
        return False
    if "key" in found:
        return bool(found & _KEY_QUALIFIERS)
    return bool(found & _CREDENTIAL_WORDS)


def credential_literal(expr: ast.expr | None, name: str = "") -> bool:
    if not (isinstance(expr, ast.Constant) and isinstance(expr.value, str)):
        return False
    value = expr.value
    if name and not words(name) & (_CREDENTIAL_WORDS - {"token"}) and "key" not in words(name):
        # "token" alone names lexer tokens as often as credentials: only a long random-looking value
        mixed = any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
        if len(value) < LONG_CREDENTIAL_CHARS + 4 or not mixed or not value.replace("-", "").replace("_", "").isalnum():
            return False
    if len(value) < MIN_CREDENTIAL_CHARS or any(c.isspace() for c in value) or _PLACEHOLDER.search(value):
        return False
    if _ENV_NAME.match(value) or value.startswith(("/", "$", "%", "http://", "https://", ".")) or "://" in value:
        return False
    symbols = any(not c.isalpha() for c in value)
    return symbols or len(value) >= LONG_CREDENTIAL_CHARS


def _target_name(target: ast.expr) -> str:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if (
        isinstance(target, ast.Subscript)
        and isinstance(target.slice, ast.Constant)
        and isinstance(target.slice.value, str)
    ):
        return target.slice.value
    return ""


def _cookie(call: ast.Call) -> HardeningIssue | None:
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "set_cookie"):
        return None
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords:
        return None  # **options: the flags come from elsewhere
    value = call.args[1] if len(call.args) > 1 else keywords.get("value")
    deleting = any(
        isinstance(keywords.get(k), ast.Constant) and getattr(keywords.get(k), "value", None) == 0
        for k in ("max_age", "expires")
    ) or (isinstance(value, ast.Constant) and value.value == "")
    if deleting or value is None:
        return None

    def off(flag: str) -> bool:
        given = keywords.get(flag)
        return given is None or (isinstance(given, ast.Constant) and not given.value)

    if off("secure"):
        return (call, "python:insecure-cookie", "cookie", "medium", "Cookie set without the Secure flag",
                "Without `secure=True` the browser also sends this cookie over plain HTTP, where anyone on the "
                "network reads it. Set secure=True (and httponly=True unless scripts must read it).",
                "CWE-614", "high")  # fmt: skip
    if off("httponly"):
        return (call, "python:insecure-cookie", "cookie", "medium", "Cookie set without the HttpOnly flag",
                "Without `httponly=True` any script on the page (an injected one included) can read this "
                "cookie. Set httponly=True unless client code must read it.", "CWE-1004", "high")  # fmt: skip
    return None


def _weak_hash(call: ast.Call, qualified: str, purpose: set[str]) -> HardeningIssue | None:
    algorithm = qualified
    if qualified == "hashlib.new" and call.args:
        first = call.args[0]
        algorithm = (
            f"hashlib.{first.value.lower()}" if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
        )
    if algorithm not in _WEAK_HASHES:
        return None
    if any(k.arg == "usedforsecurity" and isinstance(k.value, ast.Constant) and k.value.value is False
           for k in call.keywords):  # fmt: skip
        return None
    inputs = {
        w
        for a in call.args[1 if qualified == "hashlib.new" else 0 :]
        for n in ast.walk(a)
        if isinstance(n, ast.Name | ast.Attribute)
        for w in words(n.id if isinstance(n, ast.Name) else n.attr)
    }
    if not (inputs & _PASSWORD_WORDS or purpose & _PURPOSE_WORDS):
        return None
    short = algorithm.rsplit(".", 1)[-1]
    return (call, "python:weak-hash", "weak-hash", "high", f"{short} used for a password or signature",
            f"{short} is broken for security: collisions are cheap and it is fast to brute-force, so a password hash "
            "or a signature made with it can be forged or reversed. Use a password hash (bcrypt, argon2, scrypt, "
            "PBKDF2) for passwords and HMAC-SHA256 or a real signature for integrity.", "CWE-328", "high")  # fmt: skip


def _credential(node: ast.AST, name: str) -> HardeningIssue:
    return (node, "python:hardcoded-credential", "secret", "high", f"Hard-coded credential `{name}`",
            "A credential written into the code is readable by anyone with the repository (and its history, "
            "forever) and cannot be rotated without a release. Load it from the environment or a secret store.",
            "CWE-798", "medium")  # fmt: skip


def hardening_issues(scopes: list[tuple[ast.AST, list[ast.AST]]], aliases: dict[str, str]) -> list[HardeningIssue]:
    """The issues of every scope (a function, or the module with its class bodies), given the nodes
    each scope owns: one pass over the tree serves these rules and the authentication checks."""
    out: list[HardeningIssue] = []

    def qualified(expr: ast.expr) -> str:
        head, _, rest = dotted(expr).partition(".")
        resolved = aliases.get(head, head)
        return f"{resolved}.{rest}" if rest else resolved

    def check(node: ast.AST, purpose: set[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            keyword_defaults = [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            pairs = [
                *zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True),
                *keyword_defaults,
            ]
            for arg, default in pairs:
                if credential_name(arg.arg) and credential_literal(default, arg.arg):
                    out.append(_credential(default, arg.arg))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n for n in (_target_name(t) for t in targets) if n]
            named = next((n for n in names if credential_name(n)), None)
            if node.value is not None and named is not None and credential_literal(node.value, named):
                out.append(_credential(node, named))
        elif isinstance(node, ast.Call):
            name = qualified(node.func)
            if (issue := _cookie(node)) is not None:
                out.append(issue)
            if (issue := _weak_hash(node, name, purpose)) is not None:
                out.append(issue)
            for k in node.keywords:
                if k.arg and credential_name(k.arg) and credential_literal(k.value, k.arg):
                    out.append(_credential(k.value, k.arg))
        elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
            sides = [node.left, node.comparators[0]]
            named = next((_target_name(s) for s in sides if credential_name(_target_name(s))), None)
            if isinstance(node.ops[0], ast.Eq | ast.NotEq) and named is not None:
                if any(credential_literal(s, named) for s in sides):
                    out.append(_credential(node, named))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and credential_name(key.value):
                    if credential_literal(value, key.value):
                        out.append(_credential(value, key.value))

    for root, nodes in scopes:
        function_words = words(root.name) if isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef) else set()
        # a call inside an assignment serves what it is stored as (`password_hash = md5(...)`)
        stored_as: dict[int, set[str]] = {}
        for node in nodes:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                target_words = {w for t in targets for w in words(_target_name(t))}
                for inner in ast.walk(node.value):
                    if isinstance(inner, ast.Call):
                        stored_as[id(inner)] = target_words
        for node in nodes:
            check(node, function_words | stored_as.get(id(node), set()))
    return out
