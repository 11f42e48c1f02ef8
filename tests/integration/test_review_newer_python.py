"""`reviewloop review` on code written for Python 3.12+, on the 3.11 service: analyzed, not skipped.

Before the reader (`reviewers.analyzers.pysyntax`), a file with a 3.12 f-string (`f"{d["name"]}"`)
was silently left out of every syntax-tree rule and bandit: its path traversal went unreported and
nothing named the file. A file no Python version reads is named in `not_reviewed` with the syntax.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app

HANDLER = """import os

from flask import Flask, request, send_file

app = Flask(__name__)
BASE = "/srv/files"


@app.route("/download")
def download():
    d = {"name": request.args.get("user", "")}
    name = request.args.get("file")
    app.logger.info(f"download by {d["name"]}")
    return send_file(os.path.join(BASE, name))
"""
TRAVERSAL_LINE = 14
BROKEN = """import subprocess


def run(cmd:
    return eval(input())
"""


def _new_file_patch(files: dict[str, str]) -> str:
    out: list[str] = []
    for path, text in files.items():
        lines = text.splitlines()
        out += [f"diff --git a/{path} b/{path}", "new file mode 100644", "--- /dev/null", f"+++ b/{path}"]
        out += [f"@@ -0,0 +1,{len(lines)} @@", *(f"+{line}" for line in lines)]
    return "\n".join(out) + "\n"


@pytest.fixture
def env(db_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATABASE_URL", db_dsn)
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)


def test_a_312_fstring_file_reports_its_path_traversal_and_a_broken_file_is_named(env: None, tmp_path: Path) -> None:
    patch = tmp_path / "change.patch"
    patch.write_text(_new_file_patch({"app/handler.py": HANDLER, "app/broken.py": BROKEN}))
    result = CliRunner().invoke(app, ["review", "--diff", str(patch), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    traversal = [f for f in report["findings"] if f["rule"] == "python:path-traversal"]
    assert [(f["path"], f["line"]) for f in traversal] == [("app/handler.py", TRAVERSAL_LINE)]
    skipped = {n["path"]: (n["reason"], n["detail"]) for n in report["not_reviewed"]}
    assert "app/handler.py" not in skipped
    reason, detail = skipped["app/broken.py"]
    assert reason == "parse-error" and detail.startswith("parse error: ")
    assert "line 4" in detail or "line 5" in detail


def test_a_local_range_adding_312_syntax_keeps_its_findings(env: None, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "app").mkdir(parents=True)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "dev@example.invalid")
    git("config", "user.name", "dev")
    before = HANDLER.replace('    app.logger.info(f"download by {d["name"]}")\n', "").replace(
        "    return send_file(os.path.join(BASE, name))\n", "    return send_file(os.path.join(BASE, 'index.html'))\n"
    )
    (repo / "app" / "handler.py").write_text(before)
    git("add", "-A")
    git("commit", "-qm", "base")
    git("tag", "base")
    (repo / "app" / "handler.py").write_text(HANDLER + "\n\ntype Paths[T] = list[T]\n")
    git("commit", "-qam", "head")
    result = CliRunner().invoke(app, ["review", str(repo), "--base", "base", "--head", "HEAD", "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(f["path"], f["line"]) for f in report["findings"] if f["rule"] == "python:path-traversal"] == [
        ("app/handler.py", TRAVERSAL_LINE)
    ]
    assert report["not_reviewed"] == []
