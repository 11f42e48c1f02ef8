"""`reviewloop db upgrade`, `reviewloop tokens create|revoke` and `reviewloop serve` as real processes."""

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


def child_pids(pid: int) -> list[int]:
    """The live children of a process (Linux: /proc/PID/task/*/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue  # the thread ended while we looked
    return found


def worker_children(pid: int) -> list[int]:
    """Children of `serve` that run `reviewloop worker`."""
    out = []
    for child in child_pids(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in argv:
            out.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


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
    revoked = cli("tokens", "revoke", "grafana", dsn=db_dsn)
    assert revoked.returncode == 0 and "revoked" in revoked.stderr, revoked.stderr
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT revoked_at IS NOT NULL FROM api_tokens WHERE name = 'grafana'").fetchone() == (
            True,
        )
    again = cli("tokens", "revoke", "grafana", dsn=db_dsn)
    assert again.returncode == 2 and "no unrevoked API token" in again.stderr


def test_tokens_create_with_projects_makes_a_scoped_token(db_dsn: str) -> None:
    made = cli("tokens", "create", "team", "--project", "42", "--project", "7", dsn=db_dsn)
    assert made.returncode == 0, made.stderr
    assert "projects 42, 7" in made.stderr
    bad = cli("tokens", "create", "other", "--project", "team/service", dsn=db_dsn)
    assert bad.returncode == 2 and "numeric GitLab project id" in bad.stderr and "Traceback" not in bad.stderr
    admin = cli("tokens", "create", "ops", dsn=db_dsn)
    assert admin.returncode == 0 and "every project" in admin.stderr, admin.stderr
    with psycopg.connect(db_dsn) as conn:
        stored = conn.execute("SELECT name, projects FROM api_tokens ORDER BY id").fetchall()
    assert stored == [("team", ["7", "42"]), ("ops", None)]


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
        front_door = httpx.get(f"{url}/", timeout=10, follow_redirects=False)  # a browser at the bare address
        assert front_door.status_code == 307 and front_door.headers["location"] == "/dashboard"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    output = log.read_text()
    assert SECRET not in output and "t0ken-for-tests" not in output  # secrets never reach the logs


def gitlab_env(db_dsn: str, fake: FakeGitLab) -> dict[str, str]:
    env = {
        **os.environ,
        "REVIEWLOOP_DATABASE_URL": db_dsn,
        "REVIEWLOOP_WEBHOOK_SECRET": SECRET,
        "REVIEWLOOP_GITLAB_URL": fake.url,
        "REVIEWLOOP_GITLAB_TOKEN": BOT_TOKEN,
    }
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        env.pop(name, None)
    return env


def ready_workers(port: int) -> int | None:
    """The live workers /readyz counts once it answers 200; None before that."""
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
    except httpx.TransportError:
        return None
    return int(answer.json()["workers"]) if answer.status_code == 200 else None


@pytest.mark.slow
def test_serve_runs_the_api_and_a_worker(db_dsn: str, fake: FakeGitLab, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    proc = start_cli(["serve", "--port", str(port)], env=gitlab_env(db_dsn, fake), log=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: ready_workers(port) == 1, timeout=120, what="/readyz with the worker")
        # the worker is a child process: reviews never share the API's GIL (api/worker_process.py)
        assert len(worker_children(proc.pid)) == 1
        queued = post_hook(
            url, merge_request_hook(fake, PID, IID, action="open"), hook_headers("Merge Request Hook", token=SECRET)
        )
        assert queued.status_code == 202, queued.text
        event_id = queued.json()["event_id"]
        wait_for(
            lambda: scalar(db_dsn, "SELECT status FROM webhook_events WHERE id = %s", event_id) == "processed",
            timeout=120,
            what="the worker to review",
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


@pytest.mark.slow
def test_serve_restarts_a_dead_worker_and_takes_it_down_when_killed(
    db_dsn: str, fake: FakeGitLab, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    args = ["serve", "--port", str(port), "--heartbeat-interval", "1", "--stalled-after", "3"]
    proc = start_cli(args, env=gitlab_env(db_dsn, fake), log=log)
    try:
        wait_for(lambda: (ready_workers(port) or 0) >= 1, timeout=120, what="/readyz with the worker")
        (first,) = worker_children(proc.pid)
        registered = int(scalar(db_dsn, "SELECT max(id) FROM procrastinate_workers"))
        os.kill(first, signal.SIGKILL)  # e.g. the OOM killer
        wait_for(
            lambda: worker_children(proc.pid) not in ([], [first]), timeout=60, what="serve to start another worker"
        )
        (second,) = worker_children(proc.pid)
        assert second != first and proc.poll() is None
        # the new one really runs: it has registered with the queue (a worker id after the killed one's;
        # the killed one's row may be pruned as stalled before the new one's is written)
        wait_for(
            lambda: scalar(db_dsn, "SELECT coalesce(max(id), 0) FROM procrastinate_workers") > registered,
            timeout=120,
            what="the new worker to register",
        )
        proc.kill()  # serve dies without stopping its worker: the worker must not be left running
        proc.wait(timeout=30)
        wait_for(lambda: not alive(second), timeout=60, what="the orphaned worker to stop")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert "the worker process exited; starting another" in log.read_text()


@pytest.mark.slow
def test_serve_stops_with_the_error_of_a_worker_that_cannot_start(
    db_dsn: str, fake: FakeGitLab, tmp_path: Path
) -> None:
    port = free_port()
    # a model path with no model: the worker refuses to start (exit 2) and says why
    env = {**gitlab_env(db_dsn, fake), "REVIEWLOOP_LLM_MODEL_PATH": str(tmp_path / "no-model")}
    log = tmp_path / "serve.log"
    proc = start_cli(["serve", "--port", str(port)], env=env, log=log)
    try:
        assert proc.wait(timeout=120) == 2
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    output = log.read_text()
    assert "no model at" in output
    assert "reviewloop: the worker process could not start (exit 2)" in output
    assert "starting another" not in output  # no restart loop
