"""Public definitions in a changed file, and how the change touched each.

Python definitions come from the syntax tree; other languages (and Python that does not parse)
from line patterns for the usual "exported" forms. A definition is new when its first line was
added and no removed line defined the same name; its signature changed when its first line was
added and a removed line did define that name.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

from reviewers.analyzers.changed_file import ChangedFile

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

    @property
    def qualified(self) -> str:
        return f"{self.owner}.{self.name}" if self.owner else self.name


def _public(name: str) -> bool:
    return not name.startswith("_")


def _is_stub(body: list[ast.stmt]) -> bool:
    """A body of only a docstring, `...` and `pass`."""
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in body)


def _python_definitions(tree: ast.Module) -> list[Definition]:
    out: list[Definition] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _public(node.name):
            end = node.end_lineno or node.lineno
            out.append(Definition(node.name, "function", node.lineno, end, has_behaviour=not _is_stub(node.body)))
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            methods = [m for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
            behaviour = any(not _is_stub(m.body) for m in methods)
            out.append(
                Definition(node.name, "class", node.lineno, node.end_lineno or node.lineno, has_behaviour=behaviour)
            )
            for item in methods:
                if _public(item.name):
                    end = item.end_lineno or item.lineno
                    stub = _is_stub(item.body)
                    out.append(
                        Definition(item.name, "method", item.lineno, end, owner=node.name, has_behaviour=not stub)
                    )
    return out


def _pattern_definitions(file: ChangedFile) -> list[Definition]:
    found: list[tuple[int, str, DefinitionKind]] = []
    for number, text in enumerate(file.lines, start=1):
        for languages, pattern, kind in _DEFINITION_PATTERNS:
            if file.language in languages and (match := pattern.match(text)):
                if _public(match.group("name")):
                    found.append((number, match.group("name"), kind))
                break
    out: list[Definition] = []
    for i, (line, name, kind) in enumerate(found):
        end = found[i + 1][0] - 1 if i + 1 < len(found) else len(file.lines)
        out.append(Definition(name, kind, line, max(line, end)))
    return out


def public_definitions(file: ChangedFile) -> list[Definition]:
    """Public functions, classes and methods of a file at head."""
    tree = file.python_tree
    return _python_definitions(tree) if tree is not None else _pattern_definitions(file)


def removed_definition_names(file: ChangedFile) -> set[str]:
    """Names a removed line defined (some are defined again at head: a changed signature)."""
    return {m.group("name") for text in file.removed_lines if (m := _ANY_DEFINITION.match(text))}


def gone_definition_names(file: ChangedFile) -> set[str]:
    """Names a removed line defined that nothing in the file defines at head any more."""
    at_head = {m.group("name") for text in file.lines if (m := _ANY_DEFINITION.match(text))}
    tree = file.python_tree
    if tree is not None:
        at_head |= {
            getattr(node, "name", "")
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
    return removed_definition_names(file) - at_head


def is_new(definition: Definition, file: ChangedFile, removed: set[str]) -> bool:
    return file.is_changed(definition.line) and definition.name not in removed


def signature_changed(definition: Definition, file: ChangedFile, removed: set[str]) -> bool:
    return file.is_changed(definition.line) and definition.name in removed
