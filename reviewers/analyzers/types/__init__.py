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
from concurrent.futures import Future
from pathlib import Path

from platformdirs import user_cache_dir

from reviewers.analyzers.callers.signature import Signature, signature_of
from reviewers.analyzers.changed_file import Issue
from reviewers.analyzers.types.classes import (
    CODES,
    RULE_WORDS,
    CheckerError,
    enclosing_functions,
    module_member,
    normalised,
    rule_of,
)
from reviewers.analyzers.types.plan import CHECKER, Plan, Tree, TypeReport, write_tree
from reviewers.analyzers.types.runner import SEED_MODULES
from reviewers.analyzers.types.shapes import mypy_not_the_program
from reviewers.kernel.contracts import ReviewContext, Severity, Workspace
from reviewers.kernel.errors import InputError

TIMEOUT_S = 120.0
RUNNER = Path(__file__).with_name("runner.py")
FLAGS = [
    "--no-site-packages",
    "--ignore-missing-imports",
    "--follow-imports=silent",
    # a folder without `__init__.py` is no package: otherwise a file the trees hold as `views` (its
    # folder's name lost) is found again as `web.views` through an import, and mypy stops
    "--no-namespace-packages",
    "--check-untyped-defs",
    "--enable-error-code=possibly-undefined",
    "--no-error-summary",
    "--no-color-output",
    "--show-error-codes",
    "--hide-error-context",
    "--no-warn-no-return",
    "--allow-redefinition",  # Python rebinding a name to another type is no error of ours
]


def seed_dir() -> str:
    """Where the standard library's cache for this mypy, Python and flag set is kept."""
    from mypy.version import __version__

    flags = hashlib.sha256(" ".join([*FLAGS, *SEED_MODULES]).encode()).hexdigest()[:12]
    key = f"{__version__}-py{sys.version_info.major}{sys.version_info.minor}-{flags}"
    return str(Path(user_cache_dir("reviewloop", appauthor=False)) / f"mypy-seed-{key}")


def _run(plan: Plan, timeout_s: float) -> tuple[list[dict[str, object]] | None, str]:
    """mypy's answer for the head tree and, when it holds anything, the base tree; or why there is none."""
    trees = [("head", plan.head)] + ([("base", plan.base)] if plan.base.sources else [])
    with tempfile.TemporaryDirectory(prefix="reviewloop-types-") as tmp:
        runs = []
        for name, tree in trees:
            root = Path(tmp) / name
            write_tree(root, tree)
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


# Runs started before the review asked (`start_early`), by the trees they read: the review that builds
# the same trees takes the answer (once) instead of starting mypy again; trees it does not build are
# not its business, and a few left behind are dropped wholesale.
_EARLY: dict[str, Future[tuple[list[dict[str, object]] | None, str]]] = {}
_EARLY_LOCK = threading.Lock()
MAX_EARLY = 16


def _trees_key(plan: Plan) -> str:
    trees = [plan.head.texts, plan.head.sources, plan.base.texts, plan.base.sources]
    return hashlib.sha256(json.dumps(trees, sort_keys=True).encode()).hexdigest()


def _answer(plan: Plan, timeout_s: float) -> tuple[list[dict[str, object]] | None, str]:
    with _EARLY_LOCK:
        early = _EARLY.pop(_trees_key(plan), None)
    if early is not None:
        try:
            return early.result(timeout=timeout_s + 5)
        except TimeoutError:
            return None, f"gave no answer within {timeout_s:.0f} s"
    return _run(plan, timeout_s)


def start_early(context: ReviewContext, *, in_scope: frozenset[str] | None = None) -> None:
    """Start mypy on the trees this review will build, in the background, before the review asks
    (`check_types` then finds the answer by the trees' contents); a failure here is the review's to meet."""

    def work() -> None:
        try:
            plan = Plan(context, in_scope)
            if not plan.head.sources or importlib.util.find_spec("mypy") is None:
                return
            future: Future[tuple[list[dict[str, object]] | None, str]] = Future()
            with _EARLY_LOCK:
                if len(_EARLY) >= MAX_EARLY:
                    _EARLY.clear()
                _EARLY[_trees_key(plan)] = future
            try:
                answer = _run(plan, TIMEOUT_S)
            except Exception as exc:  # the review waits on this answer: it must never be left unset
                answer = (None, f"failed: {exc.__class__.__name__}: {exc}")
            future.set_result(answer)
        except (OSError, ValueError, RecursionError, InputError):
            return

    threading.Thread(target=work, name="types-early", daemon=True).start()


def _errors(answer: dict[str, object], to_head: dict[str, str]) -> list[tuple[CheckerError, str]]:
    """The answer's errors of a reported class, in head paths, with the rule of each."""
    out: list[tuple[CheckerError, str]] = []
    raw = answer.get("errors")
    for item in raw if isinstance(raw, list) else []:
        path, code, message = to_head.get(str(item.get("file"))), str(item.get("code")), str(item.get("message"))
        rule = rule_of(code, message)
        if path is None or rule is None or item.get("severity") != "error" or not isinstance(item.get("line"), int):
            continue
        column = item.get("column") if isinstance(item.get("column"), int) else -1
        out.append((CheckerError(path, int(item["line"]), code, message, int(column)), rule))
    return out


class _Repository:
    """Which dotted module names are files of the repository, and whether the check holds one whole."""

    def __init__(self, workspace: Workspace, head: Tree) -> None:
        self._workspace = workspace
        paths = workspace.list_paths()
        self._modules: set[str] = set()
        for p in paths:
            if p.endswith(".py"):
                parts = p[: -len(".py")].split("/")
                parts = parts[:-1] if parts[-1] == "__init__" else parts
                # every suffix, of the module and of each folder above it (a folder is a namespace
                # package to mypy, whatever else may provide that name at run time)
                for end in range(1, len(parts) + 1):
                    self._modules.update(".".join(parts[i:end]) for i in range(end))
        self._head = head

    def is_module(self, dotted: str) -> bool:
        return dotted in self._modules

    def assigned_somewhere(self, error: CheckerError, text: str) -> bool:
        """Whether the repository assigns the missing attribute to what the line reads it from
        (`logging.MSG = logging.INFO - 2` in a package's `__init__`: fail2ban's history): one search."""
        name = re.search(r'has no attribute "(\w+)"', error.message)
        lines = text.splitlines()
        if name is None or not 0 < error.line <= len(lines) or error.column < 0:
            return False
        receiver = re.match(r"[\w.]+", lines[error.line - 1][error.column :])
        owner = receiver.group(0).rsplit(".", 1)[0] if receiver and "." in receiver.group(0) else None
        if owner is None:
            return False
        attr, what = re.escape(name.group(1)), re.escape(owner)
        pattern = rf"\b{what}\.{attr}\s*=[^=]|setattr\(\s*{what}\s*,\s*['\"]{attr}['\"]"
        try:
            return bool(self._workspace.search(pattern, max_hits=1))
        except InputError:
            return True  # not known: not reported

    def member_is_known(self, module: str, name: str) -> bool:
        """Whether `module` lacking `name` is certain: not a repository module, or one written whole
        into the tree, with no star import or `__getattr__`, and `name` no submodule of it."""
        if not self.is_module(module):
            return not _stdlib_binds(module, name)  # third-party modules are unknown to the check
        if self.is_module(f"{module}.{name}"):
            return False
        suffix = module.replace(".", "/")
        texts = [t for p, t in self._head.texts.items() if p in (f"{suffix}.py", f"{suffix}/__init__.py")
                 or p.endswith((f"/{suffix}.py", f"/{suffix}/__init__.py"))]  # fmt: skip
        return len(texts) == 1 and not re.search(r"^\s*from\s+\S+\s+import\s+\*|def __getattr__\b", texts[0], re.M)


def _stdlib_binds(module: str, name: str) -> bool:
    """Whether this interpreter's source of a standard library module binds `name` at module level: the
    standard library's stubs leave out some undocumented names (`urllib.request.proxy_bypass_environment`)
    that the module has. The source is read, never imported; a module without Python source binds nothing
    known here."""
    if module.split(".")[0] not in sys.stdlib_module_names:
        return False
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return False
    try:
        tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name:
            return True
        if isinstance(node, ast.Import | ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return True  # names from another module: not followed here
    return False


def _new_errors(plan: Plan, answers: list[dict[str, object]], repo: _Repository) -> list[tuple[CheckerError, str]]:
    head = _errors(answers[0], plan.head_path)
    base = _errors(answers[1], plan.head_of_base) if len(answers) > 1 else []
    base_texts = {plan.head_of_base[p]: t for p, t in plan.base.texts.items() if p in plan.head_of_base}
    plan.report.at_head, plan.report.at_base = len(head), len(base)
    functions: dict[tuple[str, str], dict[int, str]] = {}

    def key(error: CheckerError, side: str, texts: dict[str, str]) -> tuple[str, str, str, str]:
        if (error.path, side) not in functions:
            functions[(error.path, side)] = enclosing_functions(ast.parse(texts[error.path]))
        where = functions[(error.path, side)].get(error.line, "")
        return error.path, error.code, where, normalised(error.message)

    before = Counter(key(e, "base", base_texts) for e, _ in base)
    trees: dict[str, ast.Module] = {}
    shapes: dict[str, object] = {}

    def parsed(path: str) -> ast.Module:
        if path not in trees:
            trees[path] = ast.parse(plan.head_texts[path])
        return trees[path]

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
        if rule == "types:unknown-attribute" and repo.assigned_somewhere(error, plan.head_texts[error.path]):
            continue
        if mypy_not_the_program(error, rule, parsed(error.path), plan.head.texts, shapes):
            continue
        new.append((error, rule))
    return sorted(new, key=lambda pair: (pair[0].path, pair[0].line))


def _definitions(plan: Plan) -> dict[str, list[tuple[str, ast.AST]]]:
    """Every function and class of the changed files at head, by name."""
    out: dict[str, list[tuple[str, ast.AST]]] = {}
    for path in plan.changes:
        for node in ast.walk(ast.parse(plan.head_texts[path])):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out.setdefault(node.name, []).append((path, node))
    return out


def _anchor(plan: Plan, shown: dict[str, set[int]], message: str) -> tuple[str, int] | None:
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
    severity: Severity = "medium" if rule == "types:possibly-unbound" else "high"
    return Issue(line, rule, severity, title, body, kind=rule.removeprefix("types:"), confidence="high")


def _parameters_changed(plan: Plan) -> set[str]:
    """Names of the functions and classes, at any depth of a changed file, whose parameters (not their
    annotations) the change altered, or that it removed."""

    def signatures(text: str) -> dict[str, set[Signature]]:
        out: dict[str, set[Signature]] = {}
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out.setdefault(node.name, set()).add(signature_of(node))
            elif isinstance(node, ast.ClassDef):
                inits = [s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"]
                out.setdefault(node.name, set()).update(signature_of(i, drop_first=True) for i in inits)
        return out

    changed: set[str] = set()
    for base_path, head_path in plan.head_of_base.items():
        if head_path not in plan.changes or base_path not in plan.base.texts:
            continue
        before, after = signatures(plan.base.texts[base_path]), signatures(plan.head_texts[head_path])
        changed |= {name for name, sigs in before.items() if after.get(name) != sigs}
    return changed


def _place(plan: Plan, new: list[tuple[CheckerError, str]]) -> None:
    """At the error's line when the change added it. An error on a line the change did not write (a
    caller, a body whose parameter gained an annotation) is the change's only through a definition
    whose parameters it altered or that it removed, named in the message: at that line when the diff
    shows it, else at the definition; other such errors (a type that became known) are not reported."""
    shown = {
        p: {ln.new_line for h in c.hunks for ln in h.lines if ln.new_line is not None} for p, c in plan.changes.items()
    }
    added = {p: set(c.added_lines()) for p, c in plan.changes.items()}
    altered = _parameters_changed(plan)
    grouped: dict[tuple[str, int, str], list[CheckerError]] = {}
    for error, rule in new:
        if error.line in added.get(error.path, set()):
            plan.report.issues.setdefault(error.path, []).append(_issue(rule, error.line, [error], here=True))
            continue
        if not altered & set(re.findall(r'"(\w+)"', error.message)):
            plan.report.unplaced += 1
        elif error.line in shown.get(error.path, set()):
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
    plan = Plan(context, in_scope)
    if not plan.head.sources:
        return plan.report
    left = context.seconds_left()
    timeout_s = TIMEOUT_S if left is None else min(TIMEOUT_S, max(1.0, left))  # the review's deadline first
    answers, why = _answer(plan, timeout_s)  # [head] alone when the head has no error of a reported code
    if answers is None:
        plan.report.notes.setdefault("", []).append(
            ("analyzer-error", f"{CHECKER} {why}; new type errors in {len(plan.head.sources)} files were not checked")
        )
        return plan.report
    _place(plan, _new_errors(plan, answers, _Repository(context.workspace, plan.head)))
    return plan.report
