"""Callers left broken (`reviewers.analyzers.callers`): each resolution it follows, and the places it
stays silent because the text does not fix what a call binds to."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from reviewers.analyzers.callers import find_broken_callers
from reviewers.analyzers.callers.signature import bind_error, signature_of


def call(text: str) -> ast.Call:
    node = ast.parse(text).body[0]
    assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
    return node.value


def sig(text: str) -> Any:
    fn = ast.parse(text).body[0]
    assert isinstance(fn, ast.FunctionDef)
    return signature_of(fn)


@pytest.mark.parametrize(
    ("definition", "the_call", "error"),
    [
        ("def f(a, b): pass", "f(1, 2)", None),
        ("def f(a): pass", "f(1, 2)", "2 positional arguments"),
        ("def f(a, *, b): pass", "f(1, 2)", "2 positional arguments"),
        ("def f(a, b=1): pass", "f(a=1, c=2)", "the keyword `c`"),
        ("def f(a, **kw): pass", "f(a=1, c=2)", None),
        ("def f(a, b): pass", "f(1)", "required `b`"),
        ("def f(a, /, b): pass", "f(a=1, b=2)", "the keyword `a`"),
        ("def f(a): pass", "f(*args)", None),  # spread: the text does not say
        ("def f(a): pass", "f(1, a=2)", "twice"),
    ],
)
def test_bind_error_says_what_python_would(definition: str, the_call: str, error: str | None) -> None:
    found = bind_error(sig(definition), call(the_call))
    assert (found is None) if error is None else (found is not None and error in found)


MOD = "def area(w, h):\n    return w * h\n"
MOD_NEW = "def area(w, h, *, unit):\n    return w * h\n"


def issues_of(build_context: Any, base: dict[str, str], head: dict[str, str]) -> dict[str, list[int]]:
    report = find_broken_callers(build_context(base, head))
    return {path: [i.line for i in issues] for path, issues in report.issues.items()}


def test_an_import_two_files_could_satisfy_is_not_followed(build_context: Any) -> None:
    caller = "from geo.shapes import area\n\nX = area(1, 2)\n"
    base = {"src/geo/shapes.py": MOD, "app/caller.py": caller}
    head = {**base, "src/geo/shapes.py": MOD_NEW}
    assert issues_of(build_context, base, head) == {"src/geo/shapes.py": [1]}  # src layout resolves
    twin = {"vendor_copy/geo/shapes.py": MOD}
    assert issues_of(build_context, {**base, **twin}, {**head, **twin}) == {}  # which one is meant?


def test_module_aliases_and_relative_imports_are_followed(build_context: Any) -> None:
    aliased = "import geo.shapes as s\n\nX = s.area(1, 2)\n"
    relative = "from .shapes import area as a\n\nY = a(1, h=2)\n"
    base = {"geo/__init__.py": "", "geo/shapes.py": MOD, "geo/one.py": aliased, "geo/two.py": relative}
    head = {**base, "geo/shapes.py": MOD_NEW}
    report = find_broken_callers(build_context(base, head))
    [issue] = report.issues["geo/shapes.py"]
    assert "`geo/one.py:3`" in issue.body and "`geo/two.py:3`" in issue.body
    assert "required `unit`" in issue.body


def test_a_class_constructor_is_followed_and_classes_built_their_own_way_are_not(build_context: Any) -> None:
    cls = "class Box:\n    def __init__(self, w):\n        self.w = w\n"
    caller = "from shop.box import Box\n\nB = Box(1)\n"
    base = {"shop/box.py": cls, "shop/use.py": caller}
    head = {**base, "shop/box.py": cls.replace("(self, w)", "(self, w, h)")}
    assert issues_of(build_context, base, head) == {"shop/box.py": [2]}
    enum = "from enum import Enum\n\n\nclass Box(Enum):\n    def __init__(self, w):\n        self.w = w\n"
    base_enum = {**base, "shop/box.py": enum}
    head_enum = {**base, "shop/box.py": enum.replace("(self, w)", "(self, w, h)")}
    assert issues_of(build_context, base_enum, head_enum) == {}


def test_a_removed_name_is_reported_unless_the_module_can_still_give_it(build_context: Any) -> None:
    base = {"lib/util.py": MOD + "\n\ndef old():\n    return 1\n", "lib/use.py": "from lib.util import old\n"}
    head = {**base, "lib/util.py": MOD}
    assert issues_of(build_context, base, head) == {"lib/util.py": [2]}
    reexported = {**head, "lib/util.py": MOD + "\nfrom lib.compat import old\n"}
    assert issues_of(build_context, base, reexported) == {}
    dynamic = {**head, "lib/util.py": MOD + "\n\ndef __getattr__(name):\n    return 1\n"}
    assert issues_of(build_context, base, dynamic) == {}


def test_a_local_name_that_shadows_the_import_is_not_the_function(build_context: Any) -> None:
    caller = "from lib.util import area\n\n\ndef f(area):\n    return area(1)\n\n\ndef g():\n    area = max\n    return area(1)\n"
    base = {"lib/util.py": MOD, "lib/use.py": caller}
    head = {**base, "lib/util.py": MOD_NEW}
    assert issues_of(build_context, base, head) == {}
