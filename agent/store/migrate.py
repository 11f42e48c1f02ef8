"""Schema migrations: numbered SQL files applied once each, in order, under an advisory lock.

Several API replicas and workers may start together; the advisory lock makes one of them migrate
while the others wait, so nobody sees a half-built schema.
"""

from __future__ import annotations

from importlib import resources

import psycopg

MIGRATION_LOCK_KEY = 0x7265766C  # "revl": one fixed advisory-lock key for migrations


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every bundled migration, ascending."""
    out = []
    for entry in resources.files("agent.store").joinpath("migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            out.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(out)


def upgrade(dsn: str) -> list[str]:
    """Apply the migrations this database lacks; returns the names applied (empty when current)."""
    applied: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
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
