"""Schema migrations: numbered SQL files applied once each, in order, under an advisory lock.

Several API replicas and workers may start together; the advisory lock makes one of them migrate
while the others wait, so nobody sees a half-built schema.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any

import psycopg

MIGRATION_LOCK_KEY = 0x7265766C  # "revl": one fixed advisory-lock key for migrations
# How often a start waiting for another's migrations asks for the lock again. A blocking
# pg_advisory_lock would be a statement running with a snapshot for as long as it waits, and
# LangGraph's checkpoint migrations build an index CONCURRENTLY, which waits for every such
# snapshot: the holder and the waiters would wait on each other, unseen by Postgres' deadlock check.
LOCK_POLL_S = 0.1


def acquire_migration_lock(conn: psycopg.Connection[Any]) -> None:
    """Take the migration advisory lock on this autocommit connection, polling rather than blocking."""
    while True:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATION_LOCK_KEY,)).fetchone()
        if row is not None and row[0]:
            return
        time.sleep(LOCK_POLL_S)


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every bundled migration, ascending."""
    out = []
    for entry in resources.files("agent.store").joinpath("migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            out.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(out)


@contextmanager
def migration_lock(dsn: str) -> Iterator[None]:
    """Hold the migration advisory lock (on a connection of its own) for schema work that is not one
    of our numbered files: LangGraph's checkpoint tables, whose `setup()` has no lock of its own, so
    two first starts collided on `checkpoint_migrations`' key (issue 40). Not reentrant with
    `upgrade`, which takes the lock on its own connection: call them one after the other."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        acquire_migration_lock(conn)
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))


def upgrade(dsn: str) -> list[str]:
    """Apply the migrations this database lacks; returns the names applied (empty when current)."""
    applied: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        acquire_migration_lock(conn)
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            # Every bundled migration not applied yet, in order, not only those above the highest:
            # branches merged in any order may bring a lower number after a higher one was applied.
            done = {int(v) for (v,) in conn.execute("SELECT version FROM schema_migrations").fetchall()}
            for version, name, sql in migration_files():
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(sql.encode())
                    conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
                applied.append(name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    return applied
