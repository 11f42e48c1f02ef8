"""Suppressions: a rule people silenced in one part of one project, with who, when and why, and undo.

A vote acts on its own rule and scope (issue 40): three 👎 on one finding silenced, on the next
merge request, a different rule's finding in the same file, because rejections were counted by path
alone. Now a suppression is (project, rule, path scope): at least `MIN_PEOPLE` people rejected the
rule's findings in that scope and nobody accepted one there (`agent.verdicts.feedback`: people, not
votes; an author's 👎 on their own merge request does not count). The scope of a path is its
directory and what is below it (`path_scope`).

Nothing is stored when a suppression starts: it is read from the votes, so its people, the time of
the vote that made it and the comments they gave are the votes' own. A maintainer lifts one
(`lift`, from the dashboard): a row in `suppression_lifts` (who, when, why), after which the votes
of that scope from before the lift no longer count; people's later votes can raise it again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.store.db import Database, connection
from agent.store.rejections import INDEPENDENT
from agent.verdicts.feedback import MIN_PEOPLE, MODEL_RULES, path_scope
from reviewers.kernel.errors import InputError

MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class Suppression:
    """An active suppression: who (the people who rejected), when (their latest vote), why (their words)."""

    project: str
    rule: str
    path_scope: str
    people: tuple[str, ...]
    since: datetime
    reasons: tuple[str, ...]
    findings: int  # the rejected findings it rests on


@dataclass(frozen=True)
class Lift:
    project: str
    rule: str
    path_scope: str
    lifted_by: str
    reason: str
    lifted_at: datetime


def _latest_lifts(conn: Any, projects: list[str] | None) -> dict[tuple[str, str, str], datetime]:
    rows = conn.execute(
        "SELECT project, rule, path_scope, max(lifted_at) FROM suppression_lifts"
        " WHERE (%(projects)s::text[] IS NULL OR project = ANY(%(projects)s::text[]))"
        " GROUP BY project, rule, path_scope",
        {"projects": projects},
    ).fetchall()
    return {(str(p), str(r), str(s)): at for p, r, s, at in rows}


def active_suppressions(db: Database, *, projects: list[str] | None = None) -> list[Suppression]:
    """The suppressions in force, in `projects` (None: every project), newest first."""
    with connection(db) as conn:
        votes = conn.execute(
            "SELECT r.project, f.rule, f.path, f.id, fb.user_key, fb.value, fb.updated_at, fb.comment"
            " FROM findings f JOIN reviews r ON r.id = f.review_id JOIN feedback fb ON fb.finding_id = f.id"
            " WHERE (%(projects)s::text[] IS NULL OR r.project = ANY(%(projects)s::text[]))"
            f" AND fb.value <> 0 AND {INDEPENDENT} AND r.project IS NOT NULL AND f.rule <> ALL(%(model)s)",
            {"projects": projects, "model": sorted(MODEL_RULES)},
        ).fetchall()
        lifts = _latest_lifts(conn, projects)
    scopes: dict[tuple[str, str, str], list[tuple[int, str, int, datetime, str | None]]] = defaultdict(list)
    for project, rule, path, finding_id, user_key, value, updated_at, comment in votes:
        key = (str(project), str(rule), path_scope(str(path)))
        lifted_at = lifts.get(key)
        if lifted_at is not None and updated_at <= lifted_at:
            continue  # a maintainer lifted the suppression these votes made
        scopes[key].append((int(finding_id), str(user_key), int(value), updated_at, comment))
    out: list[Suppression] = []
    for (project, rule, scope), rows in scopes.items():
        down = sorted({user for _, user, value, _, _ in rows if value < 0})
        if len(down) < MIN_PEOPLE or any(value > 0 for _, _, value, _, _ in rows):
            continue
        rejected = [r for r in rows if r[2] < 0]
        out.append(
            Suppression(
                project=project,
                rule=rule,
                path_scope=scope,
                people=tuple(down),
                since=max(at for _, _, _, at, _ in rejected),
                reasons=tuple(dict.fromkeys(c.strip() for *_, c in rejected if c and c.strip())),
                findings=len({finding for finding, *_ in rejected}),
            )
        )
    return sorted(out, key=lambda s: s.since, reverse=True)


def suppressed_scopes(db: Database, *, project: str) -> dict[tuple[str, str], int]:
    """(rule, path scope) → the people who rejected it, for the suppressions in force in `project`."""
    return {(s.rule, s.path_scope): len(s.people) for s in active_suppressions(db, projects=[project])}


def lift(db: Database, *, project: str, rule: str, path_scope: str, by: str, reason: str) -> Lift:
    """Lift the suppression in force on (project, rule, path scope); refused when none is."""
    if not any((s.rule, s.path_scope) == (rule, path_scope) for s in active_suppressions(db, projects=[project])):
        raise InputError(f"no suppression of {rule} in {path_scope} is in force on {project}")
    with connection(db) as conn:
        row = conn.execute(
            "INSERT INTO suppression_lifts (project, rule, path_scope, lifted_by, reason)"
            " VALUES (%s, %s, %s, %s, %s) RETURNING lifted_at",
            (project, rule, path_scope, by, reason.strip()[:MAX_REASON_CHARS]),
        ).fetchone()
    if row is None:  # cannot happen: INSERT .. RETURNING returns the row
        raise InputError("the lift was not stored")
    return Lift(project, rule, path_scope, by, reason.strip()[:MAX_REASON_CHARS], row[0])


def recent_lifts(db: Database, *, projects: list[str] | None = None, limit: int = 50) -> list[Lift]:
    """The latest lifts, newest first (who undid which suppression, when and why)."""
    with connection(db) as conn:
        rows = conn.execute(
            "SELECT project, rule, path_scope, lifted_by, reason, lifted_at FROM suppression_lifts"
            " WHERE (%(projects)s::text[] IS NULL OR project = ANY(%(projects)s::text[]))"
            " ORDER BY lifted_at DESC, id DESC LIMIT %(limit)s",
            {"projects": projects, "limit": limit},
        ).fetchall()
    return [Lift(str(p), str(r), str(s), str(b), str(w), at) for p, r, s, b, w, at in rows]
