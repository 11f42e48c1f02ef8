"""Connections to the store: the pool, where its DSN comes from, and the error boundary.

Every repository function takes a `Database`: the pool (each call is its own transaction) or a
connection the caller already holds (the calls join the caller's transaction, so several of them
commit or roll back together). psycopg's errors stop at `connection()`: a lost server becomes a
retryable `StoreError`, a row the schema refuses becomes an `InputError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeAlias

import psycopg
from psycopg import Connection
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from agent.store.embedded import start_embedded
from agent.store.migrate import upgrade
from reviewers.kernel.errors import InputError, StoreError

logger = logging.getLogger(__name__)

Pool: TypeAlias = ConnectionPool[Connection[TupleRow]]
Database: TypeAlias = Pool | Connection[TupleRow]

# How long a caller waits for a free (or re-established) connection before StoreError: long enough
# to ride out a Postgres restart, short enough that a webhook handler still answers GitLab in time.
DEFAULT_ACQUIRE_TIMEOUT_S = 10.0
# How long the pool keeps trying to reconnect in the background after the server went away.
DEFAULT_RECONNECT_TIMEOUT_S = 300.0
# A dead host should fail a connection attempt quickly instead of after the OS's TCP timeout.
CONNECT_TIMEOUT_S = 5


def describe_dsn(dsn: str) -> str:
    """`host:port/dbname` of a DSN, for messages: never the password."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    return f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"


def open_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    acquire_timeout_s: float = DEFAULT_ACQUIRE_TIMEOUT_S,
    reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S,
) -> Pool:
    """An opened pool that has made its first connection.

    Every connection is checked before it is handed out, so connections a Postgres restart (or
    `pg_terminate_backend`) broke are replaced instead of failing the caller's first query.
    """
    if min_size < 0 or max_size < max(1, min_size):
        raise InputError(f"invalid pool size: min {min_size}, max {max_size}")
    pool: Pool = ConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        open=False,
        kwargs={"connect_timeout": CONNECT_TIMEOUT_S},
        check=ConnectionPool.check_connection,
        timeout=acquire_timeout_s,
        reconnect_timeout=reconnect_timeout_s,
        name="reviewloop",
    )
    try:
        pool.open(wait=True, timeout=acquire_timeout_s)
    except psycopg.OperationalError as exc:
        pool.close()
        raise StoreError(f"could not connect to Postgres at {describe_dsn(dsn)}: {exc}") from exc
    return pool


def resolve_dsn(*, database_url: str | None, data_dir: Path) -> str:
    """The configured DSN, or else that of the embedded server in `data_dir` (started if needed)."""
    if database_url:
        return database_url
    return start_embedded(data_dir)


def connect_store(*, database_url: str | None, data_dir: Path, pool_size: int = 10) -> Pool:
    """Resolve the DSN, bring the schema up to date, and open the pool. `pool.conninfo` is the DSN."""
    dsn = resolve_dsn(database_url=database_url, data_dir=data_dir)
    try:
        applied = upgrade(dsn)
    except psycopg.OperationalError as exc:
        raise StoreError(f"could not migrate Postgres at {describe_dsn(dsn)}: {exc}") from exc
    if applied:
        logger.info("applied migrations: %s", ", ".join(applied))
    return open_pool(dsn, max_size=pool_size)


@contextmanager
def connection(db: Database) -> Iterator[Connection[TupleRow]]:
    """A connection from `db`, with psycopg's errors translated into ours.

    From a pool, the block is one transaction, committed when it ends without an exception. A
    connection passed in is used as it is: its owner commits.
    """
    try:
        if isinstance(db, Connection):
            yield db
        else:
            with db.connection() as conn:
                yield conn
    except psycopg.OperationalError as exc:
        # includes PoolTimeout, AdminShutdown, SerializationFailure, DeadlockDetected
        raise StoreError(f"Postgres is unavailable: {_first_line(exc)}") from exc
    except psycopg.InterfaceError as exc:
        raise StoreError(f"Postgres connection lost: {_first_line(exc)}") from exc
    except (psycopg.IntegrityError, psycopg.DataError) as exc:
        raise InputError(f"the store refused the data: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
