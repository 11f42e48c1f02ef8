"""Two processes starting together on a fresh database both get a whole schema (issue 40, Build 11).

At 2a83aab our migrations ran under an advisory lock, but LangGraph's checkpoint tables were created
after it was released: two first reviews at once collided on `checkpoint_migrations`' key. Here
several starts race on a fresh database through `prepare_database`, each on its own connection, as
replicas and one-off commands do; all succeed and the schema is whole.
"""

from __future__ import annotations

import threading

import psycopg

from agent.session import prepare_database
from agent.store.migrate import migration_files

STARTS = 4


def test_concurrent_first_starts_on_a_fresh_database_all_succeed(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:  # the fixture's database is migrated: empty it
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
    barrier = threading.Barrier(STARTS)
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            prepare_database(db_dsn)
        except BaseException as exc:  # reported below, with every other start's
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(STARTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, [repr(e) for e in errors]
    with psycopg.connect(db_dsn) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        checkpoints = conn.execute("SELECT count(*), count(DISTINCT v) FROM checkpoint_migrations").fetchone()
    assert versions == [v for v, _, _ in migration_files()]
    assert checkpoints is not None and checkpoints[0] == checkpoints[1] > 0
