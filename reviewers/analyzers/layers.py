"""Architecture checks on the imports a change adds: layer rules and new import cycles.

Layers come from the repository's `.reviewloop.toml` (`[[layers]]` with paths and `may_import`).
Without them, the conventional direction is assumed: a domain module (`core`, `domain`, `model(s)`,
`entities`) must not import a delivery module (`web`, `api`, `views`, `ui`, `cli`, `handlers`, ...).
A cycle is new when an import the change added closes it: the imported file already reaches the
importer through the repository's import graph at head, and the same cycle, read through the
change's renames, was not already in the graph at the base (rebuilt from head and the diff). So a
module rename that re-spells the imports of an old cycle reports nothing.

A plain `import pkg` in a module of the package `pkg` is no edge: the package's `__init__` always
runs first, so it orders nothing (a package facade that imports its submodules is not a cycle with
each of them).

A type stub (`.pyi`) is never imported at run time (the interpreter loads the `.py` or the compiled
extension beside it; only type checkers read the stub), so it neither starts nor ends an import edge.

A cycle is not new either when the modules on it that existed at the base were already on one
import cycle there: the change added a module to an old cycle (a package whose modules import it
back gains a module), or made it pass through other modules, and the load order that matters was
already tangled before this merge request.

Not caught: a cycle that only exists at run time (an import inside a function), and a cycle at the
base that the rebuilt tree cannot show (a changed file the host sent without hunks counts as new).

Severity policy: `layers:forbidden-import` (configured layers) high; `layers:inward-dependency`
(conventional direction) medium; `imports:new-cycle` medium.
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

from reviewers.analyzers.base_tree import BaseTree
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.imports import (
    ImportRef,
    ModuleIndex,
    erased_by_typescript,
    find_cycle,
    imports_of,
    python_module_name,
    typescript_file,
)
from reviewers.kernel.contracts import SEVERITY_RANK, FileChange, LayerRule, Workspace
from reviewers.paths import language_of

INNER_LAYER_NAMES = frozenset({"core", "domain", "model", "models", "entities", "entity"})
OUTER_LAYER_NAMES = frozenset(
    {"web", "api", "views", "view", "ui", "cli", "handlers", "handler", "controllers", "controller", "routes",
     "routers", "http", "endpoints", "frontend", "presentation", "templates"}
)  # fmt: skip
MAX_CYCLE_FILES = 2000  # files the cycle search may parse: enough for large repositories, bounded for huge ones


def _segments(path: str) -> list[str]:
    """Directory names and the file stem, in path order."""
    stem = path.rsplit(".", 1)[0] if "." in path.rsplit("/", 1)[-1] else path
    return [part for part in stem.split("/") if part and part != "__init__"]


def _matches(path: str, pattern: str) -> bool:
    if fnmatch.fnmatch(path, pattern):
        return True
    directory = pattern.rstrip("*").rstrip("/")
    return bool(directory) and not any(c in directory for c in "*?[") and path.startswith(directory + "/")


def is_type_stub(path: str) -> bool:
    """A `.pyi` file: read by type checkers, never loaded by the interpreter."""
    return path.endswith(".pyi")


def _load_time_imports(
    path: str, text: str | None, index: ModuleIndex, read: Callable[[str], str | None] | None = None
) -> list[str]:
    refs = imports_of(text, path) if text is not None and not is_type_stub(path) else []
    targets: list[str] = []
    for ref in refs:
        if not ref.local and not ref.type_only:
            targets.extend(
                t
                for t in index.resolve(path, ref)
                if t != path
                and not is_type_stub(t)
                and not _own_package(path, ref, t)
                and not (read is not None and typescript_file(path) and erased_by_typescript(path, ref, read(t)))
            )
    return targets


def _own_package(path: str, ref: ImportRef, target: str) -> bool:
    """`import pkg` in a module of `pkg`: Python runs a package's `__init__` before any of its modules,
    so this binds a module already loading and orders nothing (a `from pkg import name` reads a name
    at load time, and stays an edge)."""
    if ref.names or not target.endswith("__init__.py"):
        return False
    return path.startswith(target.removesuffix("__init__.py"))


def layer_of(path: str, layers: Sequence[LayerRule]) -> LayerRule | None:
    return next((layer for layer in layers if any(_matches(path, p) for p in layer.paths)), None)


class ArchitectureAnalyzer:
    """Layer and cycle checks for one review; caches the parsed import graph across files."""

    def __init__(self, workspace: Workspace, layers: Sequence[LayerRule], changes: Sequence[FileChange] = ()) -> None:
        self.workspace = workspace
        self.layers = list(layers)
        self.index = ModuleIndex(workspace.list_paths())
        self._edges: dict[str, list[str]] = {}
        self._base = BaseTree(workspace, changes) if changes else None
        self._base_index: ModuleIndex | None = None
        self._base_edges: dict[str, list[str]] = {}

    def edges(self, path: str) -> list[str]:
        """Files `path` imports at module load time."""
        if path not in self._edges:
            self._edges[path] = _load_time_imports(
                path, self.workspace.read_file(path), self.index, self.workspace.read_file
            )
        return self._edges[path]

    def base_edges(self, path: str) -> list[str]:
        """Files `path` imported at module load time at the base of the change."""
        assert self._base is not None
        if self._base_index is None:
            self._base_index = ModuleIndex(self._base.list_paths())
        if path not in self._base_edges:
            self._base_edges[path] = _load_time_imports(path, self._base.text(path), self._base_index, self._base.text)
        return self._base_edges[path]

    def cycle_existed(self, importer: str, target: str) -> bool:
        """Whether, at the base, the importer already imported the target (each at its old path) and
        the target already reached the importer: the cycle was there, the change only re-spelled it."""
        if self._base is None:
            return False
        old_importer, old_target = self._base.base_path(importer), self._base.base_path(target)
        if old_importer is None or old_target is None or old_target not in self.base_edges(old_importer):
            return False
        return find_cycle(old_target, old_importer, self.base_edges, max_nodes=MAX_CYCLE_FILES) is not None

    def _target_path(self, importer: str, ref: ImportRef) -> tuple[str | None, bool]:
        """Where an import leads: a repository file, or the path of a module of one of this
        repository's own top-level packages that the workspace does not hold (a bare diff). Never a
        guess for a module that resolves nowhere. The flag says it was found."""
        found = self.index.resolve(importer, ref)
        if found:
            return found[0], True
        if language_of(importer) != "python":
            return None, False
        top = ref.module.split(".")[0]
        # Only a package this repository has at head: `http`, `api` or `web` may as well be the
        # standard library or a third-party distribution, and a layer rule about a guess is noise.
        if top in self.index.top_level_packages and top not in sys.stdlib_module_names:
            return ref.module.replace(".", "/") + ".py", False
        return None, False

    def joins_old_cycle(self, cycle: list[str]) -> bool:
        """Whether the modules of this cycle that existed at the base were already on one cycle there
        (each reaching the first, and the first each): the change routes an old cycle through new or
        other modules (a new command module imported by a package whose modules import it back), and
        the modules that must load in order were in that order's trouble before."""
        if self._base is None:
            return False
        old = [p for p in (self._base.base_path(m) for m in dict.fromkeys(cycle)) if p is not None]
        if len(old) < 2:
            return False
        anchor = old[0]
        return all(
            find_cycle(anchor, other, self.base_edges, max_nodes=MAX_CYCLE_FILES) is not None
            and find_cycle(other, anchor, self.base_edges, max_nodes=MAX_CYCLE_FILES) is not None
            for other in old[1:]
        )

    def layer_issue(self, importer: str, ref: ImportRef, target: str) -> Issue | None:
        if self.layers:
            own, other = layer_of(importer, self.layers), layer_of(target, self.layers)
            if own is None or other is None or own.name == other.name or other.name in own.may_import:
                return None
            allowed = ", ".join(own.may_import) or "nothing else"
            return Issue(
                ref.line, "layers:forbidden-import", "high",
                f"Layer '{own.name}' imports layer '{other.name}'",
                f"`{importer}` (layer {own.name}) now imports `{ref.module}` (layer {other.name}); the repository's "
                f"layer rules let {own.name} import {allowed}. Move the dependency behind an interface that "
                f"{own.name} owns, or move the code.",
                kind="layering",
            )  # fmt: skip
        inner, outer = set(_segments(importer)), set(_segments(target))
        if not (inner & INNER_LAYER_NAMES) or inner & OUTER_LAYER_NAMES:
            return None
        if not (outer & OUTER_LAYER_NAMES) or outer & INNER_LAYER_NAMES:
            return None
        return Issue(
            ref.line, "layers:inward-dependency", "medium",
            f"Domain module imports the {next(p for p in _segments(target) if p in OUTER_LAYER_NAMES)} layer",
            f"`{importer}` is domain code and now imports `{ref.module}`, which belongs to the delivery layer. The "
            "dependency should point the other way: pass what the domain needs in as an argument or an interface.",
            kind="layering",
        )  # fmt: skip

    def cycle_issue(self, importer: str, ref: ImportRef, target: str) -> Issue | None:
        if ref.local or ref.type_only or is_type_stub(importer) or is_type_stub(target):
            return None
        if _own_package(importer, ref, target):  # no edge in the graph, so none on the line either
            return None
        if typescript_file(importer) and erased_by_typescript(importer, ref, self.workspace.read_file(target)):
            return None  # types only: the compiler drops the import
        chain = find_cycle(target, importer, self.edges, max_nodes=MAX_CYCLE_FILES)
        if chain is None or self.cycle_existed(importer, target) or self.joins_old_cycle([importer, *chain]):
            return None
        names = [python_module_name(p) if language_of(p) == "python" else p for p in [importer, *chain]]
        return Issue(
            ref.line, "imports:new-cycle", "medium", f"Import creates a cycle: {' -> '.join(names)}",
            f"This import closes an import cycle ({' -> '.join(names)}). Cycles make import order matter, break "
            "at run time with partially initialised modules, and tie the modules together for good.",
            kind="cycle",
        )  # fmt: skip

    def issues(self, file: ChangedFile) -> list[Issue]:
        out: list[Issue] = []
        refs = imports_of(file.text, file.path, file.python_tree)
        # A target an unchanged import already loads was in any cycle before this change.
        already = {
            target
            for ref in refs
            if not file.is_changed(ref.line) and not ref.local and not ref.type_only
            for target in self.index.resolve(file.path, ref)
        }
        for ref in refs:
            if not file.is_changed(ref.line):
                continue
            target, in_repo = self._target_path(file.path, ref)
            if target is None or target == file.path:
                continue  # a module "importing itself" is a same-named third-party package shadowed here
            layer = self.layer_issue(file.path, ref, target)
            cycle = self.cycle_issue(file.path, ref, target) if in_repo and target not in already else None
            already.add(target)  # two added imports of one module close one cycle
            if layer is not None and cycle is not None:
                out.append(
                    replace(
                        layer,
                        title=f"{layer.title} and closes an import cycle",
                        body=f"{layer.body} {cycle.body}",
                        severity=max(layer.severity, cycle.severity, key=SEVERITY_RANK.__getitem__),
                    )
                )
            else:
                out.extend(issue for issue in (layer, cycle) if issue is not None)
        return out
