"""Third-party code a change updates in place: a dependency whose pin the change moves to another
version, and whose copy the project keeps in its tree under a library folder (`lib/configobj/`,
`libs/requests/`), as applications that ship their dependencies do. Such a file is the library's
code, not the team's: the reviewers set it aside as vendored (named in the review, never dropped),
as they do for `third_party/` or `node_modules/`.

The pin is read from the change itself, so nothing outside the diff is needed: a line of a
requirements or constraints file (or any `.txt`/`.in` in a `requirements/` folder), `pyproject.toml`,
`setup.cfg`, `setup.py`, a `Pipfile` or `package.json` that the change adds pinning a name to a
version other than the one the removed side pinned, if any. A folder named like the package counts only below a library
folder (`LIBRARY_DIRS`): a project's own package of the same name, or a monorepo's
`packages/<name>/`, is the team's code even when its pin moves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from reviewers.kernel.contracts import FileChange

PIN_FILES = frozenset({"pyproject.toml", "setup.cfg", "setup.py", "Pipfile", "package.json"})
_PIN_FILE_GLOBS = re.compile(r"^(?:requirements|constraints|deps|dev-requirements)[\w.\-]*\.(?:txt|in)$")
# name, optional extras, an operator or a TOML/JSON key separator, then a version
_PIN = re.compile(
    r"""^\s*["']?(?P<name>[A-Za-z0-9][A-Za-z0-9._\-]*)["']?(?:\[[^\]]*\])?\s*"""
    r"""(?:===?|~=|>=|:|=)\s*["']?[\^~=v]*(?P<version>[0-9][0-9A-Za-z.+\-]*)"""
)
# Folders that hold a project's copies of other projects' code, one package per subfolder.
LIBRARY_DIRS = frozenset({"lib", "libs", "deps", "ext", "site-packages", "dependencies", "vendors", "bundled"})


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _pin_file(path: str) -> bool:
    pure = PurePosixPath(path)
    in_requirements = pure.parent.name == "requirements" and pure.suffix in (".txt", ".in")
    return pure.name in PIN_FILES or bool(_PIN_FILE_GLOBS.match(pure.name)) or in_requirements


def bumped_packages(files: Sequence[FileChange]) -> dict[str, tuple[str, str]]:
    """Normalized package name → (old version, new version) for every pin the change adds or moves
    (old version "" for a pin the change adds: a dependency newly pinned, or one whose pin was
    commented out)."""
    removed: dict[str, str] = {}
    added: dict[str, str] = {}
    for change in files:
        if not _pin_file(change.path):
            continue
        for hunk in change.hunks:
            for line in hunk.lines:
                pin = _PIN.match(line.text) if line.kind in ("add", "del") else None
                if pin is not None:
                    side = added if line.kind == "add" else removed
                    side.setdefault(normalized(pin["name"]), pin["version"])
    return {name: (removed.get(name, ""), new) for name, new in added.items() if removed.get(name) != new}


def bumped_copy(path: str, bumped: dict[str, tuple[str, str]]) -> str | None:
    """Why `path` is a kept copy of a package the change updates ("configobj 5.0.8 → 5.0.9, kept
    under lib/"), or None."""
    parts = PurePosixPath(path).parts
    for i in range(1, len(parts)):
        if parts[i - 1].lower() not in LIBRARY_DIRS:
            continue
        stem = parts[i] if i < len(parts) - 1 else PurePosixPath(parts[i]).stem
        versions = bumped.get(normalized(stem))
        if versions is not None:
            moved = f"{versions[0]} → {versions[1]}" if versions[0] else f"pinned to {versions[1]}"
            return f"{stem} {moved}, kept under {'/'.join(parts[:i])}/"
    return None
