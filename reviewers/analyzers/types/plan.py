"""What goes into the type check's two trees: the changed files at the base and at head, their callers,
the packages on their paths and stubs for the repository modules they import that are not read.

A file that does not parse on this interpreter is not checked (mypy reads Python with the parser of
the Python it runs on): one that parses as no Python version is named by the review already (a parse
error, and ruff's `invalid-syntax`); one in a newer Python's syntax (3.12 f-strings, PEP 695) is read
by every other analyzer, and naming it would make the review incomplete for every such file, so it
is left out without a word (docs/how-it-works.md says so). A base that cannot be rebuilt or parsed
when the head can is named: the change cannot be compared.

A text rebuilt from a bare diff (blank where the hunks show nothing, `ChangedFile.partial`) is not
checked: names defined in the lines not shown would be missing at head and at the base alike, but a
line the change added that uses one would read as a new error.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reviewers.analyzers.base_tree import BaseTree
from reviewers.analyzers.changed_file import ChangedFile, Issue, unanalyzable
from reviewers.kernel.contracts import CoverageReason, FileChange, ReviewContext
from reviewers.kernel.errors import InputError
from reviewers.paths import is_test_path

MAX_FILES = 100  # changed Python files checked per review
MAX_CALLER_FILES = 20  # files importing a changed module, checked beside them
MAX_LINES = 3000  # lines in one tree (changed files first, then callers); past this files are left out
MAX_SEARCH_HITS = 500
CHECKER = "type check (mypy)"
Note = tuple[CoverageReason, str]


@dataclass
class TypeReport:
    issues: dict[str, list[Issue]] = field(default_factory=dict)  # by the file they are reported in
    notes: dict[str, list[Note]] = field(default_factory=dict)  # by file; "" for the review as a whole
    unplaced: int = 0  # new errors that named no changed definition and stood where the diff does not show
    at_head: int = 0  # errors of the reported classes at head, new or not (what the delta starts from)
    at_base: int = 0


@dataclass
class Tree:
    texts: dict[str, str] = field(default_factory=dict)  # path in the tree → text
    sources: list[str] = field(default_factory=list)  # the paths mypy is asked to check


def module_name(path: str, tree_paths: set[str]) -> str | None:
    """The module mypy will name the file: its folders count while each holds an `__init__.py`."""
    folders = path.split("/")[:-1]
    stem = path.rsplit("/", 1)[-1][: -len(".py")]
    if stem == "__init__":
        if not folders:
            return None
        stem = folders.pop()
    name = [stem]
    while folders and "/".join([*folders, "__init__.py"]) in tree_paths:
        name.insert(0, folders.pop())
    return ".".join(name) if all(p.isidentifier() for p in name) else None


def _parses(text: str) -> str | None:
    """Why this interpreter's parser (mypy's) cannot read the text, or None."""
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError) as exc:
        return f"does not parse as Python {sys.version_info.major}.{sys.version_info.minor} ({exc.__class__.__name__})"
    return None


def _import_pattern(path: str) -> str:
    """An import line that names the module at `path`: `from pkg.mod import`, `import pkg.mod`, `from
    pkg import mod`, `from .mod import`, `from . import mod`; a module at the top: `import mod`."""
    parts = path[: -len(".py")].split("/")
    stem = re.escape(parts[-1])
    if len(parts) == 1:
        return rf"^\s*(from\s+{stem}\s+import|import\s+{stem}\b)"
    parent = re.escape(parts[-2])
    return (
        rf"\b{parent}\.{stem}\b|\b{parent}\s+import\b.*\b{stem}\b"
        rf"|from\s+\.+{stem}\b|from\s+\.+\s+import\b.*\b{stem}\b"
    )


def _callers(context: ReviewContext, changes: Sequence[FileChange], skip: set[str]) -> tuple[list[str], list[Note]]:
    """Product files importing a changed module: one search of the import lines naming the changed
    modules' names, each line then matched to the module's package (`utils` alone names many)."""
    modules = [c.path for c in changes if c.path.rsplit("/", 1)[-1] != "__init__.py"]
    stems = sorted({p.rsplit("/", 1)[-1][: -len(".py")] for p in modules})
    stems = [s for s in stems if s.isidentifier()]
    if not stems:
        return [], []
    try:
        hits = context.workspace.search(rf"^ *(from|import) .*\b({'|'.join(stems)})\b", max_hits=MAX_SEARCH_HITS)
    except InputError as exc:
        return [], [("budget", f"{CHECKER}: callers of the changed modules not searched: {exc}")]
    naming = re.compile("|".join(f"(?:{_import_pattern(p)})" for p in modules))
    found = sorted(
        {h.path for h in hits if h.path.endswith(".py") and not is_test_path(h.path) and naming.search(h.text)} - skip
    )
    return found, []


class Plan:
    """What goes into the two trees, and what is named as not checked."""

    def __init__(self, context: ReviewContext, in_scope: frozenset[str] | None) -> None:
        self.report = TypeReport()
        self.base, self.head = Tree(), Tree()
        self.head_of_base: dict[str, str] = {}  # a base tree path → the head path it became
        self.head_path: dict[str, str] = {}  # a head tree path → its path in the repository
        self.changes: dict[str, FileChange] = {}
        self.head_texts: dict[str, str] = {}
        base_tree = BaseTree(context.workspace, context.files)
        candidates = [
            c for c in context.files
            if c.path.endswith(".py") and c.status != "deleted" and not c.is_binary
            and (in_scope is None or c.path in in_scope) and not is_test_path(c.path)
        ]  # fmt: skip
        lines = 0
        for n, change in enumerate(candidates):
            if n >= MAX_FILES or lines >= MAX_LINES:
                left = [c.path for c in candidates[n:]]
                self._note("", "budget", f"{len(left)} changed Python files not checked (over {MAX_FILES} files "
                           f"or {MAX_LINES} lines): {', '.join(left[:5])}{' …' if len(left) > 5 else ''}")  # fmt: skip
                break
            head_text = context.workspace.read_file(change.path)
            if head_text is None or unanalyzable(change.path, head_text) is not None:
                continue  # the review names these already
            if ChangedFile(change, head_text).partial:
                continue  # a bare diff's rebuilt text: see the module's docstring
            if _parses(head_text) is not None:
                continue  # see the module's docstring
            base_text = None
            if change.status != "added":
                base_text = base_tree.text(change.old_path)
                if base_text is None or _parses(base_text) is not None:
                    self._note(change.path, "parse-error", "not checked: its base could not be rebuilt or parsed")
                    continue
                self.base.texts[change.old_path] = base_text
                self.base.sources.append(change.old_path)
                self.head_of_base[change.old_path] = change.path
            self.head.texts[change.path] = head_text
            self.head.sources.append(change.path)
            self.head_path[change.path] = change.path
            self.changes[change.path] = change
            self.head_texts[change.path] = head_text
            lines += head_text.count("\n") + 1
        modified = [c for c in self.changes.values() if c.status != "added"]
        if modified and lines < MAX_LINES:
            callers, notes = _callers(context, modified, {c.path for c in context.files})
            self.report.notes.setdefault("", []).extend(notes)
            for n, path in enumerate(callers):
                if n >= MAX_CALLER_FILES or lines >= MAX_LINES:
                    self._note("", "budget", f"{len(callers) - n} files importing a changed module not read (over "
                               f"{MAX_CALLER_FILES} files or {MAX_LINES} lines)")  # fmt: skip
                    break
                text = context.workspace.read_file(path)
                if text is None or unanalyzable(path, text) or _parses(text):
                    continue
                for tree in (self.base, self.head):
                    tree.texts[path] = text
                    tree.sources.append(path)
                self.head_of_base[path] = path
                self.head_path[path] = path
                self.head_texts[path] = text
                lines += text.count("\n") + 1
        self._add_packages(context, base_tree)
        self._drop_duplicates()
        for tree, paths in ((self.head, context.workspace.list_paths()), (self.base, base_tree.list_paths())):
            _add_stubs(tree, set(paths))

    def _note(self, path: str, reason: CoverageReason, detail: str) -> None:
        self.report.notes.setdefault(path, []).append((reason, f"{CHECKER}: {detail}"))

    def _add_packages(self, context: ReviewContext, base_tree: BaseTree) -> None:
        """The `__init__.py` of every folder on a checked file's path, where the repository has one."""
        head_paths = set(context.workspace.list_paths())
        base_paths = set(base_tree.list_paths())
        for tree, paths, read in (
            (self.head, head_paths, context.workspace.read_file),
            (self.base, base_paths, base_tree.text),
        ):
            for path in list(tree.texts):
                folders = path.split("/")[:-1]
                while folders:
                    init = "/".join([*folders, "__init__.py"])
                    folders.pop()
                    if init in tree.texts or init not in paths:
                        continue
                    text = read(init)
                    tree.texts[init] = text if text is not None and _parses(text) is None else ""

    def _drop_duplicates(self) -> None:
        """A file mypy cannot name as a module (`bin/my-tool.py`) or that has the name of another (two
        `utils.py` outside packages: mypy stops on those) is checked under a name of its own at the
        tree's root; what it imports relatively is then unknown, as a missing module is."""
        for tree, to_head in ((self.head, self.head_path), (self.base, self.head_of_base)):
            paths = set(tree.texts)
            seen: set[str] = set()
            for n, path in enumerate(list(tree.sources)):
                name = module_name(path, paths)
                if name is not None and name not in seen:
                    seen.add(name)
                    continue
                alias = f"_reviewloop_module_{n}.py"
                tree.texts[alias] = tree.texts.pop(path)
                tree.sources[tree.sources.index(path)] = alias
                to_head[alias] = to_head.pop(path, path)


# A module of the repository that a checked file imports and the tree does not hold: every name of it is
# `Any`. Without it, mypy takes `from . import types` for a missing module and reports each use of it.
STUB = "from typing import Any\n\ndef __getattr__(name: str) -> Any: ...\n"


def _imported(tree: ast.Module, package: list[str]) -> set[tuple[str, ...]]:
    """The dotted names a module's imports may name (a module, or a submodule imported from a package)."""
    out: set[tuple[str, ...]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = tuple(alias.name.split("."))
                out.update(parts[: i + 1] for i in range(len(parts)))
        elif isinstance(node, ast.ImportFrom):
            if node.level > len(package) + 1:
                continue
            anchor = package[: len(package) - node.level + 1] if node.level else []
            base = (*anchor, *(node.module.split(".") if node.module else ()))
            out.update(base[: i + 1] for i in range(len(base)))
            out.update((*base, alias.name) for alias in node.names if alias.name != "*")
    return out


def _add_stubs(tree: Tree, repository: set[str]) -> None:
    """A stub whose every name is `Any` for each repository module a checked file imports that the tree
    does not hold, at the same place under the file's root."""
    paths = set(tree.texts)
    for path in list(tree.sources):
        name = module_name(path, paths)
        parsed = ast.parse(tree.texts[path])
        if name is None:
            continue
        parts = name.split(".")
        root = (
            path.split("/")[: -len(parts)] if not path.endswith("/__init__.py") else path.split("/")[: -len(parts) - 1]
        )
        package = parts if path.endswith("/__init__.py") else parts[:-1]
        prefix = "/".join(root) + "/" if root else ""
        for dotted in _imported(parsed, package):
            where = prefix + "/".join(dotted)
            for candidate, stub in ((f"{where}.py", f"{where}.pyi"), (f"{where}/__init__.py", f"{where}/__init__.pyi")):
                if candidate in repository and candidate not in tree.texts and stub not in tree.texts:
                    tree.texts[stub] = STUB


def write_tree(root: Path, tree: Tree) -> None:
    for path, text in tree.texts.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
