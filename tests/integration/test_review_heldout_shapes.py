"""`reviewloop review`: the wrong shapes a held-out history batch showed, fixed at their cause
(issue 39, item 6), each beside a near miss the rule must still report.

- Taint: a template the developer wrote, loaded or rendered by a name the request chose, is not
  request data (its YAML is not deserialised attacker data, its HTML is not reflected input), and
  the name, once `get_template` accepted it, steers no path out of the template directories; a
  management command's `request` is one it built itself (`RequestFactory().get("/")`), not a
  request. Request data deserialised, opened as a path or written into HTML is still reported.
- `tests:test-weakened`: an assertion moved into a loop over a literal counts once per item; a check
  of a property the change deletes, and the other branch of a version `if`/`else`, are not lost.
- `ruff:F403`: a runner star-importing test modules; a product module's star import still counts.
- `imports:new-cycle`: a TypeScript import of interfaces only is erased; one taking a value is not.
- A call the base already made with the same arguments, given a safer loader: no unknown-origin
  deserialization, no bandit finding; a loader made unsafe, a new risky call, still are.
- A miss: `@classmethod` made `@staticmethod` while the kept body still uses `cls` (ruff's F821 on an
  unchanged line) is said on the changed decorator.

Every test here failed before its fix (main at dadacc2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.local_range import change_repo, review_report


@pytest.fixture
def env(db_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATABASE_URL", db_dsn)
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)


def _at(report: dict[str, Any], rule: str, path: str | None = None) -> list[int]:
    return sorted(f["line"] for f in report["findings"] if f["rule"] == rule and path in (None, f["path"]))


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# --- taint: the developer's templates, an offline command's own request ------------------------------

TEMPLATES = """import os

import yaml
from django.template import TemplateDoesNotExist
from django.template.loader import get_template, render_to_string

NOTES_DIR = os.path.join(os.path.dirname(__file__), "templates")


def page_settings_text(name):
    try:
        settings_file = get_template(name + ".yaml")
    except TemplateDoesNotExist:
        return ""
    return settings_file.render()


def page_settings(name):
    text = page_settings_text(name)
    if text:
        return yaml.load(text, Loader=yaml.FullLoader)
    return {}


def page_notes(name):
    get_template(name)
    with open(os.path.join(NOTES_DIR, name + ".md")) as notes:
        return notes.read()


def render_page(request, name):
    context = page_settings(name)
    return render_to_string(name, request=request, context=context)
"""
PAGE_VIEWS = """from django.http import HttpResponse
from django.utils.safestring import mark_safe

from shop.pages.templates_io import page_notes, render_page


def show_page(request, name):
    notes = page_notes(name)
    html = render_page(request, name)
    return HttpResponse(mark_safe(html) + notes)
"""
COMMAND = """from pathlib import Path

from django.core.management.base import BaseCommand
from django.test.client import RequestFactory

from shop.pages.templates_io import page_settings, render_page


class Command(BaseCommand):
    def handle(self, **options):
        request = RequestFactory().get("/")
        self.build(request, Path(options["output"]), options["names"])

    def build(self, request, out, names):
        for group, members in names.items():
            group_dir = out.joinpath(group)
            group_dir.mkdir(exist_ok=True)
            for name in members:
                html = render_page(request, name)
                extra = page_settings(name)
                (group_dir / name).write_text(html + str(extra))
"""
# Near misses: request data itself deserialised (directly and through a helper of the repository),
# opened as a path, written into a page; a class-based view's `request` is still a request.
REQUEST_VIEWS = """import os

import yaml
from django.http import FileResponse, HttpResponse
from django.views import View

DOCS = "/srv/docs"


def parse_settings(text):
    return yaml.load(text, Loader=yaml.Loader)


def import_settings(request):
    data = yaml.load(request.body, Loader=yaml.FullLoader)
    return HttpResponse(str(len(data)))


def import_form(request):
    data = parse_settings(request.POST["settings"])
    return HttpResponse(str(len(data)))


def download(request):
    name = request.GET["name"]
    return FileResponse(open(os.path.join(DOCS, name), "rb"))


def greet(request):
    return HttpResponse("<p>Hello " + request.GET["who"] + "</p>")


class SettingsView(View):
    def post(self, request):
        data = yaml.load(request.body, Loader=yaml.Loader)
        return HttpResponse(str(len(data)))
"""


def test_templates_and_offline_commands_are_no_request_data(env: None, tmp_path: Path) -> None:
    repo = change_repo(
        tmp_path / "repo",
        {"shop/__init__.py": "", "shop/pages/__init__.py": ""},
        {
            "shop/pages/templates_io.py": TEMPLATES,
            "shop/pages/views.py": PAGE_VIEWS,
            "shop/pages/management/__init__.py": "",
            "shop/pages/management/commands/__init__.py": "",
            "shop/pages/management/commands/build_pages.py": COMMAND,
            "shop/pages/request_views.py": REQUEST_VIEWS,
        },
    )
    report = review_report(repo, "--all")
    for rule in ("python:unsafe-deserialization", "python:path-traversal", "python:reflected-xss"):
        for path in (
            "shop/pages/templates_io.py",
            "shop/pages/views.py",
            "shop/pages/management/commands/build_pages.py",
        ):
            assert _at(report, rule, path) == [], (rule, path)  # dadacc2: reported
    views = "shop/pages/request_views.py"
    deserialised = _at(report, "python:unsafe-deserialization", views)
    assert _line(REQUEST_VIEWS, "yaml.load(request.body, Loader=yaml.FullLoader)") in deserialised
    assert _line(REQUEST_VIEWS, 'parse_settings(request.POST["settings"])') in deserialised
    assert _line(REQUEST_VIEWS, "yaml.load(request.body, Loader=yaml.Loader)") in deserialised
    assert _line(REQUEST_VIEWS, "FileResponse(open(") in _at(report, "python:path-traversal", views)
    assert _line(REQUEST_VIEWS, "Hello") in _at(report, "python:reflected-xss", views)


# --- tests:test-weakened: checks moved into a loop, checks of a deleted property, a version branch ----

REPORT_BASE = """class Report:
    def __init__(self, rows, legacy_kind="csv"):
        self.rows = rows
        self.legacy_kind = legacy_kind

    @property
    def kind(self):
        return "csv"


def summary(failed):
    if failed:
        return {"status": "failed", "count": None, "total": None, "mean": None}
    return {"status": "ok", "count": 1, "total": 2, "mean": 2.0}
"""
REPORT_HEAD = """class Report:
    def __init__(self, rows):
        self.rows = rows

    @property
    def kind(self):
        return "csv"


def summary(failed):
    if failed:
        return {"status": "failed", "count": None, "total": None, "mean": None}
    return {"status": "ok", "count": 1, "total": 2, "mean": 2.0}
"""
TESTS_BASE = """import unittest

from reports import VERSION
from reports.core import Report, summary


class TestReport(unittest.TestCase):
    def test_failed_summary(self):
        result = summary(True)
        self.assertEqual(result["status"], "failed")
        self.assertIsNone(result["count"])
        self.assertIsNone(result["total"])

    def test_kind(self):
        report = Report([])
        self.assertEqual(report.kind, "csv")
        self.assertEqual(report.legacy_kind, "csv")

    def test_layout(self):
        result = summary(False)
        self.assertEqual(result["status"], "ok")
        if VERSION >= (2, 0):
            self.assertIn("mean", result)
        else:
            self.assertNotIn("mean", result)

    def test_ok_summary(self):
        result = summary(False)
        self.assertEqual(result["status"], "ok")
        self.assertEqual(result["count"], 1)
        self.assertEqual(result["total"], 2)
"""
TESTS_HEAD = """import unittest

from reports.core import Report, summary


class TestReport(unittest.TestCase):
    def test_failed_summary(self):
        result = summary(True)
        self.assertEqual(result["status"], "failed")
        for field in ("count", "total", "mean"):
            with self.subTest(field=field):
                self.assertIsNone(result[field])

    def test_kind(self):
        report = Report([])
        self.assertEqual(report.kind, "csv")

    def test_layout(self):
        result = summary(False)
        self.assertEqual(result["status"], "ok")
        self.assertIn("mean", result)

    def test_ok_summary(self):
        result = summary(False)
        self.assertEqual(result["status"], "ok")
"""


def test_test_weakened_counts_loops_deleted_properties_and_version_branches(env: None, tmp_path: Path) -> None:
    repo = change_repo(
        tmp_path / "repo",
        {
            "reports/__init__.py": "VERSION = (2, 1)\n",
            "reports/core.py": REPORT_BASE,
            "tests/__init__.py": "",
            "tests/test_report.py": TESTS_BASE,
        },
        {"reports/core.py": REPORT_HEAD, "tests/test_report.py": TESTS_HEAD},
    )
    report = review_report(repo, "--all")
    weakened = [f["title"] for f in report["findings"] if f["rule"] == "tests:test-weakened"]
    # dadacc2: test_failed_summary, test_kind and test_layout were reported too
    assert weakened == ["Test test_ok_summary lost assertions"]


# --- ruff:F403: a runner script star-importing test modules ------------------------------------------

RUNNER_BASE = """import unittest

from tests.test_parsing import *
"""
RUNNER_HEAD = """import unittest

from tests.test_parsing import *
from tests.test_rendering import *
from shapes.geometry import *

if __name__ == "__main__":
    unittest.main()
"""


def test_star_imports_of_test_modules_in_a_runner_are_no_finding(env: None, tmp_path: Path) -> None:
    test_module = (
        "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_it(self):\n        self.assertTrue(1)\n"
    )
    repo = change_repo(
        tmp_path / "repo",
        {
            "shapes/__init__.py": "",
            "shapes/geometry.py": "def area(w, h):\n    return w * h\n",
            "tests/__init__.py": "",
            "tests/test_parsing.py": test_module,
            "tests/test_rendering.py": test_module,
            "runtests.py": RUNNER_BASE,
        },
        {"runtests.py": RUNNER_HEAD},
    )
    report = review_report(repo, "--all")
    # dadacc2: the test module's line was reported too; a product module's star import still is
    assert _at(report, "ruff:F403", "runtests.py") == [_line(RUNNER_HEAD, "shapes.geometry")]


# --- imports:new-cycle: a TypeScript import of types only is erased -----------------------------------

EDITOR_INDEX_BASE = """import Footer from './footer';

export interface EditorProps {
  title: string;
}

export const DEFAULT_TITLE = 'untitled';

export default function Editor(props: EditorProps) {
  return Footer(props);
}
"""
EDITOR_INDEX_HEAD = """import Footer from './footer';
import LegacyFooter from './legacy-footer';
import Toolbar from './toolbar';

export interface EditorProps {
  title: string;
}

export const DEFAULT_TITLE = 'untitled';

export default function Editor(props: EditorProps) {
  return [Footer(props), LegacyFooter(props), Toolbar(props)];
}
"""
FOOTER = """import { EditorProps } from '.';

export default function Footer(props: EditorProps) {
  return props.title;
}
"""
TOOLBAR = """import { EditorProps, DEFAULT_TITLE } from '.';

export default function Toolbar(props: EditorProps) {
  return props.title || DEFAULT_TITLE;
}
"""


def test_a_typescript_import_of_types_only_closes_no_cycle(env: None, tmp_path: Path) -> None:
    editor = "src/editor"
    repo = change_repo(
        tmp_path / "repo",
        {f"{editor}/index.tsx": EDITOR_INDEX_BASE, f"{editor}/footer.tsx": FOOTER},
        {
            f"{editor}/index.tsx": EDITOR_INDEX_HEAD,
            f"{editor}/legacy-footer.tsx": FOOTER.replace("Footer", "LegacyFooter"),
            f"{editor}/toolbar.tsx": TOOLBAR,
        },
    )
    report = review_report(repo, "--all")
    cycles = sorted((f["path"], f["line"]) for f in report["findings"] if f["rule"] == "imports:new-cycle")
    # dadacc2: the legacy footer's cycle (an interface only) was reported too; the toolbar's import
    # takes a value (DEFAULT_TITLE), so it loads the index at run time and its cycle is real
    assert (f"{editor}/legacy-footer.tsx", 1) not in cycles
    assert (f"{editor}/index.tsx", _line(EDITOR_INDEX_HEAD, "./legacy-footer")) not in cycles
    assert (f"{editor}/toolbar.tsx", 1) in cycles or (
        f"{editor}/index.tsx",
        _line(EDITOR_INDEX_HEAD, "./toolbar"),
    ) in cycles


# --- a loader the change made safer: no news of this change --------------------------------------------

CONFIG_BASE = """import hashlib

import yaml


def fingerprint(text):
    return hashlib.sha256(text.encode()).hexdigest()


def read_config(text):
    return yaml.load(text)


def read_strict(text):
    return yaml.load(text, Loader=yaml.SafeLoader)
"""
CONFIG_HEAD = """import hashlib

import yaml


def fingerprint(text):
    return hashlib.md5(text.encode()).hexdigest()


def read_config(text):
    return yaml.load(text, Loader=yaml.FullLoader)


def read_strict(text):
    return yaml.load(text, Loader=yaml.UnsafeLoader)


def read_plugin(blob):
    return yaml.load(blob, Loader=yaml.Loader)
"""


def test_a_loader_the_change_made_safer_is_no_finding(env: None, tmp_path: Path) -> None:
    repo = change_repo(
        tmp_path / "repo", {"conf/__init__.py": "", "conf/load.py": CONFIG_BASE}, {"conf/load.py": CONFIG_HEAD}
    )
    report = review_report(repo, "--all")
    lines = {f["line"] for f in report["findings"] if f["path"] == "conf/load.py"}
    deserialised = _at(report, "python:unsafe-deserialization", "conf/load.py")
    assert _line(CONFIG_HEAD, "FullLoader") not in deserialised  # dadacc2: listed, as of unknown origin
    assert _line(CONFIG_HEAD, "FullLoader") not in _at(report, "bandit:B506", "conf/load.py")  # said of the base too
    assert _line(CONFIG_HEAD, "UnsafeLoader") in lines  # a safe loader taken away
    assert _line(CONFIG_HEAD, "yaml.load(blob") in deserialised
    assert [f["rule"] for f in report["findings"] if f["line"] == _line(CONFIG_HEAD, "md5")] == ["bandit:B324"]


# --- ruff:F821 on a kept line, made undefined by the function's changed decorator ---------------------

RENDERER_BASE = """class Renderer:
    @classmethod
    def ancestors(cls, name, seen=None):
        seen = seen or [name]
        parent = cls.parent_of(name)
        if parent:
            cls.ancestors(parent, seen)
        return seen

    @classmethod
    def parent_of(cls, name):
        return name.rpartition("/")[0]

    def describe(self, name):
        return undefined_helper(name)
"""
RENDERER_HEAD = """class Renderer:
    @staticmethod
    def ancestors(name, seen=None):
        seen = seen or [name]
        parent = cls.parent_of(name)
        if parent:
            cls.ancestors(parent, seen)
        return seen

    @staticmethod
    def parent_of(name):
        return name.rpartition("/")[0]

    def describe(self, name, short=False):
        return undefined_helper(name)
"""


def test_a_name_a_changed_decorator_took_away_is_reported(env: None, tmp_path: Path) -> None:
    repo = change_repo(
        tmp_path / "repo",
        {"render/__init__.py": "", "render/core.py": RENDERER_BASE},
        {"render/core.py": RENDERER_HEAD},
    )
    report = review_report(repo, "--all")
    undefined = [(f["line"], f["title"]) for f in report["findings"] if f["rule"] == "ruff:F821"]
    # dadacc2: nothing (the uses of `cls` are on lines the change kept); a name undefined before the
    # change too (`undefined_helper`, in a function whose signature changed) is no news of it
    assert undefined == [(_line(RENDERER_HEAD, "@staticmethod"), "Undefined name `cls`")]
