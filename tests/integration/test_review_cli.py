"""`reviewloop review` from the command line: a diff, a local range, a GitLab MR (dry run and --post),
and the one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from typer.testing import CliRunner

from api.cli import app
from api.commands.review import build_demo_repository

FIELDS = {
    "path",
    "line",
    "end_line",
    "category",
    "severity",
    "title",
    "body",
    "verdict",
    "verdict_reason",
    "fingerprint",
}
BASE = {"app/db.py": "import sqlite3\n\n\ndef connect(p):\n    return sqlite3.connect(p)\n"}
HEAD = {  # request data spliced into SQL: a REAL finding (a parameter of unknown origin would go to a person)
    "app/db.py": "from flask import request\n"
    + BASE["app/db.py"]
    + "\n\ndef find(conn):\n    name = request.args['name']\n"
    + "    query = f\"SELECT * FROM users WHERE name = '{name}'\"\n    return conn.execute(query).fetchall()\n"
}


@pytest.fixture
def env(db_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATABASE_URL", db_dsn)
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)


def test_review_local_range_and_diff_emit_the_contract(env: None, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    build_demo_repository(repo)
    runner = CliRunner()
    local = runner.invoke(app, ["review", str(repo), "--base", "demo-base", "--head", "demo-head", "--format", "json"])
    assert local.exit_code == 0, local.output
    findings = json.loads(local.stdout)["findings"]
    assert findings and all(FIELDS <= set(f) for f in findings)
    # the injection is posted where request data enters it (the endpoint calling search_items); the sink line
    # of unknown origin in db.py is one of the usually-wrong listings the summary counts, and --all shows it
    assert any(
        f["category"] == "security" and f["path"] == "inventory/api.py" and f["verdict"] == "REAL" for f in findings
    )
    every = runner.invoke(
        app, ["review", str(repo), "--base", "demo-base", "--head", "demo-head", "--format", "json", "--all"]
    )
    assert any(f["path"] == "inventory/db.py" and f["line"] == 17 for f in json.loads(every.stdout)["findings"])

    patch = tmp_path / "change.patch"
    import subprocess

    patch.write_text(
        subprocess.run(
            ["git", "-C", str(repo), "diff", "demo-base", "demo-head"], capture_output=True, text=True, check=True
        ).stdout
    )
    diff = runner.invoke(app, ["review", "--diff", str(patch), "--format", "json", "--fail-on", "high"])
    assert diff.exit_code == 1, diff.output  # a high finding with --fail-on high
    assert all(FIELDS <= set(f) for f in json.loads(diff.stdout)["findings"])
    sarif = runner.invoke(app, ["review", "--diff", str(patch), "--format", "sarif", "--no-store"])
    assert json.loads(sarif.stdout)["version"] == "2.1.0"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["review", "/nonexistent/repo", "--base", "a", "--head", "b"], "not a git repository"),
        (["review", "--diff", "/nonexistent.patch"], "cannot read"),
        (["review", "--format", "yaml", "--diff", "-"], "unknown format"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(env: None, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args, input="")
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output


def test_review_of_an_unknown_revision_and_an_empty_or_garbage_diff(env: None, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    build_demo_repository(repo)
    runner = CliRunner()
    bad_rev = runner.invoke(app, ["review", str(repo), "--base", "nope", "--head", "demo-head", "--no-store"])
    assert bad_rev.exit_code != 0 and "unknown revision" in bad_rev.output
    # an empty diff and an empty commit range are the same thing: an empty change, exit 0, said so
    empty = runner.invoke(app, ["review", "--diff", "-", "--no-store"], input="")
    assert empty.exit_code == 0 and "nothing to review: the change is empty" in empty.output
    same = runner.invoke(app, ["review", str(repo), "--base", "demo-head", "--head", "demo-head", "--no-store"])
    assert same.exit_code == 0 and "nothing to review: the change is empty" in same.output
    garbage = runner.invoke(
        app, ["review", "--diff", "-", "--no-store"], input="diff --git a/x b/x\n@@ -1,2 +1,2 @@\n+only one line\n"
    )
    assert garbage.exit_code != 0 and "Traceback" not in garbage.output


def test_review_a_gitlab_merge_request_dry_run_then_post(env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_GITLAB_TOKEN", BOT_TOKEN)
    with FakeGitLab() as gitlab:
        gitlab.add_project(1, "shop/app")
        gitlab.add_merge_request(1, 3, files_base=BASE, files_head=HEAD, title="Find users")
        runner = CliRunner()
        args = ["review", "--gitlab-url", gitlab.url, "--project", "1", "--mr", "3", "--format", "json"]
        dry = runner.invoke(app, args)
        assert dry.exit_code == 0, dry.output
        assert any(f["category"] == "security" for f in json.loads(dry.stdout)["findings"])
        assert gitlab.discussions(1, 3) == [], "a dry run posted something"
        posted = runner.invoke(app, [*args, "--post"])
        assert posted.exit_code == 0, posted.output
        first = len(gitlab.notes(1, 3))
        assert first >= 2, "expected a finding thread and the summary"
        again = runner.invoke(app, [*args, "--post"])
        assert again.exit_code == 0
        assert len(gitlab.notes(1, 3)) == first, "a second --post posted again"


def test_a_shallow_clone_gets_a_hint_to_deepen(env: None, tmp_path: Path) -> None:
    import subprocess

    repo = tmp_path / "repo"
    build_demo_repository(repo)
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", "--branch", "demo-head", f"file://{repo}", str(shallow)], check=True
    )
    result = CliRunner().invoke(app, ["review", str(shallow), "--base", "HEAD~1", "--head", "HEAD", "--no-store"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())  # the console wraps long lines
    assert "shallow clone" in said and "git fetch --deepen" in said
    assert "Traceback" not in result.output


JS_PATCH = """diff --git a/server/routes/admin.js b/server/routes/admin.js
new file mode 100644
--- /dev/null
+++ b/server/routes/admin.js
@@ -0,0 +1,8 @@
+const { exec } = require("child_process");
+const express = require("express");
+const router = express.Router();
+
+router.get("/cleanup", (req, res) => {
+  exec("rm -rf " + req.query.dir);
+  res.sendStatus(204);
+});
"""


def test_review_of_a_javascript_diff_reports_the_shell_command_as_cwe_78(env: None, tmp_path: Path) -> None:
    patch = tmp_path / "js.patch"
    patch.write_text(JS_PATCH)
    result = CliRunner().invoke(app, ["review", "--diff", str(patch), "--format", "json", "--no-store"])
    assert result.exit_code == 0, result.output
    findings = json.loads(result.stdout)["findings"]
    assert [(f["path"], f["line"], f["cwe"], f["verdict"]) for f in findings if f["category"] == "security"] == [
        ("server/routes/admin.js", 6, "CWE-78", "REAL")
    ]
