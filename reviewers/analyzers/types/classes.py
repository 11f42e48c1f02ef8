"""Which of mypy's errors a review reports, as which rule, and how an error is told apart from its twin.

Only classes of error that are broken as written whatever the project's typing discipline, judged
on real history (bench/RESULTS.md, "New type errors, on real history"):

- `types:call-arity`: a call with too many or too few arguments (mypy's `call-arg`): a TypeError;
- `types:unknown-keyword`: a keyword the callee does not take (`call-arg`): a TypeError;
- `types:unknown-attribute`: an attribute or module member that is not there (`attr-defined`): an
  AttributeError or ImportError — except a module's member that may live in a file the check did not
  read (`module_member_unknown`);
- `types:possibly-unbound`: a name bound on some paths only (`possibly-undefined`): a NameError or
  UnboundLocalError on the others;
- `types:none-call`: calling what is `None` on some path (`"None" not callable`): a TypeError;
- `types:unawaited-coroutine`: a coroutine called and dropped (`unused-coroutine`): its body never runs.

Everything else mypy says (incompatible types, missing annotations, Optional misuse, overloads) is
about declared types, which a project may not keep, and is not reported.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

RULE_WORDS: dict[str, tuple[str, str]] = {  # rule → (title, what happens when the line runs)
    "types:call-arity": ("Call with the wrong number of arguments", "a TypeError when the call runs"),
    "types:unknown-keyword": ("Call with a keyword the callee does not take", "a TypeError when the call runs"),
    "types:unknown-attribute": ("Attribute or name that does not exist", "an AttributeError or ImportError"),
    "types:possibly-unbound": (
        "Name used where it may not be bound",
        "a NameError or UnboundLocalError on the paths that skip its assignment",
    ),
    "types:none-call": ("Calling a value that can be None", "a TypeError (`'NoneType' object is not callable`)"),
    "types:unawaited-coroutine": ("Coroutine called but never awaited", "its body never runs"),
}
CODES = frozenset({"call-arg", "attr-defined", "possibly-undefined", "misc", "operator", "unused-coroutine"})
_ARITY = re.compile(r"^(Too (many|few) (positional )?arguments|Missing (positional|named) argument)")
_KEYWORD = re.compile(r"^Unexpected keyword argument")
_NONE_CALL = re.compile(r'^"None" not callable')
_MODULE_MEMBER = re.compile(r'^Module "([\w.]+)" has no attribute "(\w+)"')


@dataclass(frozen=True)
class CheckerError:
    """One of mypy's errors, in the reviewed file's terms."""

    path: str  # the file at head
    line: int
    code: str
    message: str
    column: int = -1  # 0-based, where mypy gives one


def rule_of(code: str, message: str) -> str | None:
    """The rule an error of mypy's belongs to, or None for one that is not reported."""
    if code == "call-arg":
        if _ARITY.search(message):
            return "types:call-arity"
        if _KEYWORD.search(message):
            return "types:unknown-keyword"
        return None
    if code == "attr-defined":  # a name a module has but does not re-export in its stub is there at run time
        return None if "does not explicitly export" in message else "types:unknown-attribute"
    if code == "possibly-undefined":
        return "types:possibly-unbound"
    if code in ("misc", "operator") and _NONE_CALL.search(message):
        return "types:none-call"
    if code == "unused-coroutine":
        return "types:unawaited-coroutine"
    return None


def module_member(message: str) -> tuple[str, str] | None:
    """(module, name) of a `Module "m" has no attribute "x"` error."""
    found = _MODULE_MEMBER.search(message)
    return (found.group(1), found.group(2)) if found else None


def normalised(message: str) -> str:
    """The message without what moves when unrelated lines move (`defined on line 12`) or spacing."""
    return " ".join(re.sub(r"\bline \d+", "line N", message).split())


def enclosing_functions(tree: ast.Module) -> dict[int, str]:
    """Line → the qualified name of the innermost function or class around it ('' at module level)."""
    out: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}.{child.name}" if prefix else child.name
                for n in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    out[n] = name  # inner definitions come later and overwrite
                visit(child, name)
            else:
                visit(child, prefix)

    visit(tree, "")
    return out
