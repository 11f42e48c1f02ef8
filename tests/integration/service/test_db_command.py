"""`reviewloop db status|stop` on a real embedded Postgres in its own data directory, and the login
page's command name (it named a command that does not exist)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.store.embedded import embedded_status, start_embedded, stop_embedded

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REVIEWLOOP_DATABASE_URL"}
    env["REVIEWLOOP_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def test_db_status_and_stop_on_the_embedded_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = cli("db", "status", data_dir=data_dir)
    assert first.returncode == 0, first.stderr
    assert "not created yet" in first.stdout
    assert not (data_dir / "postgres" / "postmaster.pid").exists()  # status starts nothing

    start_embedded(data_dir)
    try:
        running = cli("db", "status", data_dir=data_dir)
        assert running.returncode == 0, running.stderr
        assert "running" in running.stdout and "reviewloop db stop" in running.stdout
        pid = embedded_status(data_dir).pid
        assert pid is not None

        stopped = cli("db", "stop", data_dir=data_dir)
        assert stopped.returncode == 0, stopped.stderr
        assert f"was pid {pid}" in stopped.stdout
        assert not embedded_status(data_dir).running

        after = cli("db", "status", data_dir=data_dir)
        assert "stopped; its data is kept" in after.stdout
        again = cli("db", "stop", data_dir=data_dir)
        assert again.returncode == 0 and "was not running" in again.stdout
    finally:
        stop_embedded(data_dir)


def test_db_stop_refuses_a_server_it_does_not_run(tmp_path: Path) -> None:
    env = {**os.environ, "REVIEWLOOP_DATABASE_URL": "postgresql://someone@db.example/x"}
    env["REVIEWLOOP_DATA_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", "db", "stop"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 2
    assert "does not stop it" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("page", ["api/templates/dashboard/login.html"])
def test_the_login_page_names_a_command_that_exists(page: str) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    assert "reviewloop tokens create NAME" in text
    helped = subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", "tokens", "create", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert helped.returncode == 0, helped.stderr
