"""Votes on this project's findings by rule and by path, for the verifier's rejected-rule check."""

from __future__ import annotations

from agent.store.db import Database, connection


def votes_by_rule_and_path(
    db: Database, *, project: str
) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """(rule → (👎, 👍), path → (👎, 👍)) over every current vote on this project's findings."""
    with connection(db) as conn:
        rows = conn.execute(
            "SELECT grouping(f.rule)::int AS by_path, f.rule, f.path,"
            " count(*) FILTER (WHERE fb.value < 0)::int, count(*) FILTER (WHERE fb.value > 0)::int"
            " FROM findings f JOIN reviews r ON r.id = f.review_id JOIN feedback fb ON fb.finding_id = f.id"
            " WHERE r.project = %s AND fb.value <> 0 GROUP BY GROUPING SETS ((f.rule), (f.path))",
            (project,),
        ).fetchall()
    by_rule: dict[str, tuple[int, int]] = {}
    by_path: dict[str, tuple[int, int]] = {}
    for by_path_row, rule, path, down, up in rows:
        if by_path_row:
            by_path[str(path)] = (int(down), int(up))
        else:
            by_rule[str(rule)] = (int(down), int(up))
    return by_rule, by_path
