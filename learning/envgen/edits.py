"""Benign edits to real Python source: the bulk of a synthesised merge request, none of them a defect.

Each edit reads the syntax tree, changes the text at positions the tree and the tokenizer give, and
is checked afterwards: the result must parse, and (for a rename) its tree must equal the original's
with the one name replaced. An edit that cannot apply safely to a file returns None and another is
tried. The kinds are what a real refactoring merge request is made of: a local variable renamed
consistently, a docstring added, a debug log line, independent imports reordered, a return type hint.
"""

from __future__ import annotations

import ast
import io
import keyword
import random
import tokenize
from collections.abc import Callable

Edit = Callable[[str, random.Random], "str | None"]
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

# Prefixes a careful renamer adds: the new name says more, never collides with a builtin.
_RENAME_PREFIXES = ("current_", "local_", "the_", "resolved_")
_DOC_VERBS = ("Return", "Compute", "Build", "Handle", "Resolve")


def _functions(tree: ast.AST) -> list[FunctionNode]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" "))]


def _body_starts_on_own_line(fn: FunctionNode) -> bool:
    first = fn.body[0]
    start = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", []))])
    return start > fn.lineno and first.col_offset > fn.col_offset


class _Renamer(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = self.new
        return node


def rename_local(text: str, rng: random.Random) -> str | None:
    """Rename one local variable of one function everywhere in that function."""
    tree = ast.parse(text)
    options: list[tuple[FunctionNode, str]] = []
    module_names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)
    }
    for fn in _functions(tree):
        nested = [n for n in ast.walk(fn) if n is not fn and isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef
                  | ast.ClassDef | ast.Lambda | ast.Global | ast.Nonlocal)]  # fmt: skip
        if nested:
            continue  # closures and scope statements make "local" ambiguous: leave such functions alone
        stored = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        params = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
        attrs = {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
        kwargs = {k.arg for k in ast.walk(fn) if isinstance(k, ast.keyword) and k.arg}
        strings = " ".join(n.value for n in ast.walk(fn) if isinstance(n, ast.Constant) and isinstance(n.value, str))
        for name in sorted(stored - params - attrs - kwargs):
            if len(name) > 1 and not name.startswith("_") and name not in strings:
                options.append((fn, name))
    rng.shuffle(options)
    for fn, old in options[:5]:
        new = next((p + old for p in rng.sample(_RENAME_PREFIXES, len(_RENAME_PREFIXES))
                    if p + old not in module_names and not keyword.iskeyword(p + old)), None)  # fmt: skip
        if new is None:
            continue
        edited = _replace_names(text, old=old, new=new, first=fn.lineno, last=fn.end_lineno or fn.lineno)
        if edited is not None and _same_tree_after_rename(text, edited, fn=fn, old=old, new=new):
            return edited
    return None


def _replace_names(text: str, *, old: str, new: str, first: int, last: int) -> str | None:
    lines = text.splitlines(keepends=True)
    hits: list[tuple[int, int]] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.NAME and tok.string == old and first <= tok.start[0] <= last:
            before = tokens[i - 1].string if i else ""
            if before == ".":
                return None  # an attribute of the same name: the tree check would catch it, stop early
            hits.append(tok.start)
    for row, col in sorted(hits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old) :]
    return "".join(lines)


def _same_tree_after_rename(original: str, edited: str, *, fn: FunctionNode, old: str, new: str) -> bool:
    try:
        after = ast.parse(edited)
    except SyntaxError:
        return False
    before = ast.parse(original)
    target = next(n for n in _functions(before) if n.lineno == fn.lineno and n.col_offset == fn.col_offset)
    _Renamer(old, new).visit(target)
    return ast.dump(before) == ast.dump(after)


def add_docstring(text: str, rng: random.Random) -> str | None:
    """Give one function without a docstring a one-line docstring."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    options = [
        fn for fn in _functions(tree)
        if ast.get_docstring(fn) is None and _body_starts_on_own_line(fn) and not fn.name.startswith("__")
    ]  # fmt: skip
    if not options:
        return None
    fn = rng.choice(options)
    first = fn.body[0]
    at = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", []))])
    indent = _indent_of(lines[first.lineno - 1])
    words = fn.name.strip("_").replace("_", " ") or "value"
    doc = f'{indent}"""{rng.choice(_DOC_VERBS)} {words}."""\n'
    return _checked("".join([*lines[: at - 1], doc, *lines[at - 1 :]]))


def _module_logger(tree: ast.Module) -> str | None:
    """The name of a module-level `x = logging.getLogger(...)`, if the module has one."""
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute | ast.Name)
            and getattr(node.value.func, "attr", getattr(node.value.func, "id", "")) == "getLogger"
        ):
            return node.targets[0].id
    return None


def add_debug_log(text: str, rng: random.Random) -> str | None:
    """Log entry to one top-level function at debug level, through the module's logger (added if missing)."""
    tree = ast.parse(text)
    logger = _module_logger(tree)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)
    }
    if logger is None and "logger" in names:
        return None  # a `logger` that is not a module logger: do not shadow it
    options = [fn for fn in _functions(tree) if _body_starts_on_own_line(fn) and fn.col_offset == 0]
    if not options:
        return None
    fn = rng.choice(options)
    lines = text.splitlines(keepends=True)
    has_doc = ast.get_docstring(fn) is not None
    if has_doc and len(fn.body) < 2:
        return None
    anchor = fn.body[1] if has_doc else fn.body[0]  # after the docstring, so it stays the docstring
    at = min([anchor.lineno, *(d.lineno for d in getattr(anchor, "decorator_list", []))])
    indent = _indent_of(lines[anchor.lineno - 1])
    lines.insert(at - 1, f'{indent}{logger or "logger"}.debug("%s called", "{fn.name}")\n')
    if logger is None:
        header_at = after_imports(tree)
        imported = any(isinstance(n, ast.Import) and any(a.name == "logging" and a.asname is None for a in n.names)
                       for n in tree.body)  # fmt: skip
        added = ([] if imported else ["import logging\n"]) + ["logger = logging.getLogger(__name__)\n"]
        lines[header_at:header_at] = added
    return _checked("".join(lines))


def reorder_imports(text: str, rng: random.Random) -> str | None:
    """Sort one run of adjacent single-line `import x` statements (independent: plain module imports)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    runs: list[list[ast.Import]] = []
    current: list[ast.Import] = []
    for node in tree.body:
        simple = isinstance(node, ast.Import) and node.end_lineno == node.lineno and len(node.names) == 1
        if simple and (not current or node.lineno == current[-1].lineno + 1):
            current.append(node)  # type: ignore[arg-type]  # narrowed by `simple`
            continue
        if len(current) > 1:
            runs.append(current)
        current = [node] if simple else []  # type: ignore[list-item]
    if len(current) > 1:
        runs.append(current)
    for run in rng.sample(runs, len(runs)):
        block = [lines[n.lineno - 1] for n in run]
        reordered = sorted(block, key=str.lower)
        if reordered == block:
            reordered = sorted(block, key=str.lower, reverse=True)
        if reordered != block:
            start = run[0].lineno - 1
            lines[start : start + len(block)] = reordered
            return _checked("".join(lines))
    return None


def add_return_hint(text: str, rng: random.Random) -> str | None:
    """Annotate `-> None` on one function that returns nothing and yields nothing."""
    tree = ast.parse(text)
    options = []
    for fn in _functions(tree):
        own = [n for n in ast.walk(fn) if isinstance(n, ast.Return | ast.Yield | ast.YieldFrom)]
        if fn.returns is None and not own and not fn.decorator_list and not fn.name.startswith("__"):
            options.append(fn)
    if not options:
        return None
    fn = rng.choice(options)
    lines = text.splitlines(keepends=True)
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    depth = 0
    seen_def = False
    for tok in tokens:
        if tok.start[0] < fn.lineno:
            continue
        if tok.type == tokenize.NAME and tok.string == "def":
            seen_def = True
        elif seen_def and tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif seen_def and tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif seen_def and depth == 0 and tok.type == tokenize.OP and tok.string == ":":
            row, col = tok.start
            line = lines[row - 1]
            lines[row - 1] = line[:col] + " -> None" + line[col:]
            return _checked("".join(lines))
    return None


def after_imports(tree: ast.Module) -> int:
    """0-based line index just after the module's leading docstring, `__future__` and import block."""
    end = 0
    for i, node in enumerate(tree.body):
        docstring = i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if docstring or isinstance(node, ast.Import | ast.ImportFrom):
            end = node.end_lineno or node.lineno
            continue
        break
    return end


def _checked(text: str) -> str | None:
    try:
        ast.parse(text)
    except SyntaxError:
        return None
    return text


_NOTES = (
    "# Kept small on purpose: callers rely on its behaviour.",
    "# See the module docstring for the conventions used here.",
    "# Order matters below: later definitions build on earlier ones.",
)


def add_comment(text: str, rng: random.Random) -> str | None:
    """An explanatory comment above one function or class (the edit that fits any module with a definition)."""
    tree = ast.parse(text)
    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    if not defs:
        return None
    node = rng.choice(defs)
    at = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = text.splitlines(keepends=True)
    lines.insert(at - 1, f"{_indent_of(lines[at - 1])}{rng.choice(_NOTES)}\n")
    return _checked("".join(lines))


BENIGN_EDITS: dict[str, Edit] = {
    "comment": add_comment,
    "rename-local": rename_local,
    "docstring": add_docstring,
    "debug-log": add_debug_log,
    "reorder-imports": reorder_imports,
    "return-hint": add_return_hint,
}


def apply_benign_edits(text: str, rng: random.Random, *, count: int) -> tuple[str, list[str]]:
    """Up to `count` different benign edits, in random order; (new text, names of the edits applied)."""
    applied: list[str] = []
    for name in rng.sample(list(BENIGN_EDITS), len(BENIGN_EDITS)):
        if len(applied) >= count:
            break
        edited = BENIGN_EDITS[name](text, rng)
        if edited is not None and edited != text:
            text = edited
            applied.append(name)
    return text, applied
