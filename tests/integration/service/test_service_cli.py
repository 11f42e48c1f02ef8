"""`reviewloop db upgrade`, `reviewloop tokens create` and `reviewloop serve` as real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest
from fakes.gitlab_hooks import hook_headers, merge_request_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from service_harness import IID, PID, SECRET, post_hook, scalar, wait_for

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, dsn: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REVIEWLOOP_DATABASE_URL": dsn}
    return subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=180,
    )


def start_cli(args: list[str], *, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # output to a file, not a pipe: a full pipe nobody reads would block the server's logging
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-c", "from api.cli import main; main()", *args],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_db_upgrade_is_idempotent_and_creates_the_queue(db_dsn: str) -> None:
    first = cli("db", "upgrade", dsn=db_dsn)
    assert first.returncode == 0, first.stderr
    assert "is up to date" in first.stdout
    assert scalar(db_dsn, "SELECT to_regclass('procrastinate_jobs') IS NOT NULL") is True
    again = cli("db", "upgrade", dsn=db_dsn)
    assert again.returncode == 0, again.stderr


def test_tokens_create_prints_a_token_once_and_stores_its_hash(db_dsn: str) -> None:
    made = cli("tokens", "create", "grafana", dsn=db_dsn)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("rl_") and "shown only now" in made.stderr
    with psycopg.connect(db_dsn) as conn:
        stored = conn.execute("SELECT token_hash FROM api_tokens WHERE name = 'grafana'").fetchone()
    assert stored is not None and token not in stored[0]
    twice = cli("tokens", "create", "grafana", dsn=db_dsn)
    assert twice.returncode == 2 and "already exists" in twice.stderr and "Traceback" not in twice.stderr


@pytest.mark.slow
def test_serve_without_worker_answers_and_stops_on_sigterm(db_dsn: str, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "REVIEWLOOP_DATABASE_URL": db_dsn,
        "REVIEWLOOP_WEBHOOK_SECRET": SECRET,
        "REVIEWLOOP_API_TOKENS": "ci:t0ken-for-tests",
    }
    log = tmp_path / "serve.log"
    proc = start_cli(["serve", "--no-worker", "--port", str(port)], env=env, log=log)
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, timeout=90, what="/readyz")
        reviews = httpx.get(f"{url}/api/v1/reviews", headers={"Authorization": "Bearer t0ken-for-tests"}, timeout=10)
        assert reviews.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    output = log.read_text()
    assert SECRET not in output and "t0ken-for-tests" not in output  # secrets never reach the logs


@pytest.mark.slow
def test_serve_runs_the_api_and_a_worker(db_dsn: str, fake: FakeGitLab, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "REVIEWLOOP_DATABASE_URL": db_dsn,
        "REVIEWLOOP_WEBHOOK_SECRET": SECRET,
        "REVIEWLOOP_GITLAB_URL": fake.url,
        "REVIEWLOOP_GITLAB_TOKEN": BOT_TOKEN,
    }
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        env.pop(name, None)
    log = tmp_path / "serve.log"
    proc = start_cli(["serve", "--port", str(port)], env=env, log=log)
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            try:
                answer = httpx.get(f"{url}/readyz", timeout=2)
            except httpx.TransportError:
                return False
            return answer.status_code == 200 and answer.json()["workers"] == 1

        wait_for(ready, timeout=120, what="/readyz with the in-process worker")
        queued = post_hook(
            url, merge_request_hook(fake, PID, IID, action="open"), hook_headers("Merge Request Hook", token=SECRET)
        )
        assert queued.status_code == 202, queued.text
        event_id = queued.json()["event_id"]
        wait_for(
            lambda: scalar(db_dsn, "SELECT status FROM webhook_events WHERE id = %s", event_id) == "processed",
            timeout=120,
            what="the in-process worker to review",
        )
        assert any(d.notes[0].author.id == fake.bot.id for d in fake.discussions(PID, IID))  # the summary at least
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    output = log.read_text()
    assert scalar(db_dsn, "SELECT count(*) FROM procrastinate_workers") == 0, output[-2000:]
