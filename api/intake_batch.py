"""Group commit for the webhook's reviewable deliveries: many deliveries, one statement, one commit.

Each delivery used to be its own transaction. At 800 events/s on two cores that cost Postgres about
3 ms of CPU per event (a commit and its WAL flush each, and a backend per in-flight request
contending for the same locks), and the two cores could carry only ~360 events/s (bench/RESULTS.md,
"Webhook load and slow senders"). Now a delivery waits while the batch being written commits, then
goes out with everything that arrived meanwhile. Batches form by themselves, with no timer: a lone
delivery is written at once, and under load each commit carries dozens.

What each delivery sees does not change: every one is still one call of `reviewloop_enqueue_review`
(migration 0002), and it is answered only after the commit that holds it.
- A batch holds at most one delivery per merge request (lock key). A second delivery for the same MR
  waits for the next batch, so it sees the first one's committed row, as before.
- Within a batch the per-MR advisory locks are taken in lock-key order. Every batch of every API
  process uses that order, so two batches never deadlock.
- A batch can fail as a whole: one delivery's value that Postgres cannot keep, or a race lost on an
  Idempotency-Key. Then it is written again, one delivery per statement, so each delivery gets its
  own answer and no good delivery is refused because of a bad one beside it.
- A database that is down fails every delivery waiting on it (the route answers 503, GitLab retries).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from api.db import DbConnection, DbPool
from api.metrics import WEBHOOK_INTAKE_BATCH

logger = logging.getLogger(__name__)

# Each delivery of a batch holds its MR's advisory lock until the commit; Postgres' lock table holds
# max_locks_per_transaction (64 by default) per connection on average.
MAX_BATCH = 48

# One row per delivery, in lock-key order, sent as ONE JSON array (each delivery's object encoded once,
# when it arrived): Postgres parses it in C, where psycopg's pure-Python array dumper spent a fifth of
# the API's CPU escaping text[] elements (py-spy, 400 events/s). `ord` maps each answer back.
BATCH_SQL = """
SELECT e.ord, r.status, r.event_id, r.job_id, r.reason, r.superseded
  FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS e(d, ord)
 CROSS JOIN LATERAL reviewloop_enqueue_review(
        e.d->>'kind', e.d->>'key', e.d->>'uuid', (e.d->>'project_id')::bigint, e.d->>'path', (e.d->>'iid')::bigint,
        e.d->>'head', e.d->>'action', e.d->'payload', e.d->>'lock', e.d->>'queue', e.d->>'task',
        (e.d->>'priority')::integer, e.d->'args') r
 ORDER BY e.ord
"""

# the database itself is unreachable: no delivery of the batch can be written now (every one gets 503)
UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


@dataclass
class Pending:
    """One delivery waiting for its commit: its statement's parameters, as one JSON object, and its
    caller's answer."""

    params: dict[str, Any]
    done: asyncio.Future[dict[str, Any]] = field(repr=False)
    encoded: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # encoded once, on arrival; NaN (which Python's decoder accepts) and lone surrogates reach
        # Postgres as text it refuses (a DataError, the delivery's own 400), never a crash here
        self.encoded = json.dumps(self.params)

    @property
    def lock(self) -> str:
        return str(self.params["lock"])

    def settle(self, row: dict[str, Any] | None = None, error: BaseException | None = None) -> None:
        if self.done.done():  # its request was cancelled (the client left); the row stands
            return
        if error is not None:
            self.done.set_exception(error)
        else:
            assert row is not None
            self.done.set_result(row)


def delivery_params(
    *,
    kind: str,
    key: str | None,
    uuid: str | None,
    project_id: int,
    path: str | None,
    iid: int,
    head: str,
    action: str,
    payload: dict[str, Any],
    lock: str,
    queue: str,
    task: str,
    priority: int,
    args: dict[str, Any],
) -> dict[str, Any]:
    """The statement's parameters for one delivery."""
    return {
        "kind": kind,
        "key": key,
        "uuid": uuid,
        "project_id": project_id,
        "path": path,
        "iid": iid,
        "head": head,
        "action": action,
        "payload": payload,
        "lock": lock,
        "queue": queue,
        "task": task,
        "priority": priority,
        "args": args,
    }


class ReviewIntake:
    """The one writer of reviewable deliveries for an API process (see the module's docstring)."""

    def __init__(self, pool: DbPool, *, max_batch: int = MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.pool = pool
        self.max_batch = max_batch
        self._waiting: list[Pending] = []
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0  # how many statements carried deliveries (for tests and the bench)
        self.largest_batch = 0

    async def enqueue(self, params: dict[str, Any]) -> dict[str, Any]:
        """Write one delivery with whatever else is waiting; its row once committed.

        The write goes on if the caller is cancelled: a delivery handed over is written whatever its
        HTTP client does next, and GitLab's retry then finds it by its Idempotency-Key.
        """
        pending = Pending(params, asyncio.get_running_loop().create_future())
        self._waiting.append(pending)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_waiting(), name="reviewloop-intake-writer")
        return await asyncio.shield(pending.done)

    async def drain(self) -> None:
        """Wait until every delivery handed over so far has its answer (the app's shutdown)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    def next_batch(self) -> list[Pending]:
        """Up to `max_batch` waiting deliveries, at most one per MR, oldest first; the rest wait."""
        batch: list[Pending] = []
        later: list[Pending] = []
        locks: set[str] = set()
        for pending in self._waiting:
            if len(batch) < self.max_batch and pending.lock not in locks:
                locks.add(pending.lock)
                batch.append(pending)
            else:
                later.append(pending)
        self._waiting = later
        return sorted(batch, key=lambda p: p.lock)

    async def _write_waiting(self) -> None:
        while self._waiting:
            batch = self.next_batch()
            try:
                await self._write(batch)
            except BaseException as exc:  # never leave a caller waiting, whatever happened
                for pending in batch:
                    pending.settle(error=exc if isinstance(exc, Exception) else RuntimeError("intake stopped"))
                if not isinstance(exc, Exception):
                    for pending in self._waiting:
                        pending.settle(error=RuntimeError("intake stopped"))
                    self._waiting = []
                    raise
                logger.exception("intake batch failed", extra={"deliveries": len(batch)})

    async def _write(self, batch: Sequence[Pending]) -> None:
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(batch))
        WEBHOOK_INTAKE_BATCH.observe(len(batch))
        try:
            async with self.pool.connection() as conn:
                await conn.set_autocommit(True)
                try:
                    rows = await self._run_batch(conn, batch)
                finally:
                    await conn.set_autocommit(False)
        except UNAVAILABLE as exc:
            for pending in batch:
                pending.settle(error=exc)
            return
        except (psycopg.Error, UnicodeEncodeError) as exc:
            if len(batch) == 1:
                batch[0].settle(error=exc)
                return
            logger.info(
                "intake batch refused as a whole: writing its deliveries one by one",
                extra={"deliveries": len(batch), "error": type(exc).__name__},
            )
            await self._write_one_by_one(batch)
            return
        for pending, row in zip(batch, rows, strict=True):
            pending.settle(row)

    async def _run_batch(self, conn: DbConnection, batch: Sequence[Pending]) -> list[dict[str, Any]]:
        cur = await conn.execute(BATCH_SQL, {"rows": "[" + ",".join(p.encoded for p in batch) + "]"})
        rows = [dict(row) for row in await cur.fetchall()]
        if [row["ord"] for row in rows] != list(range(1, len(batch) + 1)):
            raise RuntimeError(f"intake batch of {len(batch)} answered {len(rows)} rows")
        return rows

    async def _write_one_by_one(self, batch: Sequence[Pending]) -> None:
        for pending in batch:
            try:
                async with self.pool.connection() as conn:
                    await conn.set_autocommit(True)
                    try:
                        rows = await self._run_batch(conn, [pending])
                    finally:
                        await conn.set_autocommit(False)
            except (psycopg.Error, PoolTimeout, UnicodeEncodeError) as exc:
                pending.settle(error=exc)
            else:
                pending.settle(rows[0])
