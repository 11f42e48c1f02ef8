"""Settings whose value a change edits: `NAME = old` removed and `NAME = new` added in one hunk.

Two reviewers care. Security asks whether the new value weakens something (a session that lives a
month instead of an hour, verification switched off, debug on, CORS open to every origin). Test
impact asks which tests pinned the old value. Settings are read from lines in the common shapes
(`NAME = v`, `name: v`, `"name": v`, `export NAME=v`, `const NAME = v`) of any language; numeric
values are folded by a small evaluator of constant arithmetic (never `eval`). In Python, an edit that
only changes how a value names an imported object (`typing.TypeVar("T")` → `TypeVar("T")` with
`from typing import TypeVar`) is no change of value: both sides are compared with every imported
name spelled out in full, the old side through the imports as they were, the new through the
imports at head.

Severity policy of `config:security-setting` (configuration files, settings modules and module-level
constants only; keys matched word by word): medium when a secret's lifetime is raised, a strength
(iterations, key size) lowered, an attempt limit raised, a protection switched off, a weakening
switch (debug, insecure, bypass) switched on, origins opened to `*`, or SameSite set to None. A change
in the safe direction, or one whose direction cannot be judged, says nothing.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.parsing import parse_expression, parse_module
from reviewers.kernel.contracts import Severity
from reviewers.paths import is_config_path

_SETTING = re.compile(
    r"""^\s*(?:export\s+|(?:const|let|var|final|static|public|private|protected|readonly)\s+)*"""
    r"""["']?(?P<key>[A-Za-z_][\w.\-]*)["']?\s*(?::\s*[A-Za-z_][\w\[\]., |]*)?\s*"""
    r"""(?:=|:=|:)\s*(?P<value>[^=\s].*?)\s*$"""
)
_TRAILING_COMMENT = re.compile(r"\s+(?:#|//).*$")
_DURATION = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d|w)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_TIMEDELTA_SECONDS = {
    "weeks": 604800, "days": 86400, "hours": 3600, "minutes": 60, "seconds": 1, "milliseconds": 0.001,
}  # fmt: skip
_TRUE = frozenset({"true", "yes", "on"})
_FALSE = frozenset({"false", "no", "off"})  # not None/null: "unset" is not "switched off"
MAX_POWER = 64  # constant folding refuses 10**10**10

# Key words (a key is split at `_`, `-`, `.` and camelCase humps, and matched word by word, so
# `author` is not `auth` and `max_tokens` is not `token`).
_W = r"(?:^|_)(?:{})(?:_|$)"
SECURITY_NAME = re.compile(
    _W.format(
        "session|sessions|ttl|expiry|expire|expires|expiration|token|password|passwd|secret|cors|debug|csrf|xsrf|"
        "auth|authentication|ssl|tls|verify|secure|httponly|samesite|allowed_hosts|allowed_origins|origins|"
        "max_age|lifetime|iterations|rounds|mfa|otp|lockout|attempts|rate_limit|cookie|jwt|encrypt|encryption|"
        "cipher|permissions|insecure|hsts|work_factor|key_size|key_bits|salt|2fa|csp|cert|certificate"
    )
)
_LIFETIME = re.compile(_W.format("ttl|expiry|expire|expires|expiration|lifetime|age|max_age|timeout|duration|validity"))
_LIFETIME_OF_SECRET = re.compile(
    _W.format("session|token|cookie|auth|login|jwt|password|otp|idle|remember|refresh|access|credential|key|link|reset")
)
_STRENGTH = re.compile(_W.format("iterations|rounds|work_factor|key_size|key_bits|bits|min_length|salt_length"))
_LIMIT = re.compile(_W.format("attempts|retries|rate_limit|lockout|threshold|max_attempts"))
_WEAK_WHEN_ON = re.compile(
    _W.format("debug|insecure|allow_all|allow_any|disable|disabled|skip|bypass|unsafe|permissive|anonymous")
)
_WEAK_WHEN_OFF = re.compile(
    _W.format(
        "verify|secure|httponly|csrf|auth|ssl|tls|enable|enabled|require|required|check|enforce|protect|validate|"
        "mfa|2fa|otp|signature|hsts"
    )
)
_ORIGIN_KEY = re.compile(_W.format("cors|origin|origins|allowed_origins|allowed_hosts|hosts"))
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def key_words(key: str) -> str:
    """`SESSION_COOKIE_AGE` → `session_cookie_age`; `maxAge` → `max_age`; `x-frame.options` → `x_frame_options`."""
    return re.sub(r"[-.\s]+", "_", _CAMEL_HUMP.sub("_", key.rsplit(".", 1)[-1] if "." in key else key)).lower()


_SECRET_VALUE_NAME = re.compile(r"(?i)passw|secret|token|key")
_MODULE_CONSTANT = re.compile(r"^(?:export\s+)?(?:const\s+)?[A-Z][A-Z0-9_]*\s*(?::[^=]+)?=")


@dataclass(frozen=True, slots=True)
class ValueChange:
    """A setting written by the change. `old` is None when the hunk removed no line for that key."""

    key: str
    old: str | None
    new: str
    line: int


def parse_setting(text: str) -> tuple[str, str] | None:
    """(key, value) of a line that assigns a value, or None."""
    match = _SETTING.match(text)
    if match is None:
        return None
    value = _TRAILING_COMMENT.sub("", match.group("value")).rstrip(",;").strip()
    return (match.group("key"), value) if value else None


def value_changes(file: ChangedFile) -> list[ValueChange]:
    """Every setting an added line writes, paired with the value a removed line of the same hunk had."""
    changes: list[ValueChange] = []
    for hunk in file.change.hunks:
        removed: dict[str, str] = {}
        for diff_line in hunk.lines:
            if diff_line.kind == "del" and (setting := parse_setting(diff_line.text)):
                removed.setdefault(setting[0], setting[1])
        for diff_line in hunk.lines:
            if diff_line.kind != "add" or diff_line.new_line is None:
                continue
            setting = parse_setting(diff_line.text)
            if setting is None:
                continue
            key, value = setting
            old = removed.get(key)
            if old is None or (_normal(old) != _normal(value) and not _same_object(file, old, value)):
                changes.append(ValueChange(key=key, old=old, new=value, line=diff_line.new_line))
    return changes


def import_aliases(statements: list[ast.stmt]) -> dict[str, str]:
    """Local name → the full dotted name it binds, for the top-level imports among `statements`."""
    aliases: dict[str, str] = {}
    for node in statements:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _removed_imports(file: ChangedFile) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for text in file.removed_lines:
        stripped = text.strip()
        if stripped.startswith(("import ", "from ")):
            tree = parse_module(stripped)
            out += tree.body if tree is not None else []
    return out


class _Qualify(ast.NodeTransformer):
    """Replaces every name and attribute chain rooted in an imported name by one name: its full dotted path."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases

    def _dotted(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            root = self._dotted(node.value)
            return None if root is None else f"{root}.{node.attr}"
        return None

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return ast.Name(id=self.aliases.get(node.id, node.id), ctx=ast.Load())

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        dotted = self._dotted(node)
        if dotted is not None:
            return ast.Name(id=dotted, ctx=ast.Load())
        self.generic_visit(node)
        return node


def _same_object(file: ChangedFile, old: str, new: str) -> bool:
    """Whether two Python values differ only in how they name imported objects."""
    tree = file.python_tree
    if tree is None:
        return False
    old_tree, new_tree = parse_expression(old), parse_expression(new)
    if old_tree is None or new_tree is None:
        return False
    at_head = import_aliases(tree.body)
    before = {**at_head, **import_aliases(_removed_imports(file))}
    return ast.dump(_Qualify(before).visit(old_tree)) == ast.dump(_Qualify(at_head).visit(new_tree))


def _normal(value: str) -> str:
    return re.sub(r"\s+", "", value).strip("\"'")


def _fold(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _fold(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp):
        left, right = _fold(node.left), _fold(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div | ast.FloorDiv) and right != 0:
            return left / right if isinstance(node.op, ast.Div) else float(left // right)
        if isinstance(node.op, ast.Pow) and abs(right) <= MAX_POWER and abs(left) <= 2**MAX_POWER:
            return float(left**right)
        return None
    if isinstance(node, ast.Call) and not node.args:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name == "timedelta":
            total = 0.0
            for keyword in node.keywords:
                amount = _fold(keyword.value)
                if keyword.arg not in _TIMEDELTA_SECONDS or amount is None:
                    return None
                total += amount * _TIMEDELTA_SECONDS[keyword.arg]
            return total
    return None


def numeric_value(text: str) -> float | None:
    """The number a value denotes (`3600 * 24`, `1_000`, `timedelta(days=30)`, `"30d"`), or None."""
    stripped = text.strip().strip("\"'")
    duration = _DURATION.match(stripped)
    if duration:
        return float(duration.group("n")) * _UNIT_SECONDS[duration.group("unit")]
    if len(stripped) > 200:
        return None
    tree = parse_expression(stripped)
    if tree is None:
        return None
    try:
        return _fold(tree.body)
    except (OverflowError, ValueError):
        return None


def boolean_value(text: str) -> bool | None:
    word = text.strip().strip("\"'").lower()
    return True if word in _TRUE else False if word in _FALSE else None


def _shown(key: str, value: str | None) -> str:
    if value is None:
        return "(unset)"
    if _SECRET_VALUE_NAME.search(key) and numeric_value(value) is None and boolean_value(value) is None:
        return "(a new value)"  # never repeat what may be a credential
    return value if len(value) <= 40 else value[:37] + "..."


def security_judgment(change: ValueChange) -> tuple[Severity, str] | None:
    """How a setting change bears on security, or None when it does not."""
    key = key_words(change.key)
    if not SECURITY_NAME.search(key):
        return None
    new_number, old_number = numeric_value(change.new), numeric_value(change.old) if change.old else None
    if new_number is not None and old_number is not None:
        if _LIFETIME.search(key) and (_LIFETIME_OF_SECRET.search(key) or key == "ttl"):
            if new_number > old_number:
                return "medium", f"raised from {change.old} to {change.new} ({new_number / max(old_number, 1):g}x)"
            return None
        if _STRENGTH.search(key) and new_number < old_number:
            return "medium", f"lowered from {change.old} to {change.new}"
        if _LIMIT.search(key) and new_number > old_number:
            return "medium", f"raised from {change.old} to {change.new}"
        return None  # a number moved in the safe direction, or one whose direction we cannot judge
    new_flag = boolean_value(change.new)
    old_flag = boolean_value(change.old) if change.old is not None else None
    if new_flag is not None and new_flag != old_flag:
        if _WEAK_WHEN_ON.search(key):
            return ("medium", f"switched on (was {_shown(key, change.old)})") if new_flag else None
        if _WEAK_WHEN_OFF.search(key):
            return ("medium", f"switched off (was {_shown(key, change.old)})") if not new_flag else None
    if _ORIGIN_KEY.search(key) and re.search(r"""["']\*["']|^\*$""", change.new):
        return "medium", "now allows any origin or host"
    if "samesite" in key and _normal(change.new).lower() == "none":
        return "medium", "cookies now go with cross-site requests"
    return None  # changed, but not in a direction that is weaker on its face


# The weakness a weakened setting opens, by the words of its key; else an insecure default.
_SETTING_CWES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("debug",), "CWE-489"),
    (("csrf", "xsrf"), "CWE-352"),
    (("cors", "origin"), "CWE-942"),
    (("httponly",), "CWE-1004"),
    (("secure", "https", "hsts"), "CWE-614"),
    (("verify", "ssl", "tls", "cert"), "CWE-295"),
    (("expire", "lifetime", "age", "ttl", "timeout"), "CWE-613"),
    (("password", "hash", "rounds", "iterations"), "CWE-916"),
)


def setting_cwe(key: str) -> str:
    lowered = key.lower()
    return next((cwe for needles, cwe in _SETTING_CWES if any(n in lowered for n in needles)), "CWE-1188")


def security_setting_issues(file: ChangedFile) -> list[Issue]:
    """Security-sensitive settings this change weakened. Only configuration is read: any key of a
    configuration file or settings module, and in other code only module-level constants
    (`SESSION_TTL = ...` at the start of a line), which are configuration written as code. A keyword
    argument or a local variable (`max_tokens = 512`, `secure=False`) is a value, not a setting."""
    issues: list[Issue] = []
    config_file = is_config_path(file.path)
    for change in value_changes(file):
        if not config_file and not _MODULE_CONSTANT.match(file.line_text(change.line)):
            continue
        judged = security_judgment(change)
        if judged is None:
            continue
        severity, how = judged
        issues.append(
            Issue(
                line=change.line,
                rule="config:security-setting",
                severity=severity,
                title=f"Security-sensitive setting {change.key} {how.split(' (')[0]}",
                body=f"`{change.key}` is {how}. Settings like this decide how long a stolen credential stays "
                "useful or which protection is active; confirm the new value is intended and documented.",
                kind="config",
                confidence="high" if severity == "medium" else "medium",
                cwe=setting_cwe(change.key),
            )
        )
    return issues
