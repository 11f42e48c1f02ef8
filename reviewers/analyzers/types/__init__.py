"""`types:*`: the type errors a change introduces, as the delta of mypy between the base and head.

The changed Python files of product code, and the files that import a changed module (the callers
of its functions), are written into two temporary trees — their texts at the base and at head — with
the `__init__.py` of each package on their paths, and mypy reads each tree (`runner`). Nothing of
the reviewed code is run: mypy only reads it. An error at head is reported when the base has no
error of the same code, in the same function, with the same message (line numbers do not count: a
line moved by an unrelated edit is the same error); only the classes of `classes` are reported.

Why mypy and not basedpyright: mypy is a Python package with a cache that can be seeded with the
standard library once, so a run over one file costs ~0.1 s of CPU (basedpyright starts a Node.js
runtime and analyses the standard library's stubs on every run, ~1 s); its error codes
(`call-arg`, `attr-defined`, `possibly-undefined`, `unused-coroutine`) name the classes reported
here one to one; and it was already how this project checks itself. It is a dependency of the
product; where it is missing the review says so in its coverage.

What is read: modules not written into the trees (third-party packages, the rest of the
repository) are unknown to mypy (`--ignore-missing-imports --no-site-packages`), so what comes from
them is `Any` and raises no error; the standard library is known. Bodies of functions without
annotations are checked too (`--check-untyped-defs`). A member of a repository module that the
trees do not hold whole (a submodule not written, a star import from one, a module `__getattr__`)
is not reported (`_member_is_known`).

Where it is reported: at the error's line when the diff shows it; otherwise (a caller the change
did not touch, a call far from the hunks) at the changed definition the message names, with the
caller's path and line; an error that names no changed definition is then not reported.

Budgets, counted in files and lines, not seconds: at most `MAX_FILES` changed files and
`MAX_CALLER_FILES` callers, `MAX_LINES` lines in a tree; what is left out is named in the review's
coverage, as is a file that does not parse, a checker that is missing, fails or gives no answer
within `TIMEOUT_S` (generous: on a loaded machine a slow answer is still the same answer).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from platformdirs import user_cache_dir

from reviewers.analyzers.base_tree import BaseTree
from reviewers.analyzers.changed_file import Issue, unanalyzable
from reviewers.analyzers.types.classes import (
    CODES,
    RULE_WORDS,
    CheckerError,
    enclosing_functions,
    module_member,
    normalised,
    rule_of,
)
from reviewers.kernel.contracts import CoverageReason, FileChange, ReviewContext
from reviewers.kernel.errors import InputError
from reviewers.paths import is_test_path

MAX_FILES = 30  # changed Python files checked per review
MAX_CALLER_FILES = 10  # files importing a changed module, checked beside them
MAX_LINES = 4000  # lines in one tree (changed files first, then callers); past this files are left out
MAX_SEARCH_HITS = 500
TIMEOUT_S = 120.0
RUNNER = Path(__file__).with_name("runner.py")
FLAGS = [
    "--no-site-packages",
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--check-untyped-defs",
    "--enable-error-code=possibly-undefined",
    "--no-error-summary",
    "--no-color-output",
    "--show-error-codes",
    "--hide-error-context",
    "--no-warn-no-return",
    "--allow-redefinition",  # Python rebinding a name to another type is no error of ours
]
CHECKER = "type check (mypy)"
Note = tuple[CoverageReason, str]


@dataclass
class TypeReport:
    issues: dict[str, list[Issue]] = field(default_factory=dict)  # by the file they are reported in
    notes: dict[str, list[Note]] = field(default_factory=dict)  # by file; "" for the review as a whole
    unplaced: int = 0  # new errors that named no changed definition and stood where the diff does not show


@dataclass
class _Tree:
    texts: dict[str, str] = field(default_factory=dict)  # path in the tree → text
    sources: list[str] = field(default_factory=list)  # the paths mypy is asked to check


def _module_name(path: str, tree_paths: set[str]) -> str | None:
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


def _callers(context: ReviewContext, changes: Sequence[FileChange], skip: set[str]) -> tuple[list[str], list[Note]]:
    """Product files importing a changed module, found with one search of the import lines."""
    stems = sorted({p.rsplit("/", 1)[-1][: -len(".py")] for p in (c.path for c in changes)} - {"__init__"})
    stems = [s for s in stems if s.isidentifier()]
    if not stems:
        return [], []
    try:
        hits = context.workspace.search(rf"^ *(from|import) .*\b({'|'.join(stems)})\b", max_hits=MAX_SEARCH_HITS)
    except InputError as exc:
        return [], [("budget", f"{CHECKER}: callers of the changed modules not searched: {exc}")]
    found = sorted({h.path for h in hits if h.path.endswith(".py") and not is_test_path(h.path)} - skip)
    notes: list[Note] = []
    if len(found) > MAX_CALLER_FILES:
        left = len(found) - MAX_CALLER_FILES
        notes.append(("budget", f"{CHECKER}: {left} files importing a changed module not read"))
    return found[:MAX_CALLER_FILES], notes


class _Plan:
    """What goes into the two trees, and what is named as not checked."""

    def __init__(self, context: ReviewContext, in_scope: frozenset[str] | None) -> None:
        self.report = TypeReport()
        self.base, self.head = _Tree(), _Tree()
        self.head_of_base: dict[str, str] = {}  # a base tree path → the head path it became
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
            if (broken := _parses(head_text)) is not None:
                self._note(change.path, "parse-error", f"not checked at head: {broken}")
                continue
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
            self.changes[change.path] = change
            self.head_texts[change.path] = head_text
            lines += head_text.count("\n") + 1
        modified = [c for c in self.changes.values() if c.status != "added"]
        if modified and lines < MAX_LINES:
            callers, notes = _callers(context, modified, {c.path for c in context.files})
            self.report.notes.setdefault("", []).extend(notes)
            for path in callers:
                text = context.workspace.read_file(path)
                if text is None or unanalyzable(path, text) or _parses(text) or lines >= MAX_LINES:
                    continue
                for tree in (self.base, self.head):
                    tree.texts[path] = text
                    tree.sources.append(path)
                self.head_of_base[path] = path
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
        """mypy stops on two files of one module name (two `utils.py` outside packages): keep the first."""
        for tree in (self.head, self.base):
            paths = set(tree.texts)
            seen: dict[str, str] = {}
            for path in list(tree.sources):
                name = _module_name(path, paths)
                if name is None or name in seen:
                    tree.sources.remove(path)
                    head_path = self.head_of_base.get(path, path) if tree is self.base else path
                    why = "its path is not a module name" if name is None else f"same module name as `{seen[name]}`"
                    if tree is self.head:
                        self._note(head_path, "analyzer-error", f"not checked: {why}")
                else:
                    seen[name] = path


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


def _add_stubs(tree: _Tree, repository: set[str]) -> None:
    """A stub whose every name is `Any` for each repository module a checked file imports that the tree
    does not hold, at the same place under the file's root."""
    paths = set(tree.texts)
    for path in list(tree.sources):
        name = _module_name(path, paths)
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


def _write(root: Path, tree: _Tree) -> None:
    for path, text in tree.texts.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def seed_dir() -> str:
    """Where the standard library's cache for this mypy, Python and flag set is kept."""
    from mypy.version import __version__

    flags = hashlib.sha256(" ".join(FLAGS).encode()).hexdigest()[:12]
    key = f"{__version__}-py{sys.version_info.major}{sys.version_info.minor}-{flags}"
    return str(Path(user_cache_dir("reviewloop", appauthor=False)) / f"mypy-seed-{key}")


def _run(plan: _Plan, timeout_s: float) -> tuple[list[dict[str, object]] | None, str]:
    """mypy's answer for the head tree and, when it holds anything, the base tree; or why there is none."""
    trees = [("head", plan.head)] + ([("base", plan.base)] if plan.base.sources else [])
    with tempfile.TemporaryDirectory(prefix="reviewloop-types-") as tmp:
        runs = []
        for name, tree in trees:
            root = Path(tmp) / name
            _write(root, tree)
            runs.append({"root": str(root), "files": tree.sources})
        request = json.dumps({"flags": FLAGS, "seed": seed_dir(), "runs": runs, "base_only_for": sorted(CODES)})
        try:
            done = subprocess.run(
                [sys.executable, str(RUNNER)], input=request, capture_output=True, text=True,
                timeout=timeout_s, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return None, f"gave no answer within {timeout_s:.0f} s"
        except OSError as exc:
            return None, f"could not start ({exc.__class__.__name__}: {exc})"
    last = (done.stderr or "").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
    if done.returncode != 0:
        return None, f"failed: {last[0][:300]}"
    try:
        answers = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, "gave an answer that is not JSON"
    for answer in answers:
        if answer.get("status") not in (0, 1):  # a blocking error or a crash: the tree's answer is partial
            errors = [e for e in answer.get("errors", []) if isinstance(e, dict)]
            why = str(errors[0].get("message")) if errors else str(answer.get("stderr", "")).strip()[-300:]
            return None, f"stopped: {why or 'no reason given'}"
    return answers, ""


def _errors(answer: dict[str, object], to_head: dict[str, str]) -> list[tuple[CheckerError, str]]:
    """The answer's errors of a reported class, in head paths, with the rule of each."""
    out: list[tuple[CheckerError, str]] = []
    raw = answer.get("errors")
    for item in raw if isinstance(raw, list) else []:
        path, code, message = to_head.get(str(item.get("file"))), str(item.get("code")), str(item.get("message"))
        rule = rule_of(code, message)
        if path is None or rule is None or item.get("severity") != "error" or not isinstance(item.get("line"), int):
            continue
        out.append((CheckerError(path, int(item["line"]), code, message), rule))
    return out


class _Repository:
    """Which dotted module names are files of the repository, and whether the check holds one whole."""

    def __init__(self, paths: list[str], head: _Tree) -> None:
        self._modules: set[str] = set()
        for p in paths:
            if p.endswith(".py"):
                parts = p[: -len(".py")].split("/")
                parts = parts[:-1] if parts[-1] == "__init__" else parts
                self._modules.update(".".join(parts[i:]) for i in range(len(parts)))  # every suffix
        self._head = head

    def is_module(self, dotted: str) -> bool:
        return dotted in self._modules

    def member_is_known(self, module: str, name: str) -> bool:
        """Whether `module` lacking `name` is certain: not a repository module, or one written whole
        into the tree, with no star import or `__getattr__`, and `name` no submodule of it."""
        if not self.is_module(module):
            return True  # the standard library's (third-party modules are unknown to the check)
        if self.is_module(f"{module}.{name}"):
            return False
        suffix = module.replace(".", "/")
        texts = [t for p, t in self._head.texts.items() if p in (f"{suffix}.py", f"{suffix}/__init__.py")
                 or p.endswith((f"/{suffix}.py", f"/{suffix}/__init__.py"))]  # fmt: skip
        return len(texts) == 1 and not re.search(r"^\s*from\s+\S+\s+import\s+\*|def __getattr__\b", texts[0], re.M)


def _new_errors(plan: _Plan, answers: list[dict[str, object]], repo: _Repository) -> list[tuple[CheckerError, str]]:
    head = _errors(answers[0], {p: p for p in plan.head.sources})
    base = _errors(answers[1], plan.head_of_base) if len(answers) > 1 else []
    base_texts = {plan.head_of_base[p]: t for p, t in plan.base.texts.items() if p in plan.head_of_base}
    functions: dict[tuple[str, str], dict[int, str]] = {}

    def key(error: CheckerError, side: str, texts: dict[str, str]) -> tuple[str, str, str, str]:
        if (error.path, side) not in functions:
            functions[(error.path, side)] = enclosing_functions(ast.parse(texts[error.path]))
        where = functions[(error.path, side)].get(error.line, "")
        return error.path, error.code, where, normalised(error.message)

    before = Counter(key(e, "base", base_texts) for e, _ in base)
    added = {p: set(c.added_lines()) for p, c in plan.changes.items()}
    # errors on untouched lines take their twins at the base first: the new one is the one the change wrote
    head.sort(key=lambda pair: pair[0].line in added.get(pair[0].path, set()))
    new: list[tuple[CheckerError, str]] = []
    for error, rule in head:
        k = key(error, "head", plan.head_texts)
        if before[k] > 0:
            before[k] -= 1
            continue
        member = module_member(error.message) if error.code == "attr-defined" else None
        if member is not None and not repo.member_is_known(*member):
            continue
        new.append((error, rule))
    return sorted(new, key=lambda pair: (pair[0].path, pair[0].line))


def _definitions(plan: _Plan) -> dict[str, list[tuple[str, ast.AST]]]:
    """Every function and class of the changed files at head, by name."""
    out: dict[str, list[tuple[str, ast.AST]]] = {}
    for path in plan.changes:
        for node in ast.walk(ast.parse(plan.head_texts[path])):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out.setdefault(node.name, []).append((path, node))
    return out


def _anchor(plan: _Plan, shown: dict[str, set[int]], message: str) -> tuple[str, int] | None:
    """Where the diff shows the changed definition the message names: its first line, else its first
    line the diff shows."""
    definitions = _definitions(plan)
    for name in re.findall(r'"(\w+)"', message):
        for path, node in definitions.get(name, []):
            start, end = getattr(node, "lineno", 0), getattr(node, "end_lineno", 0) or 0
            lines = sorted(n for n in shown.get(path, set()) if start <= n <= end)
            if lines:
                return path, start if start in lines else lines[0]
    return None


def _issue(rule: str, line: int, errors: list[CheckerError], *, here: bool) -> Issue:
    title, consequence = RULE_WORDS[rule]
    if here:
        said = f"mypy says `{errors[0].message}` [{errors[0].code}]"
        body = f"{said} on this line at head, and not at the base: {consequence}."
    else:
        named = "; ".join(f"`{e.path}:{e.line}`: `{e.message}` [{e.code}]" for e in errors[:3])
        more = f" and {len(errors) - 3} more" if len(errors) > 3 else ""
        body = (f"After this change mypy reports, where the diff does not show it: {named}{more}; not at the base. "
                f"Each is {consequence}.")  # fmt: skip
    severity = "medium" if rule == "types:possibly-unbound" else "high"
    return Issue(line, rule, severity, title, body, kind=rule.removeprefix("types:"), confidence="high")


def _place(plan: _Plan, new: list[tuple[CheckerError, str]]) -> None:
    shown = {
        p: {ln.new_line for h in c.hunks for ln in h.lines if ln.new_line is not None} for p, c in plan.changes.items()
    }
    grouped: dict[tuple[str, int, str], list[CheckerError]] = {}
    for error, rule in new:
        if error.line in shown.get(error.path, set()):
            plan.report.issues.setdefault(error.path, []).append(_issue(rule, error.line, [error], here=True))
        elif (anchor := _anchor(plan, shown, error.message)) is not None:
            grouped.setdefault((*anchor, rule), []).append(error)
        else:
            plan.report.unplaced += 1
    for (path, line, rule), errors in grouped.items():
        plan.report.issues.setdefault(path, []).append(_issue(rule, line, errors, here=False))


def check_types(context: ReviewContext, *, in_scope: frozenset[str] | None = None) -> TypeReport:
    """The new type errors of the change's product Python files and their callers, by file."""
    if importlib.util.find_spec("mypy") is None:
        why = f"{CHECKER} is not installed: new type errors were not checked"
        has_python = any(c.path.endswith(".py") and c.status != "deleted" for c in context.files)
        return TypeReport(notes={"": [("unavailable", why)]} if has_python else {})
    if context.past_deadline():
        return TypeReport(notes={"": [("deadline", f"{CHECKER}: the review's deadline came first")]})
    plan = _Plan(context, in_scope)
    if not plan.head.sources:
        return plan.report
    left = context.seconds_left()
    timeout_s = TIMEOUT_S if left is None else min(TIMEOUT_S, max(1.0, left))  # the review's deadline first
    answers, why = _run(plan, timeout_s)  # [head] alone when the head has no error of a reported code
    if answers is None:
        plan.report.notes.setdefault("", []).append(
            ("analyzer-error", f"{CHECKER} {why}; new type errors in {len(plan.head.sources)} files were not checked")
        )
        return plan.report
    _place(plan, _new_errors(plan, answers, _Repository(context.workspace.list_paths(), plan.head)))
    return plan.report


class TypeCheck:
    """One review's type check, started in the background so it overlaps the other analyzers."""

    def __init__(self, context: ReviewContext, *, in_scope: frozenset[str] | None = None) -> None:
        self._report: TypeReport | None = None
        left = context.seconds_left()
        self._wait_s = TIMEOUT_S + 30 if left is None else min(TIMEOUT_S, left) + 5
        self._thread = threading.Thread(target=self._work, args=(context, in_scope), name="types", daemon=True)
        self._thread.start()

    def _work(self, context: ReviewContext, in_scope: frozenset[str] | None) -> None:
        try:
            self._report = check_types(context, in_scope=in_scope)
        except (OSError, ValueError, RecursionError) as exc:  # a tree it could not write, an answer it could not read
            self._report = TypeReport(notes={"": [("analyzer-error", f"{CHECKER} failed: {exc}")]})

    def result(self) -> TypeReport:
        self._thread.join(self._wait_s)
        if self._report is None:
            return TypeReport(notes={"": [("deadline", f"{CHECKER} gave no answer in time")]})
        return self._report
