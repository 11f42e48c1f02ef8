"""The repository's modules as the taint interpreter reads them, and the budget it runs under.

Modules are read at the head commit through the workspace and parsed once; an import is resolved
to a file by its dotted name (from the root, from `src/`, beside the importing file, or relative).
Function summaries are memoised here by `"path::qualname"`. Everything is bounded: modules read,
characters per module, summaries computed, and the work they do; what a bound cut off is named in
`unfinished`, never dropped silently.

The summaries' bound is a count of work, not seconds: a wall-clock budget cut different functions
from the same merge request depending on what else ran on the machine, so one review named files
"budget" under load that it read in full when idle. `steps` counts the statements and expressions
the summary interpreters ran; the same change does the same work and is cut at the same place on
any machine. The review's deadline (`past_deadline`) is only a safety net behind it.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from reviewers.analyzers.flow.values import Value
from reviewers.analyzers.parsing import all_statements

MAX_MODULES = 400  # modules read per review (the changed files and what they import)
MAX_MODULE_CHARS = 400_000  # a larger module is not read for summaries (generated or vendored code)
MAX_SUMMARIES = 3000
# Statements and expressions the summaries of one review may interpret, module reads included (the
# changed files' own analysis is not cut by it). Measured on 2 shared cores (load ~3.5): a
# 10,000-line merge request of web code (`bench.large_mr`) spends about 21,000; each of twelve
# released packages reviewed whole as one change 35,000 to 306,000 (fastapi: 23,800 lines, reading
# 199 modules with pydantic's); a repository built to exhaust it stops there after about 2.5 s.
MAX_SUMMARY_STEPS = 500_000
# Reading and parsing a module for summaries costs about what interpreting one step costs per this
# many tokens (ast.parse takes 3-5 µs a token, dense or sparse code alike; a step about 9 µs), so a
# review that reads many large modules spends its budget on them too. Tokens are counted by a regex
# (about a tenth of the parse's cost): characters or lines vary 4-fold against the parse's cost.
TOKENS_PER_STEP = 2
_TOKEN = re.compile(r"\w+|[^\w\s]")
DEADLINE_CUT = "review deadline"
SUMMARY_BUDGET_CUT = "summary budget"
MAX_UNFINISHED_NAMED = 5

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True, slots=True)
class ParamSink:
    """A parameter of a summarised function that reaches a sink inside it (or inside its callees)."""

    param: str
    path: tuple[str, ...]
    cleared: frozenset[str]
    cls: str
    where: str  # "pkg/db.py:12"
    call: str  # "cursor.execute"


@dataclass(frozen=True, slots=True)
class Summary:
    params: tuple[str, ...]
    returns: Value
    sinks: tuple[ParamSink, ...] = ()
    fields: tuple[tuple[str, Value], ...] = ()
    complete: bool = True


@dataclass
class ModuleInfo:
    path: str
    tree: ast.Module
    aliases: dict[str, str]  # local name → dotted name it was imported as (relative imports resolved)
    functions: dict[str, FunctionNode]  # "f", "Class.method"
    classes: dict[str, ast.ClassDef]
    frameworks: frozenset[str]
    globals: dict[str, Value] | None = None
    ui_handlers: frozenset[str] | None = None  # functions a UI framework hands user input (`handlers`)

    @property
    def dotted(self) -> str:
        return module_name(self.path)


def module_name(path: str) -> str:
    stem = path[:-3] if path.endswith(".py") else path
    parts = [p for p in stem.split("/") if p]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def statements(tree: ast.Module) -> list[ast.stmt]:
    """Every statement of a module, nested ones included, without visiting expressions."""
    return all_statements(tree.body)


def _aliases(tree: ast.Module, path: str) -> dict[str, str]:
    package = module_name(path).split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    out: dict[str, str] = {}
    every = statements(tree)
    fallback = _import_fallbacks(every)
    for node in every:
        bind = out.setdefault if id(node) in fallback else out.__setitem__
        if isinstance(node, ast.Import):
            for alias in node.names:
                bind(alias.asname or alias.name.split(".")[0], alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                keep = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                base = ".".join([*keep, *([base] if base else [])])
            for alias in node.names:
                if alias.name != "*":
                    bind(alias.asname or alias.name, f"{base}.{alias.name}" if base else alias.name)
    return out


_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})


def _import_fallbacks(every: list[ast.stmt]) -> set[int]:
    """The statements of `except ImportError:` handlers: `try: from xml.etree import ElementTree`
    `except ImportError: from elementtree import ElementTree` binds the name to what the `try` imports
    wherever that import works, so the fallback names it only where nothing else did."""
    out: set[int] = set()
    for node in every:
        if not isinstance(node, ast.Try):
            continue
        for handler in node.handlers:
            caught = handler.type
            names = caught.elts if isinstance(caught, ast.Tuple) else [caught] if caught is not None else []
            if any(isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS for n in names):
                out.update(id(s) for s in all_statements(handler.body))
    return out


def _definitions(tree: ast.Module) -> tuple[dict[str, FunctionNode], dict[str, ast.ClassDef]]:
    functions: dict[str, FunctionNode] = {}
    classes: dict[str, ast.ClassDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = node
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    functions[f"{node.name}.{item.name}"] = item
    return functions, classes


def _frameworks(aliases: dict[str, str]) -> frozenset[str]:
    roots = {dotted.split(".")[0] for dotted in aliases.values()}
    return frozenset(roots & {"flask", "quart", "django", "fastapi", "starlette", "aiohttp", "bottle", "pyramid"})


def build_module(path: str, tree: ast.Module) -> ModuleInfo:
    aliases = _aliases(tree, path)
    functions, classes = _definitions(tree)
    return ModuleInfo(path, tree, aliases, functions, classes, _frameworks(aliases))


@dataclass
class Project:
    """The modules a review can read, with the summaries computed over them so far."""

    read_file: Callable[[str], str | None]
    parse: Callable[[str, str], ast.Module | None]
    # every path at head, when the workspace can list them: an import is looked for in this list
    # rather than by reading candidate files (over HTTP, each miss would be a request)
    list_paths: Callable[[], list[str]] | None = None
    step_budget: int = MAX_SUMMARY_STEPS
    # the review's deadline: a last resort behind the step budget (a test passes its own)
    past_deadline: Callable[[], bool] = field(default=lambda: False)
    steps: int = 0  # statements and expressions the summary interpreters have run
    modules: dict[str, ModuleInfo | None] = field(default_factory=dict)
    summaries: dict[str, Summary] = field(default_factory=dict)
    in_progress: set[str] = field(default_factory=set)
    unfinished: dict[str, str] = field(default_factory=dict)  # what a bound cut off → which bound
    facts: dict[str, object] = field(default_factory=dict)  # memoised answers about the repository (`handlers`)
    _resolved: dict[str, str | None] = field(default_factory=dict)
    _found: dict[str, tuple[ModuleInfo, str] | None] = field(default_factory=dict)
    _known: frozenset[str] | None = None

    def summary_cut(self) -> str | None:
        """Why no further summary may be computed (None while they may): the bound that was reached."""
        if self.steps >= self.step_budget or len(self.summaries) >= MAX_SUMMARIES:
            return SUMMARY_BUDGET_CUT
        if self.past_deadline():
            return DEADLINE_CUT
        return None

    def add(self, path: str, tree: ast.Module) -> ModuleInfo:
        info = build_module(path, tree)
        self.modules[path] = info
        return info

    def module_at(self, path: str) -> ModuleInfo | None:
        if path in self.modules:
            return self.modules[path]
        if len(self.modules) >= MAX_MODULES:
            self.unfinished.setdefault(path, f"more than {MAX_MODULES} modules")
            return None
        if (cut := self.summary_cut()) is not None:
            self.unfinished.setdefault(path, cut)
            return None  # not memoised: a module the change itself adds is still read when analysed
        text = self.read_file(path)
        info: ModuleInfo | None = None
        if text is not None and len(text) > MAX_MODULE_CHARS:
            self.unfinished.setdefault(path, f"over {MAX_MODULE_CHARS} characters")
        elif text is not None:
            self.steps += len(_TOKEN.findall(text)) // TOKENS_PER_STEP
            if (tree := self.parse(text, path)) is not None:
                info = build_module(path, tree)
        self.modules[path] = info
        return info

    def resolve(self, dotted: str, importer: str) -> tuple[ModuleInfo, str] | None:
        """The module a dotted name lives in and the rest of the name in it ("" for the module):
        `pkg.helpers.get_value` → (pkg/helpers.py, "get_value")."""
        key = f"{dotted}|{posixpath.dirname(importer)}"
        if key in self._found:
            return self._found[key]
        found: tuple[ModuleInfo, str] | None = None
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            path = self._module_path(".".join(parts[:cut]), importer)
            if path is not None and (info := self.module_at(path)) is not None:
                found = (info, ".".join(parts[cut:]))
                break
        self._found[key] = found
        return found

    def _module_path(self, module: str, importer: str) -> str | None:
        key = f"{module}|{posixpath.dirname(importer)}"
        if key in self._resolved:
            return self._resolved[key]
        rel = module.replace(".", "/")
        here = posixpath.dirname(importer)
        found: str | None = None
        if self._known is None and self.list_paths is not None:
            self._known = frozenset(self.list_paths())
        for root in ("", "src/", f"{here}/" if here else ""):
            for candidate in (f"{root}{rel}.py", f"{root}{rel}/__init__.py"):
                if candidate in self.modules and self.modules[candidate] is not None:
                    found = candidate
                    break
                if self._known is not None and candidate not in self._known:
                    continue
                if self.read_file(candidate) is not None:
                    found = candidate
                    break
            if found:
                break
        self._resolved[key] = found
        return found

    def describe_unfinished(self, *, since: int = 0) -> str | None:
        """What the bounds cut off, in words: the entries added after the first `since`."""
        named = list(self.unfinished.items())[since:]
        if not named:
            return None
        shown = "; ".join(f"{what} ({why})" for what, why in named[:MAX_UNFINISHED_NAMED])
        more = f"; and {len(named) - MAX_UNFINISHED_NAMED} more" if len(named) > MAX_UNFINISHED_NAMED else ""
        return f"taint summaries not computed for {shown}{more}"
