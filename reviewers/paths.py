"""What a path names: its language, and whether it is code, configuration, documentation or a test.

One module for every layer's answer. The strategy, the reviewers and the analyzers all decide what
to read by these sets; two copies of "is this a test file" that disagree make one reviewer judge a
file another skipped. Bottom layer: imports nothing of ours.
"""

from __future__ import annotations

import re

LANGUAGE_BY_SUFFIX: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".jsx": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".kt": "kotlin",
    ".rb": "ruby",
    ".php": "php",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".cs": "csharp",
    ".sh": "shell",
    ".bash": "shell",
    ".sql": "sql",
    ".yml": "yaml",
    ".yaml": "yaml",
    ".toml": "toml",
    ".json": "json",
    ".ini": "ini",
    ".cfg": "ini",
    ".conf": "ini",
    ".properties": "ini",
    ".env": "dotenv",
    ".md": "markdown",
    ".rst": "rst",
    ".txt": "text",
    ".html": "html",
    ".css": "css",
    ".tf": "terraform",
}

CODE_LANGUAGES = frozenset(
    {"python", "javascript", "typescript", "go", "rust", "java", "kotlin", "ruby", "php", "c", "cpp", "csharp",
     "shell", "sql"}
)  # fmt: skip
CONFIG_LANGUAGES = frozenset({"yaml", "toml", "json", "ini", "dotenv", "terraform", "dockerfile"})
DOC_LANGUAGES = frozenset({"markdown", "rst", "text"})

# A single-module suite is named `tests.py` (Django apps, small libraries) or `*_tests.py` at any level,
# or `test.py` at the repository's root; a `test.py` inside a package is the test support it ships for
# its users (`werkzeug/test.py`, see `_TEST_SUPPORT_MODULE`).
_TEST_FILE = re.compile(
    r"(?:^|/)(?:test_[^/]*\.py|[^/]*_tests?\.py|tests\.py|[^/]*_test\.go|[^/]*\.(?:test|spec)\.[cm]?[jt]sx?|"
    r"[^/]*Tests?\.(?:java|kt|cs)|[^/]*_spec\.rb|conftest\.py)$|^test\.py$"
)
TEST_DIRECTORIES = frozenset({"tests", "test", "testing", "testsuite", "__tests__", "spec"})
# At the repository's root only: `t/` holds the suite in Perl's convention and celery's family
# (`t/unit/`, `t/integration/`, `t/certs/`); deeper down a `t` folder is anybody's.
ROOT_TEST_DIRECTORIES = frozenset({"t"})
# Data and helpers that tests read: not tests themselves, and not product code either.
FIXTURE_DIRECTORIES = frozenset({"fixtures", "fixture", "testdata", "test_data", "__fixtures__", "__mocks__"})
# Test helpers a package ships for its users' tests (flask.testing, click.testing, werkzeug.test).
# A root-level `test.py` is the project's own suite (a test file), not support shipped inside a package.
_TEST_SUPPORT_MODULE = re.compile(r"(?:^|/)(?:testing|test_?utils|test_?helpers)\.py$|/test\.py$")
# Python modules that are configuration written as code (Django/Flask settings, Sphinx conf).
_SETTINGS_MODULE = re.compile(r"(?:^|/)(?:settings|[\w]+_settings|settings_[\w]+|conf|config)\.py$|(?:^|/)settings/")


def language_of(path: str) -> str:
    """The language of a path by its suffix (or its name, for Dockerfiles and `.env` files), or "other"."""
    name = path.rsplit("/", 1)[-1]
    if name == "Dockerfile" or name.startswith("Dockerfile."):
        return "dockerfile"
    if name == ".env" or name.startswith(".env."):
        return "dotenv"
    dot = name.rfind(".")
    return LANGUAGE_BY_SUFFIX.get(name[dot:].lower(), "other") if dot >= 0 else "other"


def is_test_path(path: str) -> bool:
    """A test file by the usual names (`test_*.py`, `*_test.py`, `*_tests.py`, `tests.py`, a root-level
    `test.py`, `*_test.go`, `*.spec.ts`, `FooTest.java`, `*_spec.rb`, `conftest.py`) or by living under a
    `tests/`, `test/`, `testsuite/` (pycodestyle's and its plugins' test cases), `__tests__/` or `spec/`
    folder, or a `t/` folder at the root."""
    folders = path.split("/")[:-1]
    return (
        bool(_TEST_FILE.search(path))
        or any(part in TEST_DIRECTORIES for part in folders)
        or (bool(folders) and folders[0] in ROOT_TEST_DIRECTORIES)
    )


def is_test_support_path(path: str) -> bool:
    """A module of test helpers (a test client, a runner, a request builder) shipped beside the product:
    `testing.py`, `pkg/test.py`, `test_utils.py` (a `testing/` folder is a test path already; a root-level
    `test.py` is the project's suite)."""
    return bool(_TEST_SUPPORT_MODULE.search(path))


_PYTEST_PLUGIN = re.compile(r"^pytest[_-]\w+$")


def is_pytest_plugin_path(path: str) -> bool:
    """A file of a pytest plugin's package (`pytest_localserver/server.pem`, `src/pytest_qt/...`): test
    tooling its users run in their suites, whose bundled TLS key serves a local test server."""
    return any(_PYTEST_PLUGIN.match(part) for part in path.split("/")[:-1])


def is_fixture_path(path: str) -> bool:
    return any(part in FIXTURE_DIRECTORIES for part in path.split("/")[:-1])


# Folders of code written to be read and copied, not run in production: an example app's development
# settings are placeholders by intent (`app.secret_key = "dev…"`, Django's startproject settings).
SAMPLE_DIRECTORIES = frozenset({"examples", "example", "samples", "sample", "demo", "demos", "docs", "doc"})
_PROSE_SUFFIXES = (".md", ".rst", ".txt", ".adoc")


# An example project named for what it shows: `example_project/`, `demoproject/`, `sample_taggit/`, `example2/`.
_SAMPLE_PROJECT = re.compile(
    r"^(?:examples?|samples?|demos?)(?:[_-]?(?:project|app|site)s?|\d+)$|^(?:sample|example|demo)_\w+$"
)


def is_sample_path(path: str) -> bool:
    """Documentation (a `.md`/`.rst`/`.txt`/`.adoc` file, or anything under `docs/`) or an example
    (under `examples/`, `samples/`, `demo/`, `example_project/`, `sample_app/`): text and code for
    readers to copy, not a deployment."""
    folders = [part.lower() for part in path.split("/")[:-1]]
    return path.lower().endswith(_PROSE_SUFFIXES) or any(
        part in SAMPLE_DIRECTORIES or _SAMPLE_PROJECT.match(part) for part in folders
    )


# Schema migrations a tool wrote from its template: Django's and South's `app/migrations/0002_x.py`
# (`south_migrations/` where a project kept South's beside Django's),
# Alembic's and Flask-Migrate's `alembic/versions/abc123_x.py`. Their imports and shape are the
# generator's (`import sqlalchemy as sa` in an empty revision, a merge migration's header), not the
# author's; what the author adds (raw SQL, a data migration) is reviewed like any code.
_MIGRATION = re.compile(r"(?:^|/)\w*migrations/\d{4}_\w+\.py$|(?:^|/)(?:alembic|migrations)/versions/\w+\.py$")


def is_stub_path(path: str) -> bool:
    """A type stub (`pkg/io.pyi`): read by type checkers, never run."""
    return path.endswith(".pyi")


def is_migration_path(path: str) -> bool:
    """A schema migration by where migration tools write them (`app/migrations/0002_add_field.py`,
    `alembic/versions/1a2b3c_add_table.py`)."""
    return bool(_MIGRATION.search(path))


def is_config_path(path: str) -> bool:
    """Configuration: a YAML/TOML/JSON/INI/env/Terraform/Docker file, or a Python settings module."""
    language = language_of(path)
    return language in CONFIG_LANGUAGES or (language == "python" and bool(_SETTINGS_MODULE.search(path)))


def is_code_path(path: str) -> bool:
    """Product code: a programming language, not a test and not a fixture."""
    return language_of(path) in CODE_LANGUAGES and not is_test_path(path) and not is_fixture_path(path)
