"""What a review looked at (its snapshot) and per-path history for the strategy's s1."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from agent.store.db import Database, connection
from agent.store.rejections import INDEPENDENT


def set_snapshot(
    db: Database,
    review_id: int,
    *,
    snapshot: Mapping[str, Any],
    base_sha: str | None,
    start_sha: str | None,
    head_sha: str | None,
) -> None:
    """Record the loaded snapshot (the replay environment's input) and the SHAs it was taken at; a
    review created before its merge request was read (a webhook's) takes its title and address too."""
    with connection(db) as conn:
        conn.execute(
            "UPDATE reviews SET snapshot = %s, base_sha = coalesce(%s, base_sha),"
            " start_sha = coalesce(%s, start_sha), head_sha = coalesce(head_sha, %s),"
            " title = CASE WHEN title = '' THEN %s ELSE title END,"
            " web_url = CASE WHEN %s <> '' THEN %s ELSE web_url END WHERE id = %s",
            (
                Jsonb(dict(snapshot)),
                base_sha,
                start_sha,
                head_sha,
                str(snapshot.get("title") or ""),
                str(snapshot.get("web_url") or ""),
                str(snapshot.get("web_url") or ""),
                review_id,
            ),
        )


def path_acceptance(db: Database, *, project: str, paths: Sequence[str]) -> dict[str, float]:
    """Accepted share of voted findings per path (only paths with votes): history for s1. An author's 👎
    on their own merge request is left out, as everywhere a path's or a reviewer's standing is read
    (agent.store.rejections)."""
    if not paths:
        return {}
    with connection(db) as conn:
        rows = conn.execute(
            "WITH scored AS ("
            " SELECT f.path, sum(fb.value) AS score FROM findings f"
            " JOIN reviews r ON r.id = f.review_id JOIN feedback fb ON fb.finding_id = f.id"
            f" WHERE r.project = %s AND f.path = ANY(%s) AND {INDEPENDENT} GROUP BY f.id, f.path)"
            " SELECT path, count(*) FILTER (WHERE score > 0), count(*) FILTER (WHERE score <> 0)"
            " FROM scored GROUP BY path",
            (project, list(paths)),
        ).fetchall()
    return {str(p): int(acc) / int(n) for p, acc, n in rows if n}


def set_s1(db: Database, review_id: int, *, s1: str) -> None:
    """Keep the rendered s1 in the snapshot (the dataset builder prefers it to re-rendering)."""
    with connection(db) as conn:
        conn.execute(
            "UPDATE reviews SET snapshot = coalesce(snapshot, '{}'::jsonb) || jsonb_build_object('s1', %s::text)"
            " WHERE id = %s",
            (s1, review_id),
        )
