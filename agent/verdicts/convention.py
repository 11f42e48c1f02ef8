"""What the project does everywhere: a ruff finding that repeats the project's own habit.

On held-out history, most wrong threads came in clusters: one repository with a convention no rule
knew — a brace-format logger, zope.interface methods declared without `self`, Python 2 source that
2to3 converts at install, a linter's suite of deliberately broken files — posted the same complaint on
commit after commit. Each shape was fixed after it was seen, and the next batch brought the next one.
What they share is that the repository already did the same thing in many files the merge request did
not touch. A careful colleague who sees `log.debug("{}", x)` in thirty modules does not tell the author
of the thirty-first that it is a bug: either the project knows something the reviewer does not, or the
habit is a question for the whole project, not for this change.

So before a ruff finding posts, ruff runs on a bounded sample of the project's other Python files of
the same kind (product, test, example or documentation: a test suite's deliberate breakage says nothing
about product code), and on the changed files as they were before the change (a habit may live in the
one file the change edits: an interface module's forty methods). When the same rule fires in at least
`MIN_PLACES` places — another file, or a line of a changed file before the change — the finding is listed
for a person with the count and two of the places, not posted. For a rule that names what it is about
(an undefined name, an unused or redefined import), the same name must be the one elsewhere: `unicode`
unbound in twelve compatibility modules is a convention, a different undefined name is still a typo.

The price, knowingly paid: a real slip the project also made elsewhere is not posted (one more bare
`except:` in a codebase full of them); it stays in the summary, with where else the project does it.
A critical finding always posts, and so does a rule this project's people have accepted — with one
exception: a vendor-prefixed token in test or example code, when at least `MIN_PLACES` of the project's
other test (or example) files hold such tokens too. That is a secret scanner's or an SDK's fixture
habit (detect-secrets' test suite posted twelve critical threads in one held-out set); in product
code a key always posts.

Bounded: at most `MAX_FILES` files and `MAX_BYTES` of text are read (the changed files' folders first,
then the rest in path order), ruff runs once per kind of file over all of them, and the answer is kept
for the rest of the verification. A workspace that lists only the changed files (a bare diff) shows
no convention, and every finding is judged as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from reviewers.analyzers.ruff import lint_texts
from reviewers.analyzers.secrets import vendor_token_lines
from reviewers.kernel.contracts import Finding, Workspace
from reviewers.paths import is_sample_path, is_test_path

MIN_PLACES = 3  # fewer places are a slip or two, not a habit
MAX_FILES = 200  # other files read per kind: enough to see a habit, bounded for a 5,000-module repository
MAX_BYTES = 4 * 1024 * 1024  # and at most this much text
PLACES_NAMED = 2  # the reason names this many of the other files
RUFF_PREFIX = "ruff:"
# A vendor token in test or example code, where the project's other test files hold them too: the
# fixtures of a secret scanner or an SDK (detect-secrets feeds every detector made-up tokens). Never
# in product code, where a key is a key however many others sit beside it.
VENDOR_KEY_RULE = "secrets:known-prefix"
VENDOR_KEY_KINDS: frozenset[str] = frozenset({"test", "sample"})
# Rules whose message names the thing it is about: the convention is that name, not the rule.
NAMED_CODES = frozenset({"F821", "F822", "F401", "F811"})
# The analyzer never reports these in a package's `__init__` (re-exports): they say nothing there.
NOT_IN_INIT = frozenset({"F401", "F403"})
_NAMED = re.compile(r"`([^`]+)`")

Kind = Literal["test", "sample", "product"]


def kind_of(path: str) -> Kind:
    if is_test_path(path):
        return "test"
    if is_sample_path(path):
        return "sample"
    return "product"


def convention_key(code: str, message: str) -> tuple[str, str]:
    """What counts as the same thing elsewhere: the rule, and for a naming rule the name."""
    if code in NAMED_CODES and (named := _NAMED.search(message)):
        return code, named.group(1)
    return code, ""


@dataclass
class ProjectConventions:
    """ruff's findings on the project's files outside the change, read once per kind of file."""

    workspace: Workspace
    changed: Collection[str]
    read_text: Callable[[str], str | None]
    # a changed file as it was before the change (None: added, or not rebuilt): a habit may live in
    # the file the change edits, in the functions it did not touch (zope.interface's `Interfaces.py`)
    base_text: Callable[[str], str | None] = lambda path: None
    max_files: int = MAX_FILES
    max_bytes: int = MAX_BYTES
    _by_kind: dict[Kind, dict[tuple[str, str], list[str]]] = field(default_factory=dict)

    def sample(self, near: str) -> list[str]:
        """The other Python files of `near`'s kind, its folder's and the changed files' folders first."""
        kind = kind_of(near)
        changed = set(self.changed)
        folders = {str(PurePosixPath(p).parent) for p in (near, *changed)}
        candidates = [
            p for p in self.workspace.list_paths() if p.endswith(".py") and p not in changed and kind_of(p) == kind
        ]
        return sorted(candidates, key=lambda p: (str(PurePosixPath(p).parent) not in folders, p))[: self.max_files]

    def places(self, finding_path: str) -> dict[tuple[str, str], list[str]]:
        kind = kind_of(finding_path)
        if kind not in self._by_kind:
            self._by_kind[kind] = self._scan(kind, self.sample(finding_path))
        return self._by_kind[kind]

    def _scan(self, kind: Kind, paths: Sequence[str]) -> dict[tuple[str, str], list[str]]:
        prefetch = getattr(self.workspace, "read_files", None)
        if callable(prefetch):
            prefetch(list(paths))
        files: list[tuple[str, str]] = []
        room = self.max_bytes
        for path in paths:
            text = self.read_text(path)
            if text is None:
                continue
            room -= len(text)
            if room < 0:
                break
            files.append((path, text))
        before = {
            path: text
            for path in self.changed
            if path.endswith(".py") and kind_of(path) == kind and (text := self.base_text(path)) is not None
        }
        found: dict[tuple[str, str], list[str]] = {}
        if kind in VENDOR_KEY_KINDS:
            found[(VENDOR_KEY_RULE, "")] = [path for path, text in files if vendor_token_lines(text)]
        for path, diagnostics in lint_texts([*files, *before.items()]).items():
            init = PurePosixPath(path).name == "__init__.py"
            keyed = [
                (convention_key(code, str(d.get("message") or "")), int((d.get("location") or {}).get("row") or 0))
                for d in diagnostics
                if (code := str(d.get("code") or d.get("name") or "")) and not (init and code in NOT_IN_INIT)
            ]
            if path in before:  # each place in the file before the change is one more time the project did it
                for key, row in dict.fromkeys(keyed):
                    found.setdefault(key, []).append(f"{path}:{row} before this change")
            else:
                for key in dict.fromkeys(key for key, _ in keyed):
                    found.setdefault(key, []).append(path)
        return found


def project_convention(finding: Finding, conventions: ProjectConventions | None) -> str | None:
    """Why a ruff finding repeats what the project does in many files the change did not touch, or None."""
    if conventions is None:
        return None
    if finding.rule == VENDOR_KEY_RULE and kind_of(finding.path) in VENDOR_KEY_KINDS:
        code, key = "vendor-prefixed tokens", (VENDOR_KEY_RULE, "")
    elif finding.rule.startswith(RUFF_PREFIX) and finding.severity != "critical":
        code = finding.rule.removeprefix(RUFF_PREFIX)
        key = convention_key(code, finding.title.removeprefix("Syntax error: "))
    else:
        return None
    elsewhere = conventions.places(finding.path).get(key, [])
    if len(elsewhere) < MIN_PLACES:
        return None
    what = f"{code} on `{key[1]}`" if key[1] else code
    named = ", ".join(elsewhere[:PLACES_NAMED])
    return (
        f"the project does the same ({what}) in {len(elsewhere)} other places of its {kind_of(finding.path)} code "
        f"that this change did not write ({named}, …): its convention, not this change's slip; listed for a "
        "person, not posted"
    )
