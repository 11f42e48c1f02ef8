"""`reviewloop review` on a change that takes a guard away (issue 39, items 1 and 2).

One git repository holds every case of `tests/fixtures/security/removed_guards/` side by side: the
base commit has each case's `base/` tree, the head commit its `head/` tree. One review of that
range must post (verdict REAL) a `python:removed-guard` finding with the case's CWE and its removed
base line quoted for each `vuln_*` case, and say nothing about a removed guard in a `safe_*` case.
Beside them, a file the change adds checks that a validator is judged by its body at head: a
redirect "guarded" by a repository `is_safe_url` that looks at the host only is still reported.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "security" / "removed_guards"
VULN = sorted(p.name for p in CASES.iterdir() if p.is_dir() and p.name.startswith("vuln_"))
SAFE = sorted(p.name for p in CASES.iterdir() if p.is_dir() and p.name.startswith("safe_"))
RULE = "python:removed-guard"

REDIRECT_ROUTE = """from flask import Flask, redirect, request

from .urls import is_safe_url

app = Flask(__name__)


@app.route("/after-login")
def after_login():
    target = request.args.get("next", "/")
    if not is_safe_url(target):
        target = "/"
    return redirect(target)
"""
HOST_ONLY = """from urllib.parse import urlparse


def is_safe_url(url):
    return urlparse(url).netloc in ("", "shop.example.com")
"""
SCHEME_AND_HOST = """from urllib.parse import urlparse


def is_safe_url(url):
    parsed = urlparse(url)
    return parsed.scheme in ("", "https") and parsed.netloc in ("", "shop.example.com")
"""


BROKEN_BASE = "def find(conn, name:\n    return conn.execute('SELECT 1')\n"  # a syntax error the change fixes
FIXED_HEAD = """from flask import request


def find(conn):
    name = request.args["name"]
    return conn.execute(f"SELECT * FROM users WHERE name = '{name}'").fetchall()
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _commit(repo: Path, side: str, extra: dict[str, str]) -> None:
    for entry in repo.iterdir():
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for case in (*VULN, *SAFE):
        # plain copies: a case that only moves lines keeps its size, and with the fixtures' own
        # modification times git's index would take the head file for the unchanged base one
        shutil.copytree(CASES / case / side, repo / case, copy_function=shutil.copyfile)
    for path, text in extra.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    if side == "head":
        _git(repo, "rm", "-r", "-q", "--cached", ".")  # hash every file anew (see above)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", side)
    _git(repo, "tag", side)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("removed_guards")
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "dev@example.com")
    _git(repo, "config", "user.name", "Dev")
    _commit(repo, "base", {"redirects/__init__.py": "", "trusted/__init__.py": "", "broken/app.py": BROKEN_BASE})
    head = {
        "redirects/urls.py": HOST_ONLY,
        "redirects/views.py": REDIRECT_ROUTE,
        "trusted/urls.py": SCHEME_AND_HOST,
        "trusted/views.py": REDIRECT_ROUTE,
    }
    _commit(repo, "head", {"redirects/__init__.py": "", "trusted/__init__.py": "", "broken/app.py": FIXED_HEAD, **head})
    return repo


def _review(repo: Path, base: str, head: str) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REVIEWLOOP_DATA_DIR", str(repo.parent / "data"))
        for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
            patch.delenv(name, raising=False)
        result = CliRunner().invoke(
            app, ["review", str(repo), "--base", base, "--head", head, "--format", "json", "--no-store", "--all"]
        )
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.fixture(scope="module")
def review(repository: Path) -> dict[str, Any]:
    return _review(repository, "base", "head")


@pytest.fixture(scope="module")
def findings(review: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = review["findings"]
    return found


def _removed_guards(findings: list[dict[str, Any]], case: str) -> list[dict[str, Any]]:
    return [f for f in findings if f["path"].startswith(f"{case}/") and f.get("rule") == RULE]


@pytest.mark.parametrize("case", VULN)
def test_a_removed_guard_is_posted_with_its_cwe_and_base_line(findings: list[dict[str, Any]], case: str) -> None:
    expect = json.loads((CASES / case / "expect.json").read_text())
    found = _removed_guards(findings, case)
    posted = [f for f in found if f["verdict"] == "REAL" and f["cwe"] == expect["cwe"]]
    assert posted, f"{case}: no posted {expect['cwe']} finding; got {[(f['verdict'], f['cwe']) for f in found]}"
    assert any(expect["quote"] in f["body"] for f in posted), [f["body"] for f in posted]


@pytest.mark.parametrize("case", SAFE)
def test_a_guard_that_still_dominates_is_not_reported(findings: list[dict[str, Any]], case: str) -> None:
    assert _removed_guards(findings, case) == []


def test_a_validator_is_judged_by_its_body_at_head(findings: list[dict[str, Any]]) -> None:
    def redirects(package: str) -> list[dict[str, Any]]:
        return [f for f in findings if f["path"] == f"{package}/views.py" and f["cwe"] == "CWE-601"]

    host_only = redirects("redirects")
    assert host_only and host_only[0]["verdict"] in ("REAL", "NEEDS_HUMAN_REVIEW"), host_only
    assert "host" in (host_only[0]["body"] + host_only[0]["title"]).lower() or host_only[0]["line"] == 13
    assert redirects("trusted") == []


def test_a_base_that_does_not_parse_is_named_and_loses_nothing(review: dict[str, Any]) -> None:
    """The change fixes a syntax error: no removed guard can be looked for in a base that does not
    parse, the review says so, and the head's own findings are still there."""
    injection = [f for f in review["findings"] if f["path"] == "broken/app.py" and f["cwe"] == "CWE-89"]
    assert injection and injection[0]["verdict"] == "REAL", injection
    named = [n for n in review["not_reviewed"] if n["path"] == "broken/app.py"]
    assert any("removed guards not looked for" in n["detail"] for n in named), review["not_reviewed"]


def test_the_fix_direction_is_silent(repository: Path) -> None:
    """Each vulnerable case reviewed the other way round is the fix: it adds the guard back."""
    fixes = _review(repository, "head", "base")["findings"]
    assert [f for case in VULN for f in _removed_guards(fixes, case)] == []
