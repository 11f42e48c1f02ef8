"""Where envgen's merge requests come from: released Python packages in a directory on disk.

A *package* is a top-level entry of the source directory (a directory of Python files, as in a
virtualenv's site-packages, or a single module). Its name is the unit of the train/held-out split:
a held-out merge request never shares a package, and so never a file, with a training one. Only
files that parse with this interpreter and have a useful size are kept; reading is lazy and capped
per package, so pointing at a full site-packages costs seconds, not minutes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from reviewers.kernel.errors import InputError

MIN_LINES = 25  # shorter modules leave benign edits nowhere to go
MAX_LINES = 1500  # longer ones make a replay snapshot large without teaching more
MAX_FILES_PER_PACKAGE = 120  # enough for several 40-file MRs; keeps a scan of torch or numpy short
# Directories that are not released source of the package itself.
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", ".git", "site-packages", "_vendor", "vendor"})
_PACKAGE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SourceFile:
    package: str
    path: str  # relative to the source directory, '/'-separated; starts with the package name
    text: str


@dataclass(frozen=True)
class Package:
    name: str
    files: tuple[SourceFile, ...]


def _usable(text: str) -> bool:
    lines = text.count("\n")
    if not MIN_LINES <= lines <= MAX_LINES or "\t" in text or "\r" in text:
        return False  # tabs and CR line ends would make our 4-space insertions inconsistent
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    # Every benign edit and every plant anchors on a definition.
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) for n in tree.body)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _package_files(root: Path, entry: Path) -> list[SourceFile]:
    name = entry.stem if entry.is_file() else entry.name
    candidates = [entry] if entry.is_file() else sorted(entry.rglob("*.py"))
    files: list[SourceFile] = []
    for path in candidates:
        rel = path.relative_to(root)
        if any(part in _SKIPPED_DIRS for part in rel.parts[:-1]) or path.is_symlink() and not path.exists():
            continue
        text = _read(path)
        if text is not None and _usable(text):
            files.append(SourceFile(package=name, path=rel.as_posix(), text=text))
            if len(files) >= MAX_FILES_PER_PACKAGE:
                break
    return files


def _is_package_dir(path: Path) -> bool:
    return (path / "__init__.py").is_file()


def split_one_package(package: Package, *, min_files: int) -> list[Package]:
    """A single package split by its sub-packages and directories (one level below the package's own
    directory; its top-level modules form one more part), keeping the parts with `min_files` files.

    A user points make-env at their own repository, which is one package: its sub-packages are the
    units of the train/held-out split then, as packages are in a site-packages.
    """
    parts: dict[str, list[SourceFile]] = {}
    for f in package.files:
        segments = f.path.split("/")
        inner = segments[1:] if segments[0] == package.name else segments
        key = f"{package.name}.{inner[0]}" if len(inner) > 1 else package.name
        parts.setdefault(key, []).append(SourceFile(package=key, path=f.path, text=f.text))
    return [Package(name=k, files=tuple(v)) for k, v in sorted(parts.items()) if len(v) >= min_files]


def discover_packages(source: Path, *, min_files: int) -> list[Package]:
    """The packages under `source` with at least `min_files` usable Python files, sorted by name.

    `source` is a directory of packages (a site-packages) or one package or project directory; where
    that gives one package only, it is split by sub-package or directory (`split_one_package`), and a
    package that cannot be split into two usable parts is one clear error: a held-out split needs two.
    """
    source = Path(source)
    if not source.is_dir():
        raise InputError(f"source {source} is not a directory")
    if _is_package_dir(source):
        files = _package_files(source.parent, source)
        if not files:
            raise InputError(f"source {source} has no Python files to build merge requests from")
        return _split_or_fail(source, Package(name=source.name, files=tuple(files)), min_files=min_files)
    packages: list[Package] = []
    any_python = False
    for entry in sorted(source.iterdir()):
        stem = entry.stem if entry.is_file() else entry.name
        if entry.is_file() and entry.suffix != ".py" or not _PACKAGE_NAME.match(stem) or stem in _SKIPPED_DIRS:
            continue
        files = _package_files(source, entry)
        any_python = any_python or bool(files)
        if len(files) >= min_files:
            packages.append(Package(name=stem, files=tuple(files)))
    if not any_python:
        raise InputError(f"source {source} has no Python files to build merge requests from")
    if not packages:
        raise InputError(f"source {source} has no package with at least {min_files} usable Python files")
    if len(packages) == 1:
        return _split_or_fail(source, packages[0], min_files=min_files)
    return packages


def _split_or_fail(source: Path, package: Package, *, min_files: int) -> list[Package]:
    parts = split_one_package(package, min_files=min_files)
    if len(parts) < 2:
        raise InputError(
            f"source {source} holds one package ({package.name}) that does not split into two parts of "
            f"{min_files}+ usable Python files (sub-packages or directories): a held-out split needs two"
        )
    return parts
