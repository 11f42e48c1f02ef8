"""The analyzers read Python 3.12-3.15 syntax on the 3.11 service, with the file's own line numbers.

Each source below is refused by the running interpreter's `ast.parse` (checked first, so a test can
not pass by never reaching the reader); `parse_python` must give the tree 3.12+ builds, less the
fields 3.11 has no place for (type parameters), at the same lines.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reviewers.analyzers import bandit, pysyntax, ruff
from reviewers.analyzers.bandit import bandit_issues
from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.pysyntax import parse_python
from reviewers.kernel.contracts import FileChange
from reviewers.kernel.errors import PythonSyntaxError


def _newer(source: str) -> str:
    source = textwrap.dedent(source).lstrip("\n")
    with pytest.raises(SyntaxError):
        ast.parse(source)  # the point of each case: 3.11 cannot read it
    return source


def _line_of(tree: ast.AST, text: str, source: str) -> int:
    """The line of the first node whose source segment is `text`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.expr | ast.stmt) and ast.get_source_segment(source, node) == text:
            return node.lineno
    raise AssertionError(f"no node reads {text!r}")


def _lines(source: str, text: str) -> int:
    return next(n for n, line in enumerate(source.splitlines(), start=1) if text in line)


FSTRINGS = '''
    import os


    def greet(d, rows, base):
        a = f"{d["name"]} and {d['x']}"
        b = f"{'\\n'.join(rows)}"
        c = f"""total: {
            len(rows)  # how many
            + 1
        }"""
        e = f"{f"{f"{base}"}"}"
        g = f"{ d["x"] = }" "tail" f"{base!r:>{d["w"]}}"
        return os.path.join(base, d["file"])
'''


def test_312_fstrings_parse_into_joined_strings_at_their_lines() -> None:
    source = _newer(FSTRINGS)
    tree = parse_python(source, "greet.py")
    assigned = {n.targets[0].id: n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)}  # type: ignore[attr-defined]
    assert all(isinstance(v, ast.JoinedStr) for v in assigned.values())
    first = assigned["a"]
    assert isinstance(first, ast.JoinedStr)
    assert [type(v).__name__ for v in first.values] == ["FormattedValue", "Constant", "FormattedValue"]
    assert ast.unparse(first.values[0].value) == "d['name']"  # type: ignore[attr-defined]
    joined = assigned["b"].values[0].value  # type: ignore[attr-defined]
    assert isinstance(joined, ast.Call) and joined.func.value.value == "\n"  # type: ignore[attr-defined]
    multi = assigned["c"]
    assert isinstance(multi, ast.JoinedStr)
    total = multi.values[1].value  # type: ignore[attr-defined]
    assert ast.unparse(total) == "len(rows) + 1"
    assert (total.lineno, total.end_lineno) == (_lines(source, "len(rows)"), _lines(source, "+ 1"))
    innermost = assigned["e"].values[0].value.values[0].value.values[0].value  # type: ignore[attr-defined]
    assert isinstance(innermost, ast.Name) and innermost.id == "base"
    debug = assigned["g"]
    assert isinstance(debug, ast.JoinedStr)
    assert debug.values[0].value == ' d["x"] = '  # type: ignore[attr-defined]
    assert debug.values[1].conversion == ord("r")  # type: ignore[attr-defined]
    assert debug.values[2].value == "tail"  # type: ignore[attr-defined]
    spec = debug.values[3].format_spec  # type: ignore[attr-defined]
    assert ast.unparse(spec.values[1].value) == "d['w']"
    # every statement stays on its own line, including those after the multi-line f-string
    for name in ("a", "b", "c", "e", "g"):
        assert assigned[name].lineno == _lines(source, f"{name} = f")
    ret = next(n for n in ast.walk(tree) if isinstance(n, ast.Return))
    assert ret.lineno == _lines(source, "return os.path")
    assert _line_of(tree, 'd["file"]', source) == _lines(source, "return os.path")


PEP695 = """
    from collections.abc import Callable


    class Box[T]:
        def __init__(self, item: T) -> None:
            self.item = item


    def first[T: (int, str), *Ts, **P](
        xs: list[T], f: Callable[P, T]
    ) -> T:
        return xs[0]


    def spread[
        K,
        V = int,
    ](pairs: dict[K, V]) -> list[K]:
        return list(pairs)


    type Pair[A] = tuple[A, A]
    type Json = dict[str, Json] | list[Json] | str | None; done = True
    after = first([1], print)
"""


def test_pep695_generics_and_type_aliases_parse_and_keep_line_numbers() -> None:
    source = _newer(PEP695)
    tree = parse_python(source, "generic.py")
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert defs["Box"].lineno == _lines(source, "class Box")
    assert defs["first"].lineno == _lines(source, "def first")
    assert [a.arg for a in defs["first"].args.args] == ["xs", "f"]  # type: ignore[union-attr]
    assert defs["spread"].lineno == _lines(source, "def spread")
    assert [a.arg for a in defs["spread"].args.args] == ["pairs"]  # type: ignore[union-attr]
    assert defs["spread"].body[0].lineno == _lines(source, "return list(pairs)")
    aliases = {n.targets[0].id: n for n in tree.body if isinstance(n, ast.Assign)}  # type: ignore[attr-defined]
    assert ast.unparse(aliases["Pair"].value) == "tuple[A, A]"
    assert aliases["Pair"].lineno == _lines(source, "type Pair")
    assert aliases["Json"].lineno == aliases["done"].lineno == _lines(source, "type Json")
    assert aliases["after"].lineno == _lines(source, "after = first")


def test_newest_syntax_except_without_parentheses_lazy_imports_and_template_strings() -> None:
    source = _newer(
        """
        lazy import json
        try:
            value = json.loads(t"{payload!r} at {where:>{width}}")
        except ValueError, TypeError:
            value = None
        rows = [*chunk for chunk in chunks]
        """
    )
    tree = parse_python(source, "newest.py")
    assert isinstance(tree.body[0], ast.Import) and tree.body[0].names[0].name == "json"
    handler = tree.body[1].handlers[0]  # type: ignore[attr-defined]
    assert ast.unparse(handler.type) == "(ValueError, TypeError)" and handler.lineno == 4
    template = tree.body[1].body[0].value.args[0]  # type: ignore[attr-defined]
    # a t-string is a Template, not a str: never a JoinedStr an analyzer would take for string building
    assert ast.unparse(template.func) == "string.templatelib.Template"
    interpolation = template.args[0]
    assert ast.unparse(interpolation.func) == "string.templatelib.Interpolation"
    assert [ast.unparse(a) for a in interpolation.args[:3]] == ["payload", "'payload'", "'r'"]
    assert ast.unparse(template.args[1]) == "' at '"
    assert tree.body[2].lineno == 6


def test_a_file_that_already_uses_the_reader_s_names_is_read_right() -> None:
    source = _newer('_rl_fstring_0 = 1\nx = f"{d["k"]}"\ny = _rl_fstring_0(2)\n')
    tree = parse_python(source, "names.py")
    assert isinstance(tree.body[1].value, ast.JoinedStr)  # type: ignore[attr-defined]
    assert ast.unparse(tree.body[2]) == "y = _rl_fstring_0(2)"


def test_python_the_running_interpreter_reads_gets_its_own_tree() -> None:
    source = 'import os\n\n\ndef f(x):\n    return f"{x!r:>10}" + os.sep\n'
    assert ast.dump(parse_python(source, "plain.py"), include_attributes=True) == ast.dump(
        ast.parse(source), include_attributes=True
    )


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ('x = f"{d["a"]}"\n\ndef handler(:\n    return 1\n', "line 4"),  # newer syntax first, then an error
        ("def f(x:\n    return x\n", "'(' was never closed at line 1"),
        ('print "hello"\n', "Missing parentheses in call to 'print'"),
        ("x = " + "(" * 300 + ")" * 300 + "\n", "too many nested parentheses"),
        ("a = 1\x00\n", "a NUL byte at line 1"),
    ],
)
def test_a_file_no_version_reads_is_named_with_the_syntax_and_line(source: str, named: str) -> None:
    with pytest.raises(PythonSyntaxError) as caught:
        parse_python(source, "bad.py")
    assert caught.value.reason.startswith("parse error: ")
    assert named in caught.value.reason
    file = ChangedFile(FileChange(path="bad.py", old_path="bad.py", status="added"), source)
    assert file.python_tree is None
    assert file.python_syntax_error is not None and named in file.python_syntax_error.reason


def test_a_text_that_crashes_the_parser_is_a_parse_error_and_the_next_file_still_reads() -> None:
    # libcst's native parser dies (SIGSEGV) on a long chain of unary minus: in the service's own process
    # that would end the worker. It runs in a child process, so it is one file's parse error.
    crashing = 'x = f"{d["a"]}"\ny = ' + "-" * 50_000 + "1\n"
    with pytest.raises(PythonSyntaxError):
        parse_python(crashing, "hostile.py")
    assert isinstance(parse_python('z = f"{d["b"]}"\n', "next.py").body[0], ast.Assign)


def test_every_reader_of_one_text_shares_one_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    parses: list[str] = []
    real = pysyntax._parse

    def counted(source: str, path: str) -> tuple[ast.Module, bool]:
        parses.append(path)
        time.sleep(0.05)  # long enough for the other threads to ask while it runs
        return real(source, path)

    monkeypatch.setattr(pysyntax, "_parse", counted)
    source = "def shared(x):\n    return x  # parsed once for four reviewers\n"
    with ThreadPoolExecutor(max_workers=4) as pool:
        trees = list(pool.map(lambda _: parse_python(source, "pkg/shared.py"), range(4)))
    assert parses == ["pkg/shared.py"] and all(tree is trees[0] for tree in trees)
    broken = "def shared(:\n"
    for _ in range(2):  # a refusal is remembered too, and raised afresh for each reader
        with pytest.raises(PythonSyntaxError) as refused:
            parse_python(broken, "pkg/broken.py")
        assert refused.value.path == "pkg/broken.py"
    assert parses == ["pkg/shared.py", "pkg/broken.py"]


def test_a_text_is_parsed_once_whatever_its_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The security reviewer and the taint analysis's project reading name one text differently;
    before, each name parsed it again."""
    parses: list[str] = []
    real = pysyntax._parse

    def counted(source: str, path: str) -> tuple[ast.Module, bool]:
        parses.append(path)
        return real(source, path)

    monkeypatch.setattr(pysyntax, "_parse", counted)
    plain = "def once(x):\n    return x  # one parse for every name\n"
    newer = _newer("type Alias = list[int]\n")  # the running 3.11 refuses it: the converter reads it
    for source in (plain, newer):
        assert parse_python(source, "pkg/a.py") is parse_python(source, "other/name.py")
    assert parses == ["pkg/a.py", "pkg/a.py"]
    broken = "def once(:\n"
    for path in ("pkg/broken.py", "other/broken.py"):
        with pytest.raises(PythonSyntaxError) as refused:
            parse_python(broken, path)
        assert refused.value.path == path
    assert parses == ["pkg/a.py", "pkg/a.py", "pkg/broken.py"]


def test_bandit_s_checks_see_a_file_written_in_312_syntax() -> None:
    source = _newer(
        """
        import subprocess


        def run(cmd, d):
            label = f"{d["name"]}"
            subprocess.call(cmd, shell=True)
            return label
        """
    )
    file = ChangedFile(FileChange(path="run.py", old_path="run.py", status="added", collapsed=True), source)
    issues = bandit_issues(file)
    assert [(i.rule, i.line) for i in issues if i.kind == "shell"] == [("bandit:B602", 6)]
    # the batch run a reviewer starts before its files are analyzed reads it too
    batch = [("run.py", source + "# batch\n"), ("g.py", "import os\n\n\ndef g(p):\n    os.system(f'ls {p}')\n")]
    bandit.prefetch(batch)
    assert ruff._key(batch[0][1], "run.py", bandit.BANDIT_RULES) in ruff._prefetched
    file = ChangedFile(FileChange(path="run.py", old_path="run.py", status="added", collapsed=True), batch[0][1])
    assert [(i.rule, i.line) for i in bandit_issues(file) if i.kind == "shell"] == [("bandit:B602", 6)]


SAMPLES = [FSTRINGS, PEP695]
_NORMALISE = """
import ast, json, sys
class Strip(ast.NodeTransformer):
    def generic_visit(self, node):
        super().generic_visit(node)
        if hasattr(node, "type_params"):
            node.type_params = []
        return node
    def visit_TypeAlias(self, node):
        self.generic_visit(node)
        target = ast.copy_location(ast.Name(node.name.id, ast.Store()), node.name)
        return ast.copy_location(ast.Assign(targets=[target], value=node.value), node)
tree = Strip().visit(ast.parse(sys.stdin.read()))
print(json.dumps([(type(n).__name__, getattr(n, "lineno", None)) for n in ast.walk(tree) if not isinstance(n, ast.expr_context)]))
"""


def _newer_interpreter() -> str | None:
    """A Python 3.12+ that runs, if this machine has one (pyenv's shims may name one that does not)."""
    candidates = [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.1[2-9]*/bin/python"), reverse=True)]
    candidates += [found for name in ("python3.14", "python3.13", "python3.12") if (found := shutil.which(name))]
    for candidate in candidates:
        if subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


@pytest.mark.parametrize("sample", SAMPLES, ids=["fstrings", "pep695"])
def test_the_tree_matches_what_a_newer_interpreter_builds(sample: str) -> None:
    newer = _newer_interpreter()
    if newer is None:
        pytest.skip("no Python 3.12+ on this machine to compare with")
    source = textwrap.dedent(sample).lstrip("\n")
    native = subprocess.run([newer, "-c", _NORMALISE], input=source, capture_output=True, text=True, check=True)
    expected = [tuple(x) for x in json.loads(native.stdout)]
    tree = parse_python(source, "sample.py")
    ours = [
        (type(n).__name__, getattr(n, "lineno", None)) for n in ast.walk(tree) if not isinstance(n, ast.expr_context)
    ]
    # string internals (text parts, replacement fields) carry the string's position in our tree, their own in 3.12's
    inside = {"Constant", "FormattedValue", "JoinedStr"}
    assert [(k, None if k in inside else n) for k, n in ours] == [(k, None if k in inside else n) for k, n in expected]
