"""`reviewloop review` in every mode (issue 40, Build 9 and 11): `--fail-on` and
`--fail-on-incomplete` act with `--gitlab-url` as with a local range, an unknown severity is one line
and exit 2 before any work, a one-off review stores nothing and starts no database, and a usage error
leaves no failed review on the dashboard. Real git, the GitLab fake over HTTP, a real Postgres."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from typer.testing import CliRunner

from api.cli import app
from api.commands.review import INCOMPLETE_EXIT_CODE, build_demo_repository

BASE = {"app/db.py": "import sqlite3\n\n\ndef connect(p):\n    return sqlite3.connect(p)\n"}
HEAD = {
    "app/db.py": BASE["app/db.py"]
    + "\n\ndef find(conn):\n    name = request.args['name']\n"
    + "    return conn.execute(f\"SELECT * FROM users WHERE name = '{name}'\")\n",
    "app/data.bin": "\x00\x01binary\x00" * 4,
}


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No model, no database URL, a data directory of the test's own."""
    for name in (
        "REVIEWLOOP_LLM_BASE_URL",
        "REVIEWLOOP_LLM_MODEL",
        "REVIEWLOOP_LLM_MODEL_PATH",
        "REVIEWLOOP_DATABASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    data = tmp_path / "data"
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(data))
    return data


def reviews_stored(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM reviews").fetchone()
    assert row is not None
    return int(row[0])


def test_fail_on_works_with_gitlab_url_and_unknown_values_are_refused(
    no_model: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("REVIEWLOOP_GITLAB_TOKEN", BOT_TOKEN)
    runner = CliRunner()
    with FakeGitLab() as gitlab:
        gitlab.add_project(1, "shop/app")
        gitlab.add_merge_request(1, 3, files_base=BASE, files_head=HEAD, title="Find users")
        args = ["review", "--gitlab-url", gitlab.url, "--project", "1", "--mr", "3", "--format", "json"]
        plain = runner.invoke(app, args)
        assert plain.exit_code == 0, plain.output
        failing = runner.invoke(app, [*args, "--fail-on", "high"])
        assert failing.exit_code == 1, failing.output  # at 2a83aab: 0, --fail-on was ignored here
        assert runner.invoke(app, [*args, "--fail-on", "critical"]).exit_code == 0  # the SQL one is high
        incomplete = runner.invoke(app, [*args, "--fail-on-incomplete"])
        assert incomplete.exit_code == INCOMPLETE_EXIT_CODE, incomplete.output
        bogus = runner.invoke(app, [*args, "--fail-on", "bogus"])
    assert bogus.exit_code == 2
    assert bogus.output.strip().splitlines() == [
        "reviewloop: unknown severity 'bogus' for --fail-on; choose one of info, low, medium, high, critical"
    ]
    repo = tmp_path / "repo"
    build_demo_repository(repo)
    local = runner.invoke(app, ["review", str(repo), "--base", "demo-base", "--head", "demo-head", "--fail-on", "x"])
    assert local.exit_code == 2 and "unknown severity 'x' for --fail-on" in local.output
    assert not no_model.exists(), "a usage error started the embedded Postgres"


def test_a_one_off_local_review_stores_nothing_and_starts_no_database(no_model: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    build_demo_repository(repo)
    result = CliRunner().invoke(app, ["review", str(repo), "--base", "demo-base", "--head", "demo-head"])
    assert result.exit_code == 0, result.output
    assert "inventory/api.py" in result.stdout  # the injection, where request data enters it
    # at 2a83aab the review started an embedded Postgres under the data directory, left running
    assert not (no_model / "postgres").exists()


def test_with_a_database_reviews_are_stored_but_usage_errors_are_not(
    no_model: Path, db_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATABASE_URL", db_dsn)
    repo = tmp_path / "repo"
    build_demo_repository(repo)
    runner = CliRunner()
    bad = runner.invoke(app, ["review", str(repo), "--base", "no-such-rev", "--head", "demo-head"])
    assert bad.exit_code == 2 and "unknown revision" in bad.output, bad.output
    assert reviews_stored(db_dsn) == 0  # at 2a83aab: a failed review on the dashboard
    garbage = runner.invoke(app, ["review", "--diff", "-"], input="diff --git a/x b/x\n@@ -1,2 +1,2 @@\n+one line\n")
    assert garbage.exit_code == 2 and "Traceback" not in garbage.output, garbage.output
    assert reviews_stored(db_dsn) == 0
    kept = runner.invoke(app, ["review", str(repo), "--base", "demo-base", "--head", "demo-head"])
    assert kept.exit_code == 0, kept.output
    assert reviews_stored(db_dsn) == 1
    unkept = runner.invoke(app, ["review", str(repo), "--base", "demo-base", "--head", "demo-head", "--no-store"])
    assert unkept.exit_code == 0
    assert reviews_stored(db_dsn) == 1


def test_a_gitlab_dry_run_reports_what_the_severity_floor_left_out(
    no_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVIEWLOOP_GITLAB_TOKEN", BOT_TOKEN)
    floor = {".reviewloop.toml": 'min_severity = "critical"\n'}
    with FakeGitLab() as gitlab:
        gitlab.add_project(1, "shop/app")
        gitlab.add_merge_request(1, 3, files_base={**BASE, **floor}, files_head={**HEAD, **floor}, title="Find users")
        args = ["review", "--gitlab-url", gitlab.url, "--project", "1", "--mr", "3", "--format", "json"]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # as a local review's report does; the GitLab dry run left it out until 2026-11-29 (issue 40)
    assert report["below_min_severity"]["min_severity"] == "critical", report.keys()
    assert report["below_min_severity"]["count"] >= 1
