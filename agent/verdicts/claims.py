"""Whether the code at head supports what a rule claims.

A static rule states a fact about the repository ("`x` was removed", "no test exercises `f`",
"user data reaches this SQL text"); the rule looked at one file, the verifier looks at the head
tree. When the tree contradicts the claim the finding is a false positive, and the reason names
the line that contradicts it:

- a removed-symbol claim, when the symbol is still defined at head in a module the changed file
  uses (moved to a base class or another module it imports);
- an untested-code claim, when a test at head names every symbol the finding lists;
- an injection claim, when the value that reaches the sink is built from constants only
  (`agent.verdicts.sinks`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from reviewers.analyzers.changed_file import new_side_text
from reviewers.analyzers.imports import python_module_name
from reviewers.analyzers.tests_lookup import distinctive, module_tokens
from reviewers.kernel.contracts import FileChange, Finding, SearchHit, Workspace
from reviewers.kernel.errors import InputError
from reviewers.paths import is_test_path, language_of

REMOVED_SYMBOL_RULES = frozenset({"tests:removed-symbol"})
UNTESTED_RULES = frozenset({"tests:untested-new"})
MODEL_RULES = frozenset({"", "llm"})
# A model's finding makes the same claims in its own words; its title says which.
_SAYS_REMOVED = re.compile(r"\b(?:removed|deleted|no longer exists?|was dropped)\b", re.IGNORECASE)
_SAYS_UNTESTED = re.compile(r"\b(?:untested|not tested|no tests?|without tests?|lacks? tests?)\b", re.IGNORECASE)
MAX_DEFINITION_HITS = 200  # definitions of one name across a repository; past this, say nothing
_BACKTICKED = re.compile(r"`([A-Za-z_][\w.]*)`")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
_IMPORT_LINE = re.compile(r"\s*(?:from|import|use|require|#include)\b|.*\brequire\(")
_DEFINITION_KEYWORDS = r"(def|class|function|func|fn|fun|interface|struct|enum|trait|type)"


def _claims(finding: Finding, rules: frozenset[str], words: re.Pattern[str]) -> bool:
    """Whether a finding makes a claim: a rule that states it, or a model's title that says it."""
    return finding.rule in rules or (finding.rule in MODEL_RULES and bool(words.search(finding.title)))


def claimed_symbols(finding: Finding) -> list[str]:
    """The symbols a finding talks about: the identifiers it quotes in backticks (the last part of
    a dotted name), else the first word of its title. Paths in backticks are skipped."""
    names: list[str] = []
    for quoted in _BACKTICKED.findall(finding.body):
        if "/" in quoted or quoted.endswith((".py", ".js", ".ts")):
            continue
        name = quoted.rsplit(".", 1)[-1]
        if _IDENTIFIER.match(name) and name not in names:
            names.append(name)
    if not names:
        first = finding.title.split(" ", 1)[0]
        if _IDENTIFIER.match(first):
            names.append(first)
    return names


@dataclass
class HeadTree:
    """The head tree as the claim checks read it, with file texts cached for one verification."""

    workspace: Workspace
    # the changed files, for one the workspace will not read as text (over its size limit): the new
    # side its diff shows is what a finding there was found in, and so what its evidence is checked on
    changes: Sequence[FileChange] = ()
    _texts: dict[str, str | None] = field(default_factory=dict)
    _paths: list[str] | None = None
    _test_paths: list[str] | None = None

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            text = self.workspace.read_file(path)
            if text is None and (why := self.workspace.unreadable_reason(path)) is not None and why[0] != "binary":
                change = next((c for c in self.changes if c.path == path and c.hunks), None)
                text = new_side_text(change) if change is not None else None
            self._texts[path] = text
        return self._texts[path]

    def paths(self) -> list[str]:
        if self._paths is None:
            self._paths = self.workspace.list_paths()
        return self._paths

    def test_paths(self) -> list[str]:
        if self._test_paths is None:
            self._test_paths = [p for p in self.paths() if is_test_path(p)]
        return self._test_paths

    def search(self, pattern: str) -> list[SearchHit]:
        try:
            return self.workspace.search(pattern, max_hits=MAX_DEFINITION_HITS)
        except InputError:  # a pattern the backend refuses (or a grep that timed out) leaves the claim standing
            return []


def _definition_hits(tree: HeadTree, name: str) -> list[SearchHit]:
    escaped = re.escape(name)
    hits = tree.search(rf"\b{_DEFINITION_KEYWORDS}\s+{escaped}\b")
    hits += tree.search(rf"^\s*{escaped}\s*(:[^=]*)?=([^=]|$)")
    return [h for h in hits if not is_test_path(h.path) and language_of(h.path) != "other"]


def _uses_module(text: str, *, finding_path: str, hit_path: str) -> bool:
    """Whether the changed file imports the module a definition lives in (or is that module)."""
    if hit_path == finding_path:
        return True
    imports = [line for line in text.splitlines() if _IMPORT_LINE.match(line)]
    return any(re.search(rf"(?<![\w]){re.escape(t)}\b", line) for t in module_tokens(hit_path) for line in imports)


_FROM_IMPORT = re.compile(r"^\s*from\s+(\.*)([\w.]*)\s+import\s+\(?([\w\s,]+)")
_PLAIN_IMPORT = re.compile(r"^\s*import\s+([\w.]+)")
MAX_IMPORTED_MODULES = 30  # modules of one file read to look for an inherited or moved definition


def _imported_modules(text: str, path: str) -> set[str]:
    """Dotted names a Python file imports (with `from m import x`, both `m` and `m.x`)."""
    package = python_module_name(path).split(".")[:-1]
    out: set[str] = set()
    for line in text.splitlines():
        if m := _PLAIN_IMPORT.match(line):
            out.add(m.group(1))
        elif m := _FROM_IMPORT.match(line):
            dots, module, names = m.groups()
            if dots:
                base = package[: len(package) - (len(dots) - 1)] if len(dots) - 1 <= len(package) else []
                module = ".".join([*base, module] if module else base)
            if module:
                out.add(module)
                out.update(f"{module}.{n.strip()}" for n in names.split(",") if n.strip())
    return out


def _imported_definition(tree: HeadTree, finding: Finding, text: str, name: str) -> SearchHit | None:
    """The symbol's definition in a module the (Python) file imports, read directly: a workspace
    whose search covers only part of the repository still finds a base class it imports."""
    if language_of(finding.path) != "python":
        return None
    wanted = _imported_modules(text, finding.path)
    paths = [
        p
        for p in tree.paths()
        if p.endswith(".py")
        and not is_test_path(p)
        and any((m := python_module_name(p)) == w or m.endswith(f".{w}") for w in wanted)
    ][:MAX_IMPORTED_MODULES]
    definition = re.compile(
        rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*(?::[^=]*)?=(?!=)"
    )
    for path in paths:
        for number, line in enumerate((tree.text(path) or "").splitlines(), start=1):
            if definition.search(line):
                return SearchHit(path=path, line=number, text=line)
    return None


def removed_symbol_still_defined(finding: Finding, tree: HeadTree) -> str | None:
    """Why a "`x` was removed" claim is false: where `x` is still defined at head."""
    if not _claims(finding, REMOVED_SYMBOL_RULES, _SAYS_REMOVED):
        return None
    symbols = claimed_symbols(finding)[:1]
    text = tree.text(finding.path)
    if not symbols or text is None:
        return None
    name = symbols[0]
    hits = [h for h in _definition_hits(tree, name) if _uses_module(text, finding_path=finding.path, hit_path=h.path)]
    hit = hits[0] if hits else _imported_definition(tree, finding, text, name)
    if hit is None:
        return None
    where = "in the same file" if hit.path == finding.path else f"in a module {finding.path} uses"
    return f"`{name}` is still defined at head {where}: {hit.path}:{hit.line} `{hit.text.strip()[:80]}`"


def _test_reference(tree: HeadTree, name: str, source_path: str) -> tuple[str, int, str] | None:
    word = re.compile(rf"\b{re.escape(name)}\b")
    tokens = [] if distinctive(name) else [re.compile(rf"\b{re.escape(t)}\b") for t in module_tokens(source_path)]
    for path in tree.test_paths():
        text = tree.text(path)
        if text is None or (tokens and not any(t.search(text) for t in tokens)):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if word.search(line):
                return path, number, line.strip()
    return None


def tested_after_all(finding: Finding, tree: HeadTree) -> str | None:
    """Why a "no test exercises `f`" claim is false: a test at head names every symbol listed."""
    if not _claims(finding, UNTESTED_RULES, _SAYS_UNTESTED):
        return None
    symbols = claimed_symbols(finding)
    if not symbols:
        return None
    found = [(name, _test_reference(tree, name, finding.path)) for name in symbols]
    if any(ref is None for _, ref in found):
        return None
    named = "; ".join(f"{ref[0]}:{ref[1]} uses `{name}`" for name, ref in found if ref is not None)
    return f"a test at head does reference it: {named}"
