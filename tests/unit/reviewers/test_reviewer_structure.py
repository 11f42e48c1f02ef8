"""Imports, layers, cycles, definitions, test lookup and issue merging — the structural analyzers."""

from __future__ import annotations

from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.imports import ImportRef, ModuleIndex, find_cycle, js_imports, python_imports
from reviewers.analyzers.layers import ArchitectureAnalyzer, layer_of
from reviewers.analyzers.symbols import is_new, public_definitions, removed_definition_names, signature_changed
from reviewers.analyzers.tests_lookup import TestIndex, distinctive, list_test_functions, module_tokens
from reviewers.kernel.contracts import DiffLine, FileChange, Hunk, LayerRule
from reviewers.paths import is_test_path
from reviewers.reviewer import findings_from_issues, merge_issues


def changed(path: str, text: str, *, added: set[int], removed: tuple[str, ...] = ()) -> ChangedFile:
    lines = text.splitlines()
    diff_lines = [DiffLine("del", r, 1, None) for r in removed]
    diff_lines += [DiffLine("add" if n in added else "context", t, None, n) for n, t in enumerate(lines, 1)]
    return ChangedFile(FileChange(path, path, "modified", (Hunk(1, 1, 1, len(lines), "", tuple(diff_lines)),)), text)


def test_python_imports_resolve_relative_type_only_and_local() -> None:
    text = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from . import models\n"
        "from ..web.views import render\n"
        "import shop.db as db\n"
        "if TYPE_CHECKING:\n"
        "    from shop.api import Client\n"
        "def f():\n"
        "    from shop.cli import main\n"
    )
    refs = python_imports(text, "shop/core/service.py")
    assert refs[2:] == [
        ImportRef(3, "shop.core", ("models",)),
        ImportRef(4, "shop.web.views", ("render",)),
        ImportRef(5, "shop.db"),
        ImportRef(7, "shop.api", ("Client",), type_only=True),
        ImportRef(9, "shop.cli", ("main",), local=True),
    ]
    # Text that does not parse still yields its import lines.
    assert [r.module for r in python_imports("from a.b import c\n  if (:\n", "x.py")] == ["a.b"]


def test_js_imports_and_module_index() -> None:
    refs = js_imports(
        "import x from './util';\nimport type { T } from '../types';\nconst y = require('lodash');\n", "src/app/main.ts"
    )
    assert refs == [ImportRef(1, "./util"), ImportRef(2, "../types", type_only=True)]
    index = ModuleIndex(["src/app/util.ts", "src/types/index.ts", "src/pkg/__init__.py", "src/pkg/mod.py"])
    assert index.resolve("src/app/main.ts", refs[0]) == ["src/app/util.ts"]
    assert index.resolve("src/app/main.ts", refs[1]) == ["src/types/index.ts"]
    assert index.resolve("x.py", ImportRef(1, "pkg", ("mod",))) == ["src/pkg/mod.py"]  # src/ layout
    assert index.resolve("x.py", ImportRef(1, "pkg", ("helper",))) == ["src/pkg/__init__.py"]
    assert index.resolve("x.py", ImportRef(1, "requests")) == []


def test_find_cycle_is_shortest_and_bounded() -> None:
    graph = {"a": ["b", "c"], "b": ["d"], "c": ["a"], "d": ["a"]}
    assert find_cycle("a", "a", lambda n: graph.get(n, []), max_nodes=10) == ["a"]
    assert find_cycle("b", "a", lambda n: graph.get(n, []), max_nodes=10) == ["b", "d", "a"]
    assert find_cycle("b", "a", lambda n: graph.get(n, []), max_nodes=1) is None
    assert find_cycle("d", "c", lambda n: graph.get(n, []), max_nodes=10) == ["d", "a", "c"]


def test_configured_layers() -> None:
    layers = [
        LayerRule(name="domain", paths=["app/domain/*"]),
        LayerRule(name="service", paths=["app/service"], may_import=["domain"]),
    ]
    assert layer_of("app/service/x.py", layers) is not None
    files = {
        "app/domain/order.py": "from app.service.billing import charge\n",
        "app/service/billing.py": "from app.domain.order import Order\n",
    }
    analyzer = ArchitectureAnalyzer(SnapshotWorkspace(files), layers)
    issues = analyzer.issues(changed("app/domain/order.py", files["app/domain/order.py"], added={1}))
    assert [(i.line, i.rule) for i in issues] == [(1, "layers:forbidden-import")]
    assert "closes an import cycle" in issues[0].title
    ok = analyzer.issues(changed("app/service/billing.py", files["app/service/billing.py"], added={1}))
    assert [i.rule for i in ok] == ["imports:new-cycle"]  # allowed by the layers, still a cycle


def test_inferred_layers_and_preexisting_cycles() -> None:
    files = {
        "core/price.py": "import json\nfrom web.views import page\nfrom web import views\n",
        "web/views.py": "def page(): ...\n",
        "web/__init__.py": "",
        "lib/a.py": "from lib import b\nfrom lib.b import thing\n",
        "lib/b.py": "from lib import a\nthing = 1\n",
    }
    analyzer = ArchitectureAnalyzer(SnapshotWorkspace(files), [])
    core = analyzer.issues(changed("core/price.py", files["core/price.py"], added={2}))
    assert [(i.line, i.rule) for i in core] == [(2, "layers:inward-dependency")]
    assert "web layer" in core[0].title
    # lib/a.py already imported lib.b on an unchanged line: the cycle is not new.
    assert analyzer.issues(changed("lib/a.py", files["lib/a.py"], added={2})) == []
    assert [i.rule for i in analyzer.issues(changed("lib/a.py", files["lib/a.py"], added={1, 2}))] == [
        "imports:new-cycle"
    ]


def test_definitions_new_changed_and_removed() -> None:
    text = "def keep(a, b=1):\n    return a\n\ndef fresh():\n    pass\n\nclass Box:\n    def open(self):\n        pass\n    def _hidden(self):\n        pass\n"
    file = changed("m.py", text, added={1, 4, 7, 8}, removed=("def keep(a):", "def gone():"))
    removed = removed_definition_names(file)
    assert removed == {"keep", "gone"}
    defs = {d.qualified: d for d in public_definitions(file)}
    assert set(defs) == {"keep", "fresh", "Box", "Box.open"}
    assert signature_changed(defs["keep"], file, removed) and not is_new(defs["keep"], file, removed)
    assert is_new(defs["fresh"], file, removed) and is_new(defs["Box"], file, removed)
    shapes = changed(
        "s.py",
        "class Row:\n    id: int\n\nclass Port(Protocol):\n    def get(self) -> int: ...\n\ndef todo():\n    pass\n",
        added={1, 4, 7},
    )
    assert [(d.qualified, d.has_behaviour) for d in public_definitions(shapes)] == [
        ("Row", False),
        ("Port", False),
        ("Port.get", False),
        ("todo", False),
    ]  # data-only classes, protocols and stubs: nothing a test could exercise yet
    go = changed("svc.go", "package svc\n\nfunc Serve(a int) error {\n\treturn nil\n}\nfunc helper() {}\n", added={3})
    assert [(d.name, d.line, d.end_line) for d in public_definitions(go)] == [("Serve", 3, 6)]


def test_test_lookup() -> None:
    assert is_test_path("tests/unit/test_x.py") and is_test_path("pkg/x_test.go") and is_test_path("web/a.spec.ts")
    assert is_test_path("src/__tests__/a.js") and not is_test_path("src/contest.py")
    assert module_tokens("auth/session.py") == ("auth.session", "session")
    test_text = "from auth.session import is_expired\n\ndef test_a():\n    assert is_expired(1)\n\ndef test_b():\n    assert True\n"
    assert list_test_functions(test_text, "tests/test_s.py") == [("test_a", 3, 4), ("test_b", 6, 7)]
    other = "from auth import api\n\ndef test_c():\n    is_expired()\n    check()\n"
    index = TestIndex(
        SnapshotWorkspace({"auth/session.py": "", "tests/test_s.py": test_text, "tests/test_other.py": other})
    )
    # A distinctive name counts wherever it appears (tests import through re-exporting packages)...
    assert [(r.path, r.line, r.tests) for r in index.references("auth/session.py", "is_expired")] == [
        ("tests/test_other.py", 4, ("test_c",)),
        ("tests/test_s.py", 1, ("test_a",)),
    ]
    # ...a generic one only in a test that also names the module.
    assert index.references("auth/session.py", "check") == []
    assert distinctive("is_expired") and distinctive("DiffWorkspace") and not distinctive("check")
    assert not distinctive("is_new")  # too short to be sure


def test_merge_names_every_member_and_nothing_is_capped() -> None:
    issues = [
        Issue(4, "patterns:tls", "high", "TLS off", "b", kind="tls-verify"),
        Issue(3, "bandit:B501", "medium", "TLS (bandit)", "b", kind="tls-verify"),  # same problem, a line apart
        Issue(9, "ruff:E722", "medium", "bare except", "b"),
        Issue(9, "ruff:S110", "medium", "except pass", "b"),  # same line
        Issue(20, "x:critical", "critical", "worse", "b", kind="other"),
    ]
    merged = merge_issues(issues)
    assert [(i.line, i.rule) for i in merged] == [(4, "patterns:tls"), (9, "ruff:E722"), (20, "x:critical")]
    assert "bandit:B501" in merged[0].body and "ruff:S110" in merged[1].body
    # A more severe problem of another kind on the same line takes the lead.
    lead = merge_issues([Issue(1, "a", "low", "minor", "b", kind="k1"), Issue(1, "b", "high", "major", "b", kind="k2")])
    assert [(i.rule, i.severity) for i in lead] == [("b", "high")]

    text = "\n".join(f"line {n}" for n in range(1, 12)) + "\n"
    file = changed("f.py", text, added=set(range(1, 12)))
    many = [Issue(n, f"r{n}", "low" if n < 9 else "high", f"t{n}", "b") for n in range(1, 12)]
    findings = findings_from_issues("code_quality", file, many)
    assert [f.line for f in findings] == list(range(1, 12))  # every one: the comment budget picks threads
    assert all(f.evidence == f"line {f.line}" and len(f.fingerprint) == 16 for f in findings)


def test_merged_fixes_become_one_suggestion_that_applies_each() -> None:
    from reviewers.kernel.contracts import Suggestion
    from reviewers.reviewer import combined_suggestion

    lines = ["import os", "import sys", "import re", "x = 1"]
    drop_os = Suggestion(start_line=1, end_line=1, original="import os", replacement="")
    drop_re = Suggestion(start_line=3, end_line=3, original="import re", replacement="")
    both = combined_suggestion([drop_re, drop_os], lines)
    assert both == Suggestion(
        start_line=1, end_line=3, original="import os\nimport sys\nimport re", replacement="import sys"
    )
    rename = Suggestion(start_line=4, end_line=4, original="x = 1", replacement="y = 1")
    assert combined_suggestion([drop_re, rename], lines) == Suggestion(
        start_line=3, end_line=4, original="import re\nx = 1", replacement="y = 1"
    )
    assert combined_suggestion([drop_os, drop_os], lines) == drop_os  # one fix reported twice
    clash = Suggestion(start_line=1, end_line=2, original="import os\nimport sys", replacement="import os, sys")
    assert combined_suggestion([drop_os, clash], lines) is None  # overlapping fixes: none is offered as one
    assert combined_suggestion([drop_os, drop_re], None) is None  # the lines between are not known

    issues = [
        Issue(1, "ruff:F401", "low", "`os` imported but unused", "b", kind="unused-import", suggestion=drop_os),
        Issue(3, "ruff:F401", "low", "`re` imported but unused", "b", kind="unused-import", suggestion=drop_re),
    ]
    [merged] = merge_issues(issues, lines)
    assert merged.suggestion == both
    assert "Also here: line 3: `re` imported but unused (ruff:F401)." in merged.body
