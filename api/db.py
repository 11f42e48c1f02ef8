"""The API's and worker's async connection pool to Postgres (rows as dicts, one type for all)."""

from __future__ import annotations

from typing import TypeAlias

from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

DbConnection: TypeAlias = AsyncConnection[DictRow]
DbPool: TypeAlias = AsyncConnectionPool[DbConnection]


def make_pool(dsn: str, *, max_size: int, min_size: int = 1, name: str = "reviewloop") -> DbPool:
    """A closed pool; open it with `await pool.open(wait=True)` inside the event loop that uses it."""
    return AsyncConnectionPool(
        dsn,
        connection_class=DbConnection,
        kwargs={"row_factory": dict_row},
        min_size=min_size,
        max_size=max_size,
        name=name,
        open=False,
        # a connection the server dropped (restart, idle timeout) is replaced, not handed out
        check=AsyncConnectionPool.check_connection,
    )
