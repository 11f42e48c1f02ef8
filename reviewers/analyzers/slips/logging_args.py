"""`slips:logging-args`: a logging call whose arguments do not match its message's placeholders.

Which logger a name is decides the style, so the module's imports decide, never the name alone:

- the stdlib's: `logging.<level>(...)` where `logging` is the imported module, and a name the module
  binds only to `logging.getLogger(...)` (or an imported `getLogger(...)`). The message is `%`
  formatted when arguments are given: one argument too many fails with "not all arguments
  converted", one too few with "not enough arguments", and the record is lost either way;
- loguru's: the `logger` imported from `loguru`. The message is `str.format`ted when arguments are
  given: an argument without a `{}` is dropped without a word (`logger.error("query:", query)` logs
  "query:"), a `{}` without its argument raises.

Not caught: structlog (positional arguments are formatted only when its `PositionalArgumentsFormatter`
is configured, which the module does not say), a logger reached through an attribute
(`self.log`) or handed in as a parameter, a project's own logger class (beets formats with
`str.format` through `logging`; ruff's PLE1205 beside this rule skips a `{}` message for that reason,
`ruff.brace_style_log_call`), a message that is not one literal (an f-string, a variable),
`%(name)s` mapping placeholders, and calls that spread `*args` or `**kwargs`.
"""

from __future__ import annotations

import ast
import re
import string

from reviewers.analyzers.changed_file import Issue

RULE = "slips:logging-args"
STDLIB_LEVELS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal"})
LOGURU_LEVELS = frozenset({"trace", "debug", "info", "success", "warning", "error", "critical", "exception"})
# One `%` conversion as `str % args` reads it: flags, width, precision, length, type (`*` takes an argument).
_PERCENT = re.compile(
    r"%(?P<key>\([^)]*\))?[#0\- +]*(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d+))?[hlL]?(?P<type>[diouxXeEfFgGcrsa%])?"
)


def _stdlib_placeholders(message: str) -> int | None:
    """How many arguments a `%` message takes, or None (mapping keys, or a `%` Python rejects)."""
    count = 0
    for match in _PERCENT.finditer(message):
        if match.group("type") is None or match.group("key") is not None:
            return None
        if match.group("type") == "%":
            continue
        count += 1 + (match.group("width") == "*") + (match.group("precision") == "*")
    return count


def _format_fields(message: str) -> tuple[int, set[str]] | None:
    """The positional arguments and the names a `str.format` message takes, or None when unsure."""
    try:
        parsed = list(string.Formatter().parse(message))
    except ValueError:
        return None
    automatic, highest, names = 0, -1, set()
    for _, field, spec, _ in parsed:
        if field is None:
            continue
        if spec and "{" in spec:
            return None  # a nested field
        head = re.split(r"[.\[]", field, maxsplit=1)[0]
        if head == "":
            automatic += 1
        elif head.isdigit():
            highest = max(highest, int(head))
        else:
            names.add(head)
    if automatic and highest >= 0:
        return None  # Python refuses the mix; another rule's business
    return max(automatic, highest + 1), names


def _loggers(nodes: list[ast.AST]) -> tuple[set[str], set[str], set[str]]:
    """(the stdlib logging module's names, the stdlib loggers' names, loguru's logger's names)."""
    modules: set[str] = set()
    get_logger: set[str] = set()
    loguru: set[str] = set()
    assigned: dict[str, list[ast.expr]] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "logging"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module == "logging":
                get_logger |= {a.asname or a.name for a in node.names if a.name == "getLogger"}
            elif node.module == "loguru":
                loguru |= {a.asname or a.name for a in node.names if a.name == "logger"}
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            assigned.setdefault(node.target.id, []).append(node.value if node.value is not None else node.target)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            assigned.setdefault(node.name, []).append(ast.Constant(None))
        elif isinstance(node, ast.arg):
            assigned.setdefault(node.arg, []).append(ast.Constant(None))

    def is_get_logger(value: ast.expr) -> bool:
        if not isinstance(value, ast.Call):
            return False
        func = value.func
        return (isinstance(func, ast.Name) and func.id in get_logger) or (
            isinstance(func, ast.Attribute)
            and func.attr == "getLogger"
            and isinstance(func.value, ast.Name)
            and func.value.id in modules
        )

    stdlib = {name for name, values in assigned.items() if values and all(is_get_logger(v) for v in values)}
    modules = {m for m in modules if m not in assigned}
    loguru = {n for n in loguru if n not in assigned}
    return modules, stdlib - loguru, loguru - stdlib


def _message(call: ast.Call, level: str) -> tuple[ast.expr, list[ast.expr]] | None:
    args = list(call.args)
    if level == "log":
        args = args[1:]
    if not args:
        return None
    return args[0], args[1:]


def _issue(call: ast.Call, title: str, body: str) -> Issue:
    return Issue(
        call.lineno,
        RULE,
        "medium",
        title,
        body,
        end_line=call.end_lineno,
        kind="logging-args",
        confidence="high",
    )


def logging_args_issues(nodes: list[ast.AST], tree: ast.Module, lines: list[str]) -> list[Issue]:
    modules, stdlib, loguru = _loggers(nodes)
    if not (modules or stdlib or loguru):
        return []
    issues: list[Issue] = []
    for node in nodes:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner, level = node.func.value, node.func.attr
        if not isinstance(owner, ast.Name):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue
        if owner.id in loguru and (level in LOGURU_LEVELS or level == "log"):
            flavour = "loguru"
        elif (owner.id in stdlib or owner.id in modules) and (level in STDLIB_LEVELS or level == "log"):
            flavour = "stdlib"
        else:
            continue
        found = _message(node, level)
        if found is None:
            continue
        message, args = found
        if not isinstance(message, ast.Constant) or not isinstance(message.value, str):
            continue
        if flavour == "stdlib":
            wanted = _stdlib_placeholders(message.value)
            if wanted is None or not args or wanted == len(args):
                continue
            issues.append(
                _issue(
                    node,
                    f"Logging call with {len(args)} argument{'s' * (len(args) != 1)} for {wanted} placeholder"
                    f"{'s' * (wanted != 1)}",
                    f"`logging` formats the message with `%` and these arguments: "
                    f"{'not all arguments are converted' if len(args) > wanted else 'there are not enough arguments'}, "
                    "so the handler prints a formatting error instead of the record. Make the `%s` placeholders and "
                    "the arguments agree.",
                )
            )
            continue
        keywords = {k.arg for k in node.keywords if k.arg is not None}
        fields = _format_fields(message.value)
        if fields is None or not (args or keywords):
            continue  # loguru formats only when given arguments
        positional, names = fields
        missing = sorted(names - keywords)
        if positional == len(args) and not missing:
            continue
        if len(args) > positional:
            detail = (
                f"{len(args) - positional} of its {len(args)} argument{'s' * (len(args) != 1)} "
                f"{'have' if len(args) - positional != 1 else 'has'} no `{{}}` in the message and "
                f"{'are' if len(args) - positional != 1 else 'is'} dropped without a word"
            )
        elif len(args) < positional:
            detail = f"the message has {positional} `{{}}` fields for {len(args)} arguments, so the call raises"
        else:
            detail = f"the message names {', '.join(missing)}, which the call does not pass, so it raises"
        issues.append(
            _issue(
                node,
                "loguru call whose arguments do not match the message's `{}` fields",
                f"loguru formats the message with `str.format`: {detail}. Use `{{}}` placeholders, one per argument "
                "(loguru does not read `%s`).",
            )
        )
    return issues
