"""The quieter security defects of authentication and session code, read from a Python syntax tree.

No linter flags these by name, and each is a known weakness class (CWE-208, CWE-916, CWE-295):

- a secret (signature, digest, MAC, API key, CSRF or auth token) compared with `==`, which leaks by
  timing how much of it matched — use `hmac.compare_digest`;
- a password hashed with a fast general-purpose hash (md5, sha1, sha256, ...) — use a password
  hashing function (bcrypt, argon2, scrypt, PBKDF2 with many iterations);
- TLS certificate or host-name verification switched off unconditionally (`verify=False`,
  `check_hostname = False`, `CERT_NONE`, an unverified context). Inside an `if`, the switch is a
  user's opt-out that the code implements (an HTTP client's `verify` option), not a decision made
  here, and it says nothing.

Severity policy: weak password hash high; unconditional TLS verification off high; timing-unsafe
secret comparison medium.
"""

from __future__ import annotations

import ast
import re

from reviewers.analyzers.flow.syntax import dotted
from reviewers.kernel.contracts import Severity

AuthIssue = tuple[ast.AST, str, str, Severity, str, str]  # node, rule, kind, severity, title, body

_WORD_SPLIT = re.compile(r"[_\W]+|(?<=[a-z0-9])(?=[A-Z])")
SECRET_WORDS = frozenset({"signature", "sig", "digest", "hmac", "mac", "secret", "apikey"})
TOKEN_QUALIFIERS = frozenset({"csrf", "xsrf", "auth", "access", "api", "session", "reset", "refresh", "bearer",
                              "expected", "verification", "otp"})  # fmt: skip
PASSWORD_WORDS = frozenset({"password", "passwd", "pwd", "passphrase"})
FAST_HASHES = frozenset(
    {"hashlib.md5", "hashlib.sha1", "hashlib.sha224", "hashlib.sha256", "hashlib.sha384", "hashlib.sha512",
     "hashlib.new", "hashlib.blake2b", "hashlib.blake2s", "md5", "sha1", "sha256"}
)  # fmt: skip
UNVERIFIED_CONTEXTS = frozenset({"ssl._create_unverified_context", "ssl._create_stdlib_context"})


def words(identifier: str) -> list[str]:
    return [w.lower() for w in _WORD_SPLIT.split(identifier) if w]


def _last_identifier(expr: ast.expr) -> str:
    if isinstance(expr, ast.Subscript):
        key = expr.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
        return _last_identifier(expr.value)
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Call):
        return _last_identifier(expr.func)
    return ""


# A name that opens with a predicate or a switch names a setting about a secret, not the secret:
# `verify_signature`, `check_token`, `is_password_set`, `require_api_key` hold booleans.
FLAG_WORDS = frozenset({
    "verify", "check", "validate", "is", "has", "should", "require", "requires", "use", "enable", "enabled",
    "allow", "skip", "disable", "disabled", "needs", "want", "with", "without", "no",
})  # fmt: skip


def names_secret(expr: ast.expr) -> bool:
    """Whether an expression names a secret that must be compared in constant time."""
    named = words(_last_identifier(expr))
    if named and named[0] in FLAG_WORDS:
        return False
    found = set(named)
    if found & SECRET_WORDS and "length" not in found and "type" not in found and "name" not in found:
        return True
    if "key" in found and "api" in found:
        return True
    return "token" in found and bool(found & TOKEN_QUALIFIERS)


def _is_constant(expr: ast.expr, constants: frozenset[str] = frozenset()) -> bool:
    """A literal, an UPPER_CASE name or attribute (`signal.SIGINT`), or a module constant."""
    if isinstance(expr, ast.Subscript):  # data[: len(MAGIC)] != MAGIC compares a prefix with the constant
        return False
    if isinstance(expr, ast.Attribute):
        return expr.attr.isupper()
    return isinstance(expr, ast.Constant) or (
        isinstance(expr, ast.Name) and (expr.id.isupper() or expr.id in constants)
    )


def _conditional_ids(nodes: list[ast.AST]) -> set[int]:
    """ids of the nodes under an `if` (or a conditional expression) of the scope. A node already
    counted was counted with everything under it, so no branch is walked twice (an `elif` chain is an
    `if` in the `else` of another: walking each one's branches whole was quadratic in its length)."""
    inside: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.If | ast.IfExp):
            pending: list[ast.AST] = (
                [*node.body, *node.orelse] if isinstance(node, ast.If) else [node.body, node.orelse]
            )
            while pending:
                branch = pending.pop()
                if id(branch) not in inside:
                    inside.add(id(branch))
                    pending.extend(ast.iter_child_nodes(branch))
    return inside


def auth_issues(
    func: ast.AST, nodes: list[ast.AST], aliases: dict[str, str], constants: frozenset[str] = frozenset()
) -> list[AuthIssue]:
    """(node, rule, kind, severity, title, body) for the auth and TLS defects of one scope;
    `constants` are the module's names bound only to literals (a file format's magic bytes)."""
    out: list[AuthIssue] = []
    name = getattr(func, "name", "")
    conditional = _conditional_ids(nodes)

    def qualified(expr: ast.expr) -> str:
        head, _, rest = dotted(expr).partition(".")
        resolved = aliases.get(head, head)
        return f"{resolved}.{rest}" if rest else resolved

    for node in nodes:
        if isinstance(node, ast.Compare) and name not in ("__eq__", "__ne__", "__hash__"):
            sides = [node.left, *node.comparators]
            eq = all(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops)
            if (
                eq
                and len(sides) == 2
                and not any(_is_constant(s, constants) for s in sides)
                and any(names_secret(s) for s in sides)
            ):
                out.append((
                    node, "python:timing-unsafe-compare", "timing", "medium",
                    "Secret compared with == (timing attack)",
                    "`==` stops at the first differing byte, so response times reveal how much of a guessed "
                    "signature or token was right. Compare secrets with `hmac.compare_digest`.",
                ))  # fmt: skip
        elif isinstance(node, ast.Call):
            called = qualified(node.func)
            arguments = [*node.args, *(k.value for k in node.keywords)]
            mentions_password = any(
                set(words(n.id if isinstance(n, ast.Name) else n.attr)) & PASSWORD_WORDS
                for a in arguments
                for n in ast.walk(a)
                if isinstance(n, ast.Name | ast.Attribute)
            )
            if called in FAST_HASHES and mentions_password:
                out.append((
                    node, "python:weak-password-hash", "password-hash", "high",
                    f"Password hashed with {called.rsplit('.', 1)[-1]} (a fast hash)",
                    "General-purpose hashes are built to be fast, so a leaked hash is brute-forced at billions of "
                    "guesses a second. Use a password hashing function: bcrypt, argon2, scrypt, or PBKDF2 with a "
                    "high iteration count and a per-user salt.",
                ))  # fmt: skip
            verify = next((k.value for k in node.keywords if k.arg in ("verify", "verify_ssl", "ssl")), None)
            unverified = called in UNVERIFIED_CONTEXTS
            off = isinstance(verify, ast.Constant) and verify.value is False
            if (off or unverified) and id(node) not in conditional:
                out.append(_tls(verify if off and verify is not None else node))  # at the switch itself
        elif isinstance(node, ast.Assign) and id(node) not in conditional:
            for target in node.targets:
                attr = target.attr if isinstance(target, ast.Attribute) else ""
                value = node.value
                off = (attr == "check_hostname" and isinstance(value, ast.Constant) and value.value is False) or (
                    attr == "verify_mode" and qualified(value).endswith("CERT_NONE")
                )
                if off:
                    out.append(_tls(node))
    return out


def _tls(node: ast.AST) -> AuthIssue:
    return (
        node, "python:tls-verify-disabled", "tls-verify", "high", "TLS certificate verification disabled",
        "Without certificate checks anyone on the network path can impersonate the server and read or change "
        "the traffic, credentials included. Fix the trust store (e.g. a CA bundle) instead.",
    )  # fmt: skip
