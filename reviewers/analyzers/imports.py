"""Imports of a source file and where they lead inside the repository.

Python imports come from the syntax tree (parsing, not importing), with a line-based fallback for
text that does not parse (files rebuilt from diff hunks). JavaScript/TypeScript relative imports
(`import x from "./a"`, `require("../b")`) come from a line pattern. `ModuleIndex` maps an import to
the repository file it names, so layer rules and cycle detection can reason about paths.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reviewers.analyzers.parsing import child_blocks, parse_module
from reviewers.kernel.contracts import Workspace
from reviewers.paths import language_of

_PY_IMPORT = re.compile(r"^(?P<indent>\s*)import\s+(?P<names>[\w., ]+?)\s*(?:#.*)?$")
_PY_FROM = re.compile(r"^(?P<indent>\s*)from\s+(?P<dots>\.*)(?P<module>[\w.]*)\s+import\s+(?P<names>.+?)\s*(?:#.*)?$")
_JS_IMPORT = re.compile(
    r"""(?:^\s*import\s+(?P<type>type\s+)?(?:[^'"]*?\s+from\s+)?|\brequire\s*\(\s*|\bimport\s*\(\s*)['"](?P<spec>[^'"]+)['"]"""
)
# `import { A, type B, C as D } from "..."`: the names a TypeScript import takes (no default import).
_TS_NAMED = re.compile(r"""^\s*import\s+\{(?P<names>[^}]*)\}\s*from\s*['"]""")
JS_SUFFIXES = ("", ".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", "/index.ts", "/index.tsx", "/index.js")


@dataclass(frozen=True, slots=True)
class ImportRef:
    """One import. `module` is dotted for Python (absolute, relative ones resolved) and the spec
    string for JavaScript. `names` are the names a `from` import takes."""

    line: int
    module: str
    names: tuple[str, ...] = ()
    local: bool = False  # inside a function or an `if __name__ == "__main__":` block: runs late, so no cycle
    type_only: bool = False  # `if TYPE_CHECKING:` or `import type`: no run-time dependency


def python_module_name(path: str) -> str:
    """`pkg/sub/mod.py` → `pkg.sub.mod`; `pkg/__init__.py` → `pkg`."""
    stem = path[: -len(".pyi")] if path.endswith(".pyi") else path.removesuffix(".py")
    parts = stem.split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _package_of(path: str) -> list[str]:
    parts = python_module_name(path).split(".")
    return parts if path.endswith(("__init__.py", "__init__.pyi")) else parts[:-1]


def _absolute(path: str, level: int, module: str) -> str:
    if level == 0:
        return module
    package = _package_of(path)
    base = package[: len(package) - (level - 1)] if level - 1 <= len(package) else []
    return ".".join([*base, module] if module else base)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"` (either way round): the block runs only when the file runs as a script."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


def _python_imports_from_tree(tree: ast.Module, path: str) -> list[ImportRef]:
    refs: list[ImportRef] = []

    # imports are statements: only blocks of statements are walked, never expressions (a full walk
    # of every node cost a 10,000-line change a third of a second)
    def visit(stmts: list[ast.stmt], *, local: bool, type_only: bool) -> None:
        for child in stmts:
            if isinstance(child, ast.Import):
                for alias in child.names:
                    refs.append(ImportRef(child.lineno, alias.name, (), local, type_only))
            elif isinstance(child, ast.ImportFrom):
                module = _absolute(path, child.level, child.module or "")
                names = tuple(a.name for a in child.names)
                refs.append(ImportRef(child.lineno, module, names, local, type_only))
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                visit(child.body, local=local, type_only=True)
                visit(child.orelse, local=local, type_only=type_only)
            elif isinstance(child, ast.If) and _is_main_guard(child.test):
                visit(child.body, local=True, type_only=type_only)
                visit(child.orelse, local=local, type_only=type_only)
            else:
                inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                for block in child_blocks(child):
                    visit(block, local=inner, type_only=type_only)

    visit(tree.body, local=False, type_only=False)
    return refs


def _python_imports_from_lines(text: str, path: str) -> list[ImportRef]:
    refs: list[ImportRef] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if match := _PY_FROM.match(line):
            module = _absolute(path, len(match.group("dots")), match.group("module"))
            names = tuple(n.strip().split(" as ")[0] for n in match.group("names").strip("()").split(",") if n.strip())
            refs.append(ImportRef(number, module, names, local=bool(match.group("indent"))))
        elif match := _PY_IMPORT.match(line):
            for name in match.group("names").split(","):
                if name.strip():
                    refs.append(ImportRef(number, name.strip().split(" as ")[0], local=bool(match.group("indent"))))
    return refs


def python_imports(text: str, path: str, tree: ast.Module | None = None) -> list[ImportRef]:
    """The imports of Python source, from its syntax tree when it parses."""
    if tree is None:
        tree = parse_module(text, filename=path)
        if tree is None:
            return _python_imports_from_lines(text, path)
    return _python_imports_from_tree(tree, path)


def js_imports(text: str, path: str) -> list[ImportRef]:
    """Relative imports of JavaScript/TypeScript (package imports are outside the repository)."""
    refs: list[ImportRef] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _JS_IMPORT.finditer(line):
            spec = match.group("spec")
            if spec.startswith("."):
                named = _TS_NAMED.match(line) if typescript_file(path) else None
                names = [n.strip() for n in named.group("names").split(",") if n.strip()] if named else []
                each_typed = bool(names) and all(n.startswith("type ") for n in names)
                names = [n.removeprefix("type ").split(" as ")[0].strip() for n in names]
                refs.append(ImportRef(number, spec, tuple(names), type_only=bool(match.group("type")) or each_typed))
    return refs


def typescript_file(path: str) -> bool:
    return path.endswith((".ts", ".tsx", ".mts", ".cts"))


def erased_by_typescript(importer: str, ref: ImportRef, target_text: str | None) -> bool:
    """Whether TypeScript drops this import when it compiles: a named import of a `.ts`/`.tsx` file
    all of whose names the target exports as types only (`export interface Props`, `export type
    Id = ...`). An erased import loads nothing at run time, so it closes no cycle."""
    if not ref.names or target_text is None or not typescript_file(importer):
        return False
    for name in ref.names:
        word = re.escape(name)
        typed = re.search(rf"^\s*export\s+(?:declare\s+)?(?:interface|type)\s+{word}\b", target_text, re.M)
        value = re.search(
            rf"^\s*export\s+(?:default\s+)?(?:declare\s+)?(?:const|let|var|function\*?|class|enum|abstract\s+class)\s+{word}\b"
            rf"|^\s*export\s*\{{[^}}]*\b{word}\b",
            target_text,
            re.M,
        )
        if typed is None or value is not None:
            return False
    return True


def imports_of(text: str, path: str, tree: ast.Module | None = None) -> list[ImportRef]:
    language = language_of(path)
    if language == "python":
        return python_imports(text, path, tree)
    if language in ("javascript", "typescript"):
        return js_imports(text, path)
    return []


class ModuleIndex:
    """Which repository file an import names."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = set(paths)
        self._python: dict[str, str] = {}
        for path in sorted(self.paths):
            if language_of(path) != "python":
                continue
            name = python_module_name(path)
            self._python.setdefault(name, path)
            if name.startswith("src."):  # the src/ layout: `src/pkg/mod.py` is imported as `pkg.mod`
                self._python.setdefault(name[len("src.") :], path)
        self.top_level_packages = {name.split(".")[0] for name in self._python}

    def resolve(self, importer: str, ref: ImportRef) -> list[str]:
        """The repository files an import loads (a `from pkg import mod` may name a submodule)."""
        if language_of(importer) != "python":
            base = posixpath.normpath(posixpath.join(posixpath.dirname(importer), ref.module))
            return [base + s for s in JS_SUFFIXES if base + s in self.paths][:1]
        found: list[str] = []
        for name in ref.names:
            sub = self._python.get(f"{ref.module}.{name}")
            if sub:
                found.append(sub)
        if not found and ref.module in self._python:
            found.append(self._python[ref.module])
        return found


MAX_IMPORTER_HITS = 50  # lines that may import from one module; each names its file, read once


def _importable(module: str) -> str:
    return module.removeprefix("src.")  # the src/ layout: `src/pkg/mod.py` is imported as `pkg.mod`


def names_imported_from(workspace: Workspace, path: str) -> frozenset[str]:
    """Names other files of the repository at head import from the Python module at `path`
    (`from pkg.compat import Mapping`, `from .compat import Mapping`) or read through its full path
    (`pkg.compat.Mapping`): such a name is the module's re-export, used, whatever the module itself
    does with it. One search (the module's last name after `from`, or its full dotted path), then
    each file found is parsed to see which module its import really names."""
    module = _importable(python_module_name(path))
    stem = module.rsplit(".", 1)[-1]
    if not stem.isidentifier():
        return frozenset()
    # both git's extended regular expressions and Python's `re` read these patterns; one search finds
    # the files that import from the module and the lines that read a name through its full path
    pattern = rf"from +([.A-Za-z0-9_]*[.])?{stem} +import"
    dotted = re.escape(module) if "." in module else None
    if dotted is not None:  # `authority.utils.register(...)`
        pattern = rf"{pattern}|{dotted}\.[A-Za-z_]"
    hits = workspace.search(pattern, max_hits=MAX_IMPORTER_HITS)
    names: set[str] = set()
    importers = {hit.path for hit in hits if hit.path != path and language_of(hit.path) == "python"}
    if dotted is not None:
        read = re.compile(rf"(?<![\w.]){dotted}\.([A-Za-z_]\w*)")
        for hit in hits:
            if hit.path in importers:
                names.update(read.findall(hit.text))
    for importer in sorted(importers):
        text = workspace.read_file(importer)
        if text is None:
            continue
        for ref in python_imports(text, importer):
            if _importable(ref.module) == module:
                names.update(ref.names)
    return frozenset(names)


def find_cycle(start: str, goal: str, edges: Callable[[str], list[str]], *, max_nodes: int) -> list[str] | None:
    """A path of files from `start` to `goal` along import edges (breadth-first, so the shortest),
    or None. Gives up after `max_nodes` files: a cycle longer than that is not one a reviewer can act on."""
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    while queue and len(previous) <= max_nodes:
        current = queue.pop(0)
        if current == goal:
            chain = [current]
            while (parent := previous[chain[-1]]) is not None:
                chain.append(parent)
            return list(reversed(chain))
        for nxt in edges(current):
            if nxt not in previous:
                previous[nxt] = current
                queue.append(nxt)
    return None
