"""`calls:broken-caller`: a caller in the repository that a changed signature or a removed name breaks.

A change that removes a parameter, renames one, makes one required, or removes or renames a
module's function or class, breaks every call that still binds the old way — in files the merge
request did not touch as much as in those it did. This finds them statically: the module-level
functions and classes of each changed Python file, at the base and at head (`signature`), and the
calls of each changed one across the repository at head, resolved through the callers' imports
(`from pkg.mod import f as g`, `import pkg.mod as m; m.f(...)`, relative imports, the module's own
calls). A call is reported when it binds to the old signature and not to the new one (Python's
TypeError, in words), and a use of a removed name when the module at head cannot give it (an
ImportError or AttributeError).

Where it is reported: at the call, when the caller's file is in the diff and the call's line is in
one of its hunks (GitLab can place a thread only on a line the diff shows); otherwise at the changed
definition, naming every caller with its path and line.

Silent, on purpose, when resolution is not certain: a decorated function or class (a decorator may
change the signature), a class without its own `__init__`, with a `__new__`, a metaclass or a base
that builds instances its own way (enums, named tuples, typed dicts, models), a name bound more than
once at module level or in a conditional, a module with `__getattr__` or a star import (for removed
names), a call that spreads `*args`/`**kwargs`, an import that several files of the repository could
satisfy, a name the caller rebinds or shadows. Methods are not followed (which class an object is
needs types: a type checker's job), nor calls through a variable, `functools.partial`, strings, or a
module imported without an alias (`import pkg.mod; pkg.mod.f()`).
A removed name used in the changed module itself is ruff's F821.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from reviewers.analyzers.base_tree import BaseTree
from reviewers.analyzers.callers.signature import Signature, bind_error, signature_of
from reviewers.analyzers.changed_file import Issue
from reviewers.analyzers.parsing import parse_module
from reviewers.kernel.contracts import FileChange, ReviewContext
from reviewers.kernel.errors import InputError

RULE = "calls:broken-caller"
MAX_CHANGED_NAMES = 40  # changed definitions followed per review; a refactoring past this is named as cut short
MAX_SEARCH_HITS = 2000  # import lines naming the changed modules; past this the search stops
MAX_CALLER_FILES = 300  # caller files parsed per review
MAX_CALLERS_NAMED = 3
# Bases whose classes are not built by their `__init__` alone.
OWN_CONSTRUCTION = re.compile(r"Enum|Flag|NamedTuple|TypedDict|Protocol|Model|Schema|Struct|Exception|Error")

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class ChangedDefinition:
    path: str
    name: str
    kind: str  # "function" or "class"
    old: Signature | None
    new: Signature | None  # None: removed
    anchor: int  # a line of the changed file at head, in the diff


@dataclass(frozen=True)
class BrokenCall:
    definition: ChangedDefinition
    path: str
    line: int
    why: str


@dataclass
class CallerReport:
    issues: dict[str, list[Issue]] = field(default_factory=dict)
    cut_short: list[str] = field(default_factory=list)


def module_parts(path: str) -> tuple[str, ...]:
    parts = path[: -len(".py")].split("/") if path.endswith(".py") else path.split("/")
    return tuple(parts[:-1]) if parts and parts[-1] == "__init__" else tuple(parts)


def _module_bindings(tree: ast.Module) -> tuple[dict[str, list[ast.stmt]], bool]:
    """Every module-level binding by name (definitions, assignments, imports, in conditionals too),
    and whether the module can give names it does not bind (`__getattr__`, a star import)."""
    bindings: dict[str, list[ast.stmt]] = {}
    open_ended = False
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        stmt = stack.pop()
        names: list[str] = []
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [stmt.name]
            open_ended |= stmt.name == "__getattr__"
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            for alias in stmt.names:
                if alias.name == "*":
                    open_ended = True
                else:
                    names.append(alias.asname or alias.name.split(".")[0])
        else:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.append(node.id)
            for name in ("body", "orelse", "finalbody"):
                stack.extend(s for s in getattr(stmt, name, []) if isinstance(s, ast.stmt))
            stack.extend(s for h in getattr(stmt, "handlers", []) for s in h.body)
        for name in names:
            bindings.setdefault(name, []).append(stmt)
    return bindings, open_ended


def _checkable(definition: Definition) -> Signature | None:
    """The signature a call of this definition binds to, or None when the text does not fix it."""
    if definition.decorator_list:
        return None
    if isinstance(definition, ast.ClassDef):
        if definition.keywords or any(OWN_CONSTRUCTION.search(ast.unparse(b)) for b in definition.bases):
            return None
        inits = [s for s in definition.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"]
        if len(inits) != 1 or inits[0].decorator_list:
            return None
        if any(isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef) and s.name == "__new__" for s in definition.body):
            return None
        return signature_of(inits[0], drop_first=True)
    return signature_of(definition)


def _definitions(tree: ast.Module) -> tuple[dict[str, Definition], dict[str, list[ast.stmt]], bool]:
    bindings, open_ended = _module_bindings(tree)
    direct = {
        s.name: s
        for s in tree.body
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and len(bindings.get(s.name, [])) == 1
    }
    return direct, bindings, open_ended


def _signature_anchor(change: FileChange, definition: Definition) -> int:
    """The first line of the definition's header the diff added, else its first line."""
    added = set(change.added_lines())
    if isinstance(definition, ast.ClassDef):  # a class's signature is its `__init__`'s (`_checkable`)
        definition = next(s for s in definition.body if isinstance(s, ast.FunctionDef) and s.name == "__init__")
    body_start = definition.body[0].lineno if definition.body else definition.lineno
    header = range(definition.lineno, max(body_start, definition.lineno + 1))
    return next((n for n in header if n in added), definition.lineno)


def _removal_anchor(change: FileChange, name: str) -> int | None:
    pattern = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b")
    for hunk in change.hunks:
        lines = list(hunk.lines)
        at = next((i for i, ln in enumerate(lines) if ln.kind == "del" and pattern.search(ln.text)), None)
        if at is None:
            continue
        after = [ln.new_line for ln in lines[at:] if ln.new_line is not None]
        before = [ln.new_line for ln in lines[:at] if ln.new_line is not None]
        return after[0] if after else before[-1] if before else None
    return None


def changed_definitions(change: FileChange, base_text: str, head_text: str) -> list[ChangedDefinition]:
    """The module-level functions and classes whose calls the change may break: a signature that
    binds differently, or a name the module no longer gives."""
    base_tree, head_tree = parse_module(base_text), parse_module(head_text)
    if base_tree is None or head_tree is None:
        return []
    old_defs, _, _ = _definitions(base_tree)
    new_defs, new_bindings, open_ended = _definitions(head_tree)
    out: list[ChangedDefinition] = []
    for name, old_def in old_defs.items():
        old = _checkable(old_def)
        kind = "class" if isinstance(old_def, ast.ClassDef) else "function"
        if name in new_defs:
            new_def = new_defs[name]
            new = _checkable(new_def)
            if old is None or new is None or old == new or isinstance(new_def, ast.ClassDef) != (kind == "class"):
                continue
            out.append(ChangedDefinition(change.path, name, kind, old, new, _signature_anchor(change, new_def)))
        elif name not in new_bindings and not open_ended:
            anchor = _removal_anchor(change, name)
            if anchor is not None:
                out.append(ChangedDefinition(change.path, name, kind, old, None, anchor))
    return out


class _Resolver:
    """Which file of the repository an import names, when exactly one can be meant."""

    def __init__(self, paths: list[str]) -> None:
        self._python = [p for p in paths if p.endswith(".py")]
        self._by_suffix: dict[tuple[str, ...], list[str]] = {}
        self._exact = {module_parts(p): p for p in self._python}

    def absolute(self, dotted: tuple[str, ...]) -> str | None:
        if dotted not in self._by_suffix:
            n = len(dotted)
            self._by_suffix[dotted] = [p for p in self._python if module_parts(p)[-n:] == dotted]
        found = self._by_suffix[dotted]
        return found[0] if len(found) == 1 else None

    def module(self, importer: str, module: str | None, level: int) -> tuple[str, ...] | None:
        """The dotted name an import names, as repository path parts for a relative import (exact) or
        the import's own parts for an absolute one (matched by suffix)."""
        if level == 0:
            return tuple(module.split(".")) if module else None
        package = importer.split("/")[:-1]
        if level - 1 > len(package):
            return None
        package = package[: len(package) - (level - 1)]
        return (*package, *(module.split(".") if module else ()))

    def file_of(self, parts: tuple[str, ...] | None, *, relative: bool) -> str | None:
        if parts is None:
            return None
        return self._exact.get(parts) if relative else self.absolute(parts)


def _local_names(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = fn.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
    return names


def _uses(tree: ast.Module, names: set[str]) -> Iterator[tuple[ast.AST, str]]:
    """Each node where one of the module-level `names` is read, with the name, outside functions
    that bind the same name locally."""

    def visit(node: ast.AST, shadowed: frozenset[str]) -> Iterator[tuple[ast.AST, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from visit(child, shadowed | (_local_names(child) & names))
                continue
            if isinstance(child, ast.Name) and child.id in names and child.id not in shadowed:
                yield child, child.id
            yield from visit(child, shadowed)

    yield from visit(tree, frozenset())


def _parent_calls(tree: ast.Module) -> dict[int, ast.Call]:
    """id(callee node) → the call that calls it."""
    return {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}


def broken_calls_in(
    caller_path: str, tree: ast.Module, wanted: dict[str, list[ChangedDefinition]], resolver: _Resolver
) -> list[BrokenCall]:
    """The calls and imports in one file at head that the changed definitions break."""
    by_path: dict[str, dict[str, ChangedDefinition]] = {}
    for defs in wanted.values():
        for d in defs:
            by_path.setdefault(d.path, {})[d.name] = d
    bindings, _ = _module_bindings(tree)
    direct: dict[str, ChangedDefinition] = {}  # a local name → the definition it is
    through: dict[str, dict[str, ChangedDefinition]] = {}  # a local module name → its changed names
    found: list[BrokenCall] = []
    if caller_path in by_path:
        direct.update({n: d for n, d in by_path[caller_path].items() if d.new is not None})
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            relative = node.level > 0
            parts = resolver.module(caller_path, node.module, node.level)
            target = resolver.file_of(parts, relative=relative)
            for alias in node.names:
                local = alias.asname or alias.name
                if target in by_path and alias.name in by_path[target]:
                    d = by_path[target][alias.name]
                    if d.new is None:
                        found.append(BrokenCall(d, caller_path, node.lineno, f"imports `{alias.name}`, which is gone"))
                    elif len(bindings.get(local, [])) == 1:
                        direct[local] = d
                elif parts is not None:
                    module_file = resolver.file_of((*parts, alias.name), relative=relative)
                    if module_file in by_path and len(bindings.get(local, [])) == 1:
                        through[local] = by_path[module_file]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = resolver.file_of(tuple(alias.name.split(".")), relative=False)
                if target in by_path and alias.asname and len(bindings.get(alias.asname, [])) == 1:
                    through[alias.asname] = by_path[target]
    if not direct and not through:
        return found
    calls = _parent_calls(tree)
    attributes = {id(a.value): a for a in ast.walk(tree) if isinstance(a, ast.Attribute)}  # `m` → its `m.f`
    for node, name in _uses(tree, set(direct) | set(through)):
        if name in direct:
            d = direct[name]
            call = calls.get(id(node))
        else:
            attribute = attributes.get(id(node))
            if attribute is None or attribute.attr not in through[name]:
                continue
            d = through[name][attribute.attr]
            if d.new is None:
                why = f"reads `{name}.{attribute.attr}`, which is gone"
                found.append(BrokenCall(d, caller_path, attribute.lineno, why))
                continue
            call = calls.get(id(attribute))
        if call is None or d.old is None or d.new is None:
            continue
        breaks = bind_error(d.new, call) if bind_error(d.old, call) is None else None
        if breaks is not None:
            found.append(BrokenCall(d, caller_path, call.lineno, breaks))
    return found


def _shown_lines(change: FileChange) -> set[int]:
    return {ln.new_line for h in change.hunks for ln in h.lines if ln.new_line is not None}


def find_broken_callers(context: ReviewContext, *, in_scope: frozenset[str] | None = None) -> CallerReport:
    """Every broken caller of the change's Python definitions, as issues by the file they are reported in."""
    report = CallerReport()
    changes = [c for c in context.files if c.status == "modified" and c.path.endswith(".py") and not c.is_binary]
    if not changes:
        return report
    base = BaseTree(context.workspace, context.files)
    definitions: list[ChangedDefinition] = []
    for change in changes:
        if context.past_deadline():
            report.cut_short.append("the review's deadline came before the callers were read")
            return report
        base_text, head_text = base.text(change.path), context.workspace.read_file(change.path)
        if base_text is not None and head_text is not None:
            definitions += changed_definitions(change, base_text, head_text)
    if not definitions:
        return report
    if len(definitions) > MAX_CHANGED_NAMES:
        report.cut_short.append(f"callers of {len(definitions) - MAX_CHANGED_NAMES} changed definitions not checked")
        definitions = definitions[:MAX_CHANGED_NAMES]
    wanted: dict[str, list[ChangedDefinition]] = {}
    for d in definitions:
        wanted.setdefault(d.name, []).append(d)
    # A caller in another file imports the changed module (or its package, or a name from it), so one
    # search for the import lines naming the modules finds them all: a search for the definitions' names
    # drowns in a common one (`run`), and each search reads the repository's files once more.
    stems = sorted({parts[-1] for d in definitions if (parts := module_parts(d.path)) and parts[-1].isidentifier()})
    pattern = rf"^ *(from|import) .*\b({'|'.join(stems)})\b"
    try:
        hits = context.workspace.search(pattern, max_hits=MAX_SEARCH_HITS)
    except InputError as exc:
        report.cut_short.append(f"callers of {', '.join(f'`{n}`' for n in sorted(wanted))} not searched: {exc}")
        return report
    if len(hits) >= MAX_SEARCH_HITS:
        report.cut_short.append(f"callers not all read: over {MAX_SEARCH_HITS} import lines name the changed modules")
    candidates = {h.path for h in hits if h.path.endswith(".py")} | {d.path for d in definitions}
    if len(candidates) > MAX_CALLER_FILES:
        report.cut_short.append(f"{len(candidates) - MAX_CALLER_FILES} files naming a changed definition not read")
    resolver = _Resolver(context.workspace.list_paths())
    broken: list[BrokenCall] = []
    for path in sorted(candidates)[:MAX_CALLER_FILES]:
        text = context.workspace.read_file(path)
        tree = parse_module(text) if text is not None else None
        if tree is None:
            continue
        try:
            broken += broken_calls_in(path, tree, wanted, resolver)
        except RecursionError:  # nesting deeper than the interpreter's stack: that file is not read
            report.cut_short.append(f"`{path}` nests too deeply to read its calls")
    shown = {c.path: _shown_lines(c) for c in context.files}
    at_definition: dict[ChangedDefinition, list[BrokenCall]] = {}
    for b in broken:
        here = b.path in shown and b.line in shown[b.path] and (in_scope is None or b.path in in_scope)
        if here:
            report.issues.setdefault(b.path, []).append(_issue_at_caller(b))
        else:
            at_definition.setdefault(b.definition, []).append(b)
    for d, calls in at_definition.items():
        report.issues.setdefault(d.path, []).append(_issue_at_definition(d, calls))
    return report


def _change_words(d: ChangedDefinition) -> str:
    if d.new is None:
        return f"`{d.name}` is no longer defined in `{d.path}`"
    old = d.old.describe() if d.old is not None else "(...)"
    return f"`{d.name}` changed from `{d.name}{old}` to `{d.name}{d.new.describe()}` in `{d.path}`"


def _fails(d: ChangedDefinition) -> str:
    return "an ImportError or AttributeError" if d.new is None else "a TypeError"


def _issue_at_caller(b: BrokenCall) -> Issue:
    d = b.definition
    return Issue(
        b.line,
        RULE,
        "high",
        f"Call left broken by the change to {d.name}",
        f"{_change_words(d)} (line {d.anchor}), and this line still {b.why}: {_fails(d)} when it runs. "
        "Update the call or keep the old signature working.",
        kind="broken-caller",
        confidence="high",
    )


def _issue_at_definition(d: ChangedDefinition, calls: list[BrokenCall]) -> Issue:
    named = [f"`{b.path}:{b.line}` ({b.why})" for b in calls[:MAX_CALLERS_NAMED]]
    more = f" and {len(calls) - MAX_CALLERS_NAMED} more" if len(calls) > MAX_CALLERS_NAMED else ""
    return Issue(
        d.anchor,
        RULE,
        "high",
        f"{'Removing' if d.new is None else 'Changing'} {d.name} breaks {len(calls)} caller{'s' * (len(calls) != 1)}",
        f"{_change_words(d)}, and callers in the repository still use the old form: {'; '.join(named)}{more}. "
        f"Each is {_fails(d)} when it runs. Update them in this merge request or keep the old form working.",
        kind="broken-caller",
        confidence="high",
    )
