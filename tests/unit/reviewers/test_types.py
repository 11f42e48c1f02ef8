"""New type errors (`reviewers.analyzers.types`): which of mypy's errors are reported as which rule,
the module names and stubs the trees are built with, and the shapes that must stay silent. Each
class through the command line is in tests/integration/test_review_types.py."""

from __future__ import annotations

from typing import Any

import pytest

from reviewers.analyzers.types import check_types
from reviewers.analyzers.types.classes import enclosing_functions, normalised, rule_of
from reviewers.analyzers.types.plan import module_name


@pytest.mark.parametrize(
    ("code", "message", "rule"),
    [
        ("call-arg", 'Too many arguments for "f"', "types:call-arity"),
        ("call-arg", 'Missing positional argument "b" in call to "f"', "types:call-arity"),
        ("call-arg", 'Unexpected keyword argument "c" for "f"', "types:unknown-keyword"),
        ("attr-defined", '"str" has no attribute "upcase"', "types:unknown-attribute"),
        ("possibly-undefined", 'Name "x" may be undefined', "types:possibly-unbound"),
        ("misc", '"None" not callable', "types:none-call"),
        ("unused-coroutine", 'Value of type "Coroutine[Any, Any, None]" must be used', "types:unawaited-coroutine"),
        ("arg-type", 'Argument 1 to "f" has incompatible type "str"; expected "int"', None),
        ("union-attr", 'Item "None" of "str | None" has no attribute "x"', None),
        ("misc", "Cannot determine type", None),
    ],
)
def test_only_the_judged_classes_are_reported(code: str, message: str, rule: str | None) -> None:
    assert rule_of(code, message) == rule


def test_errors_are_told_apart_by_function_not_by_line() -> None:
    import ast

    tree = ast.parse("X = 1\n\n\nclass A:\n    def f(self):\n        def g():\n            pass\n        return 1\n")
    where = enclosing_functions(tree)
    assert (where.get(1, ""), where[5], where[7], where[8]) == ("", "A.f", "A.f.g", "A.f")
    assert normalised('Name "x"  already defined on line 12') == normalised('Name "x" already defined on line 40')


def test_module_names_follow_the_packages_mypy_sees() -> None:
    tree = {"src/pkg/__init__.py", "src/pkg/sub/__init__.py", "src/pkg/sub/m.py", "scripts/tool.py", "bad-name/x.py"}
    assert module_name("src/pkg/sub/m.py", tree) == "pkg.sub.m"
    assert module_name("src/pkg/sub/__init__.py", tree) == "pkg.sub"
    assert module_name("scripts/tool.py", tree) == "tool"
    assert module_name("bad-name/x.py", tree) == "x"  # the folder is no package: not part of the name
    assert module_name("my-tool.py", tree) is None


def found(build_context: Any, base: dict[str, str], head: dict[str, str]) -> list[tuple[str, int, str]]:
    report = check_types(build_context(base, head))
    return sorted((path, i.line, i.rule) for path, issues in report.issues.items() for i in issues)


def test_a_sibling_module_the_check_did_not_read_is_a_stub_not_an_error(build_context: Any) -> None:
    # `from . import types` in a package with a module `__getattr__`: without a stub for the package's
    # own module, mypy takes the name from `__getattr__` (an `object`) and reports every new use of it
    # (seen on click's history)
    base = {
        "cli/__init__.py": "def __getattr__(name: str) -> object:\n    raise AttributeError(name)\n",
        "cli/types.py": "class IntRange:\n    pass\n",
        "cli/core.py": "from . import types\n\n\ndef a():\n    return types.IntRange()\n",
    }
    head = {**base, "cli/core.py": base["cli/core.py"] + "\n\ndef b():\n    return types.BoolParamType()\n"}
    assert found(build_context, base, head) == []


def test_a_name_a_module_may_get_from_a_star_import_is_not_reported(build_context: Any) -> None:
    base = {
        "lib/__init__.py": "from .impl import *\n",
        "lib/impl.py": "def run():\n    pass\n",
        "lib/use.py": "X = 1\n",
    }
    head = {**base, "lib/use.py": "from lib import run, nothing_here\n\nX = 1\n"}
    assert found(build_context, base, head) == []


def test_a_new_error_in_an_untouched_caller_naming_nothing_changed_is_not_placed(build_context: Any) -> None:
    base = {
        "shop/__init__.py": "",
        "shop/a.py": "def f(x) -> str:\n    return str(x)\n",
        "shop/b.py": "from shop import a\n\n\ndef g():\n    return a.f(1).upper()\n",
    }
    head = {**base, "shop/a.py": "def f(x) -> int:\n    return 1\n"}  # returns an int now: b.py's `.upper()` breaks
    report = check_types(build_context(base, head))
    assert report.issues == {} and report.unplaced == 1  # `"int" has no attribute "upper"` names no changed def


def test_a_standard_library_name_its_stubs_leave_out_is_not_reported(build_context: Any) -> None:
    # typeshed has no `urllib.request.proxy_bypass_environment`, the module has (seen in requests' compat.py)
    base = {"net/__init__.py": "", "net/compat.py": "X = 1\n"}
    head = {**base, "net/compat.py": "from urllib.request import proxy_bypass_environment, no_such_helper\n\nX = 1\n"}
    report = check_types(build_context(base, head))
    [issue] = report.issues["net/compat.py"]
    assert "no_such_helper" in issue.body and "proxy_bypass_environment" not in issue.body


SHAPES_BASE = {"svc/__init__.py": "", "svc/run.py": "X = 1\n"}
SHAPES_HEAD = """from collections.abc import Callable

from thirdparty import Response


class Denial(Response):
    pass


class Plain:
    def __init__(self, code):
        self.code = code


class Worker:
    hook: Callable[[], None] | None = None

    def tested(self, ready):
        if self.hook is not None:
            ready()
            self.hook()

    def untested(self):
        self.hook()


def correlated(items):
    found = None
    for item in items:
        if item:
            found = item
            scope = {}
    if found is not None:
        print(scope)


def plain(flag):
    if flag:
        value = 1
    return value


def build():
    return Denial(status=1), Plain(code=1, status=2)
"""


def test_shapes_where_mypy_cannot_follow_the_program_are_not_reported(build_context: Any) -> None:
    report = check_types(build_context(SHAPES_BASE, {**SHAPES_BASE, "svc/run.py": SHAPES_HEAD}))
    lines = SHAPES_HEAD.splitlines()
    got = sorted((lines[i.line - 1].strip(), i.rule) for i in report.issues.get("svc/run.py", []))
    assert got == [
        ("return Denial(status=1), Plain(code=1, status=2)", "types:unknown-keyword"),  # Plain's, not Denial's
        ("return value", "types:possibly-unbound"),  # not `print(scope)` under `if found is not None`
        ("self.hook()", "types:none-call"),  # the untested call only
    ]
    [keyword] = [i for i in report.issues["svc/run.py"] if i.rule == "types:unknown-keyword"]
    assert '"Plain"' in keyword.body and "Denial" not in keyword.body


def test_an_error_an_annotation_makes_visible_on_an_untouched_line_is_not_the_change(build_context: Any) -> None:
    # beets' history: `other` gained `: object`; the body, untouched, reads `other.original`, as before
    eq = "class T:\n    def __init__(self, x):\n        self.x = x\n\n    def __eq__(self, other{}):\n        return self.x == other.x\n"
    base = {"m/__init__.py": "", "m/t.py": eq.format("")}
    head = {**base, "m/t.py": eq.format(": object") + "\n\ndef new(other: str):\n    return other.y\n"}
    assert found(build_context, base, head) == [("m/t.py", 10, "types:unknown-attribute")]  # the line it added


def test_a_name_used_in_a_handler_of_the_try_that_binds_it_is_not_reported(build_context: Any) -> None:
    body = (
        "import json\n\n\ndef load(url, read):\n    try:\n        raw = read(url)\n        data = json.loads(raw)\n"
        "    except ValueError:\n        print(raw)\n        return None\n    finally:\n        print(data)\n"
        "    return data\n"
    )
    base = {"m/__init__.py": "", "m/io.py": "X = 1\n"}
    # `raw` in the handler: which statement raised, mypy cannot tell; `data` in `finally`: unbound when read() raises
    assert found(build_context, base, {**base, "m/io.py": body}) == [("m/io.py", 12, "types:possibly-unbound")]


ATTRS_HEAD = """import inspect
import json


class Namespace:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class Base:
    params = None

    def __init__(self):
        self.params = {}


class Child(Base):
    def debug(self):
        return self.params.get("verbose")


KINDS = Namespace(video=("mp4",))

try:
    required = inspect.signature
except AttributeError:
    required = inspect.getargspec


def run(track):
    first = None
    for key in ("a", "b"):
        first = key
        last = key
    return KINDS.video, "tracking". key, json.no_such_name, first, last
"""


def test_only_a_module_s_or_a_builtin_s_attribute_outside_compatibility_code_is_reported(build_context: Any) -> None:
    # youtube-dl's history: a project's own class gets attributes mypy cannot see in code without
    # annotations (`__dict__.update`, a class-level `None` set in `__init__`), and code for another
    # Python sits in `except AttributeError:`; a loop over a literal that is not empty always binds
    report = check_types(build_context(SHAPES_BASE, {**SHAPES_BASE, "svc/run.py": ATTRS_HEAD}))
    said = sorted(i.body.split("`")[1] for i in report.issues.get("svc/run.py", []))
    assert said == ['"str" has no attribute "key"', 'Module has no attribute "no_such_name"']


def test_a_module_attribute_the_project_assigns_or_a_stub_does_not_re_export_is_not_reported(
    build_context: Any,
) -> None:
    # fail2ban's history: `logging.MSG = logging.INFO - 2` in the package's `__init__`, read elsewhere
    base = {"app/__init__.py": "import logging\n\nlogging.MSG = logging.INFO - 2\n", "app/run.py": "X = 1\n"}
    head = {
        **base,
        "app/run.py": "import logging\nimport os\n\nX = logging.MSG, os.sys, logging.NOT_SET_ANYWHERE\n",
    }
    report = check_types(build_context(base, head))
    said = [i.body.split("`")[1] for i in report.issues.get("app/run.py", [])]
    assert said == ['Module has no attribute "NOT_SET_ANYWHERE"']
