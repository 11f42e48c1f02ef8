"""Public definitions in a changed file, and how the change touched each.

Python definitions come from the syntax tree; other languages (and Python that does not parse)
from line patterns for the usual "exported" forms. A definition is new when its first line was
added and no removed line defined the same name; its signature changed when its first line was
added and a removed line did define that name.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.config_changes import import_aliases
from reviewers.analyzers.parsing import all_statements, parse_module
from reviewers.kernel.contracts import Workspace
from reviewers.paths import is_test_path

DefinitionKind = Literal["function", "class", "method"]

# (language, pattern with a `name` group, kind)
_DEFINITION_PATTERNS: tuple[tuple[frozenset[str], re.Pattern[str], DefinitionKind], ...] = (
    (frozenset({"python"}), re.compile(r"^(?:async\s+)?def\s+(?P<name>[A-Za-z]\w*)\s*\("), "function"),
    (frozenset({"python"}), re.compile(r"^class\s+(?P<name>[A-Za-z]\w*)"), "class"),
    (frozenset({"python"}), re.compile(r"^\s+(?:async\s+)?def\s+(?P<name>[A-Za-z]\w*)\s*\("), "method"),
    (
        frozenset({"javascript", "typescript"}),
        re.compile(r"^\s*export\s+(?:default\s+)?(?:async\s+)?function\*?\s+(?P<name>\w+)"),
        "function",
    ),
    (
        frozenset({"javascript", "typescript"}),
        re.compile(
            r"^\s*export\s+(?:const|let)\s+(?P<name>\w+)\s*(?::[^=]+)?=\s*(?:async\s*)?(?:\(|function|\w+\s*=>)"
        ),
        "function",
    ),
    (
        frozenset({"javascript", "typescript"}),
        re.compile(r"^\s*export\s+(?:default\s+)?(?:abstract\s+)?class\s+(?P<name>\w+)"),
        "class",
    ),
    (frozenset({"go"}), re.compile(r"^func\s+(?:\([^)]*\)\s*)?(?P<name>[A-Z]\w*)\s*[\[(]"), "function"),
    (frozenset({"rust"}), re.compile(r"^\s*pub\s+(?:async\s+)?fn\s+(?P<name>\w+)"), "function"),
    (frozenset({"rust"}), re.compile(r"^\s*pub\s+(?:struct|enum|trait)\s+(?P<name>\w+)"), "class"),
    (
        frozenset({"java", "kotlin", "csharp"}),
        re.compile(
            r"^\s*public\s+(?:(?:static|final|abstract|sealed|partial)\s+)*(?:class|interface|record|enum)\s+(?P<name>\w+)"
        ),
        "class",
    ),
    (
        frozenset({"java", "csharp"}),
        re.compile(
            r"^\s*public\s+(?:(?:static|final|abstract|synchronized|async|override|virtual)\s+)*[\w<>\[\],.?]+\s+(?P<name>\w+)\s*\("
        ),
        "method",
    ),
    (frozenset({"kotlin"}), re.compile(r"^\s*(?:suspend\s+)?fun\s+(?:<[^>]+>\s*)?(?P<name>\w+)\s*\("), "function"),
    (frozenset({"ruby"}), re.compile(r"^\s*def\s+(?:self\.)?(?P<name>[a-z]\w*[?!]?)"), "method"),
    (
        frozenset({"php"}),
        re.compile(r"^\s*(?:public\s+)?(?:static\s+)?function\s+(?P<name>[A-Za-z]\w*)\s*\("),
        "function",
    ),
)
DEFINITION_LANGUAGES = frozenset(lang for languages, _, _ in _DEFINITION_PATTERNS for lang in languages)
# A removed line that defined something, in any of the languages above.
_ANY_DEFINITION = re.compile(
    r"^\s*(?:export\s+)?(?:default\s+)?(?:pub\s+)?(?:public\s+)?(?:static\s+)?(?:async\s+)?"
    r"(?:def|class|function\*?|func|fn|fun|struct|interface|const|let)\s+(?:\([^)]*\)\s*)?(?P<name>[A-Za-z_]\w*)"
)


@dataclass(frozen=True, slots=True)
class Definition:
    name: str
    kind: DefinitionKind
    line: int
    end_line: int
    owner: str = ""  # the class of a method
    has_behaviour: bool = True  # False for a data-only class or a stub (`...`, `pass`): nothing to test
    # More than a one-line wrapper: a branch, a loop, or a few statements. A reviewer asks for a test
    # of logic, not of `return self._client.get(url)`.
    has_logic: bool = True

    @property
    def qualified(self) -> str:
        return f"{self.owner}.{self.name}" if self.owner else self.name


def _public(name: str) -> bool:
    return not name.startswith("_")


def _is_stub(body: list[ast.stmt]) -> bool:
    """A body of only a docstring, `...` and `pass`."""
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in body)


MIN_LOGIC_STATEMENTS = 2  # one statement is a wrapper (`return self._client.get(url)`); two are logic
_CONTROL_FLOW = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.Match)


def _has_logic(body: list[ast.stmt]) -> bool:
    statements = [
        n
        for n in all_statements(
            [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        )
        if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    return len(statements) >= MIN_LOGIC_STATEMENTS or any(isinstance(n, _CONTROL_FLOW) for n in statements)


def _python_definitions(tree: ast.Module) -> list[Definition]:
    out: list[Definition] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _public(node.name):
            end = node.end_lineno or node.lineno
            out.append(
                Definition(
                    node.name,
                    "function",
                    node.lineno,
                    end,
                    has_behaviour=not _is_stub(node.body),
                    has_logic=_has_logic(node.body),
                )  # fmt: skip
            )
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            methods = [m for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
            behaviour = any(not _is_stub(m.body) for m in methods)
            logic = any(_has_logic(m.body) for m in methods)
            out.append(
                Definition(
                    node.name,
                    "class",
                    node.lineno,
                    node.end_lineno or node.lineno,
                    has_behaviour=behaviour,
                    has_logic=logic,
                )  # fmt: skip
            )
            for item in methods:
                if _public(item.name):
                    end = item.end_lineno or item.lineno
                    out.append(
                        Definition(
                            item.name,
                            "method",
                            item.lineno,
                            end,
                            owner=node.name,
                            has_behaviour=not _is_stub(item.body),
                            has_logic=_has_logic(item.body),
                        )  # fmt: skip
                    )
    return out


def _pattern_definitions(file: ChangedFile) -> list[Definition]:
    found: list[tuple[int, str, DefinitionKind]] = []
    patterns = [(pattern, kind) for languages, pattern, kind in _DEFINITION_PATTERNS if file.language in languages]
    for number, text in enumerate(file.lines, start=1):
        for pattern, kind in patterns:
            if match := pattern.match(text):
                if _public(match.group("name")):
                    found.append((number, match.group("name"), kind))
                break
    out: list[Definition] = []
    for i, (line, name, kind) in enumerate(found):
        end = max(line, found[i + 1][0] - 1 if i + 1 < len(found) else len(file.lines))
        body = [t for t in file.lines[line:end] if t.strip() and t.strip() not in ("}", "end", "{")]
        out.append(Definition(name, kind, line, end, has_logic=len(body) >= MIN_LOGIC_STATEMENTS))
    return out


def public_definitions(file: ChangedFile) -> list[Definition]:
    """Public functions, classes and methods of a file at head."""
    tree = file.python_tree
    return _python_definitions(tree) if tree is not None else _pattern_definitions(file)


def removed_definition_names(file: ChangedFile) -> set[str]:
    """Names a removed line defined (some are defined again at head: a changed signature)."""
    return {m.group("name") for text in file.removed_lines if (m := _ANY_DEFINITION.match(text))}


def gone_definition_names(file: ChangedFile) -> set[str]:
    """Names a removed line defined that nothing in the file defines at head any more. A name the
    module still binds by an import or an assignment (`from functools import total_ordering` in place
    of a removed fallback definition) is still there for whoever imports it from this module."""
    at_head = {m.group("name") for text in file.lines if (m := _ANY_DEFINITION.match(text))}
    tree = file.python_tree
    if tree is not None:
        at_head |= {
            node.name
            for node in all_statements(tree.body)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
        at_head |= module_bindings(tree.body)
    return removed_definition_names(file) - at_head


def module_bindings(body: list[ast.stmt]) -> set[str]:
    """Names bound at module level by imports and assignments, inside `if`/`try`/`with` blocks too
    (not inside functions or classes: those names are not the module's attributes)."""
    names: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(stmt, ast.If | ast.Try | ast.TryStar | ast.With | ast.For | ast.While):
            for block in ("body", "orelse", "finalbody"):
                names |= module_bindings(getattr(stmt, block, []))
            for handler in getattr(stmt, "handlers", []):
                names |= module_bindings(handler.body)
    return names


def defined_at_head(workspace: Workspace, name: str, *, outside: str) -> list[str]:
    """Files at head other than `outside` (and other than tests) that define `name`: where a symbol
    removed from one file now lives — moved to another module, or inherited from a base class.
    The pattern is one that both Python's `re` and git's extended regular expressions read."""
    pattern = rf"(def|class|function|func|fn|fun|struct|interface|trait|enum) +{re.escape(name)}\b"
    return sorted(
        {
            hit.path
            for hit in workspace.search(pattern, max_hits=20)
            if hit.path != outside and not is_test_path(hit.path)
        }
    )


def is_new(definition: Definition, file: ChangedFile, removed: set[str]) -> bool:
    return file.is_changed(definition.line) and definition.name not in removed


def signature_changed(definition: Definition, file: ChangedFile, removed: set[str]) -> bool:
    return file.is_changed(definition.line) and definition.name in removed


ParameterShape = tuple[tuple[str, str, bool], ...]  # (name, kind, has a default) in declaration order


def _shape(args: ast.arguments) -> ParameterShape:
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    shape = [
        (a.arg, "positional", i >= first_default) for i, a in enumerate(positional) if a.arg not in ("self", "cls")
    ]
    shape += [(a.arg, "keyword", d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    if args.vararg:
        shape.append((args.vararg.arg, "*", True))
    if args.kwarg:
        shape.append((args.kwarg.arg, "**", True))
    return tuple(shape)


def removed_python_shape(file: ChangedFile, name: str) -> ParameterShape | None:
    """The parameters a removed `def name(...)` header had, when the removed lines hold all of it."""
    removed = file.removed_lines
    start = next(
        (i for i, t in enumerate(removed) if re.match(rf"\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", t)), None
    )
    if start is None:
        return None
    header: list[str] = []
    for text in removed[start : start + 30]:
        header.append(text.strip())
        tree = parse_module(" ".join(header).removeprefix("async ") + " pass")
        if tree is None:
            continue
        node = tree.body[0]
        return _shape(node.args) if isinstance(node, ast.FunctionDef) else None
    return None


def breaking_change(old: ParameterShape, new: ParameterShape) -> str | None:
    """How a new parameter list breaks existing callers, or None when every old call still works
    (annotations changed, a parameter with a default added, a keyword-only one made optional)."""
    new_names = {n for n, _, _ in new}
    gone = [n for n, kind, _ in old if kind not in ("*", "**") and n not in new_names]
    absorbing = any(kind == "**" for _, kind, _ in new)
    if gone and not absorbing:
        return f"parameter{'s' if len(gone) > 1 else ''} {', '.join(gone)} removed or renamed"
    old_names = {n for n, _, _ in old}
    required = [n for n, kind, default in new if not default and n not in old_names and kind not in ("*", "**")]
    if required:
        return f"new required parameter{'s' if len(required) > 1 else ''} {', '.join(required)}"
    old_positional = [n for n, kind, _ in old if kind == "positional"]
    new_positional = [n for n, kind, _ in new if kind == "positional"]
    if new_positional[: len(old_positional)] != old_positional and set(old_positional) <= set(new_positional):
        return "positional parameters reordered"
    return None


def first_moved_position(old: ParameterShape, new: ParameterShape) -> int:
    """The first positional slot (after `self`/`cls`) that names another parameter than before: a
    call passing fewer arguments by position than this does not depend on the reorder."""
    old_positional = [n for n, kind, _ in old if kind == "positional"]
    new_positional = [n for n, kind, _ in new if kind == "positional"]
    pairs = zip(old_positional, new_positional, strict=False)
    return next((i for i, (was, now) in enumerate(pairs) if was != now), min(len(old_positional), len(new_positional)))


def python_shape(tree: ast.Module, definition: Definition) -> ParameterShape | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno == definition.line:
            return _shape(node.args)
    return None


@dataclass(frozen=True, slots=True)
class NameDispatch:
    """`getattr(self, f"handle_{sig}")` in `dispatcher` of class `owner` ("" at module level): the
    methods (or functions) named `prefix…suffix` are called through it, never by name."""

    owner: str
    dispatcher: str
    prefix: str
    suffix: str

    def reaches(self, definition: Definition) -> bool:
        name = definition.name
        return (
            definition.owner == self.owner
            and definition.kind != "class"
            and len(name) > len(self.prefix) + len(self.suffix)
            and name.startswith(self.prefix)
            and name.endswith(self.suffix)
        )


_PERCENT_FIELD = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrifx]")
_BRACE_FIELD = re.compile(r"\{[^{}]*\}")


def _built_name(node: ast.expr) -> tuple[str, str] | None:
    """(prefix, suffix) of a name built from text around a value: `f"do_{x}"`, `"do_" + x`,
    `"%s_handler" % x`, `"on_{}".format(x)`; None for a constant or a name without fixed text."""
    parts: list[ast.expr]
    if isinstance(node, ast.JoinedStr):
        parts = list(node.values)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        parts = []
        stack: list[ast.expr] = [node]
        while stack:  # flattened left to right: ((a + b) + c)
            top = stack.pop()
            if isinstance(top, ast.BinOp) and isinstance(top.op, ast.Add):
                stack += [top.right, top.left]
            else:
                parts.append(top)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
        pieces = _PERCENT_FIELD.split(node.left.value) if isinstance(node.left.value, str) else []
        return (pieces[0], pieces[-1]) if len(pieces) > 1 and (pieces[0] or pieces[-1]) else None
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
    ):
        pieces = _BRACE_FIELD.split(node.func.value.value)
        return (pieces[0], pieces[-1]) if len(pieces) > 1 and (pieces[0] or pieces[-1]) else None
    else:
        return None

    def text(part: ast.expr) -> str | None:
        return part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else None

    fixed = [text(p) for p in parts]
    if all(t is not None for t in fixed):
        return None  # a constant name: its callee is named in the code
    first = next(i for i, t in enumerate(fixed) if t is None)
    last = max(i for i, t in enumerate(fixed) if t is None)
    prefix = "".join(t or "" for t in fixed[:first])
    suffix = "".join(t or "" for t in fixed[last + 1 :])
    return (prefix, suffix) if prefix or suffix else None


def name_dispatches(tree: ast.Module) -> list[NameDispatch]:
    """Every `getattr(obj, <name built from text and a value>)` in the module's functions and methods."""
    scopes: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scopes.append(("", node))
        elif isinstance(node, ast.ClassDef):
            scopes += [(node.name, m) for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
    found: list[NameDispatch] = []
    for owner, function in scopes:
        for call in ast.walk(function):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "getattr"
                and len(call.args) >= 2
                and (built := _built_name(call.args[1])) is not None
            ):
                found.append(NameDispatch(owner, function.name, *built))
    return found


MAX_ANCESTORS = 20  # classes followed up one hierarchy: deeper than any a reviewer reads


def _base_names(node: ast.ClassDef) -> list[str]:
    """The names of a class's bases as written (`_Base[_V]` → `_Base`, `abc.Mapping` → `Mapping`)."""
    names: list[str] = []
    for base in node.bases:
        expr = base.value if isinstance(base, ast.Subscript) else base
        if isinstance(expr, ast.Name):
            names.append(expr.id)
        elif isinstance(expr, ast.Attribute):
            names.append(expr.attr)
    return names


def _implements(node: ast.ClassDef, name: str) -> bool:
    """Whether the class defines method `name` with a body (overload stubs and `raise
    NotImplementedError` alone declare it, they do not implement it)."""
    for item in node.body:
        if not isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) or item.name != name:
            continue
        body = [s for s in item.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        abstract = len(body) == 1 and isinstance(body[0], ast.Raise)
        if not _is_stub(item.body) and not abstract:
            return True
    return False


def top_level_classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


ClassLookup = Callable[[str], ast.ClassDef | None]


def inherited_method(tree: ast.Module, owner: str, name: str, *, elsewhere: ClassLookup | None = None) -> bool:
    """Whether class `owner` of `tree` gets an implemented method `name` from a base class: one
    defined in the same module, or, through `elsewhere`, a class of that name in another module.
    Follows at most MAX_ANCESTORS classes."""
    here = top_level_classes(tree)
    start = here.get(owner)
    if start is None:
        return False
    queue = list(_base_names(start))
    seen: set[str] = {owner}
    while queue and len(seen) <= MAX_ANCESTORS:
        base = queue.pop(0)
        if base in seen:
            continue
        seen.add(base)
        node = here.get(base) or (elsewhere(base) if elsewhere is not None else None)
        if node is None:
            continue
        if _implements(node, name):
            return True
        queue += _base_names(node)
    return False


def inherits_from_outside(file: ChangedFile, name: str, local_roots: set[str]) -> bool:
    """Whether `name` was a method (its removed `def` indented) and a class in the file at head
    subclasses a base imported from a package the repository does not hold (`local_roots`: its
    top-level names, `src/` layouts included; `from flask.sansio.blueprints import Blueprint`): the
    method may now be inherited from there, where no search of ours can look."""
    tree = file.python_tree
    if tree is None:
        return False
    method = re.compile(rf"^\s+(?:async\s+)?def\s+{re.escape(name)}\b")
    if not any(method.match(text) for text in file.removed_lines):
        return False
    imported = import_aliases(tree.body)
    for node in tree.body:
        for base in node.bases if isinstance(node, ast.ClassDef) else []:
            head = base
            while isinstance(head, ast.Attribute):
                head = head.value
            module = imported.get(head.id) if isinstance(head, ast.Name) else None
            if module is not None and module.split(".")[0] not in local_roots:
                return True
    return False


def top_level_names(paths: list[str]) -> set[str]:
    """The first component of every path, and of every path under `src/`: the packages a repository holds."""
    return {p.split("/")[0] for p in paths} | {p.split("/")[1] for p in paths if p.startswith("src/")}
