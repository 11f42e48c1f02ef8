"""People's votes on this project's findings, for the verifier: who rejected a rule, a path, a
fingerprint, and how each reviewer/category stands.

Everything here counts PEOPLE, not votes (issue 21). A person is a `feedback.user_key`: one GitLab user,
or one API token whatever `user` it claimed (migration 0006). Each person has one vote per finding,
the latest. A merge request author's 👎 on their own merge request counts nowhere beyond that merge
request: it neither rejects a rule or a path for everyone nor lowers a reviewer's standing.
"""

from __future__ import annotations

from typing import NamedTuple

from agent.finding_kinds import vote_key
from agent.store.db import Database, connection

# A vote that speaks for the project: not an author's 👎 on their own merge request.
INDEPENDENT = "NOT (fb.voter_is_author AND fb.value < 0)"


class Standing(NamedTuple):
    """A reviewer/category's findings people accepted and rejected, and how many people rejected them."""

    accepted: int
    rejected: int
    rejecters: int


def people_by_rule_and_path(
    db: Database, *, project: str
) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """(rule → (people who voted 👎, people who voted 👍), path → the same) on this project's findings."""
    with connection(db) as conn:
        rows = conn.execute(
            "SELECT grouping(f.rule)::int AS by_path, f.rule, f.path,"
            " count(DISTINCT fb.user_key) FILTER (WHERE fb.value < 0)::int,"
            " count(DISTINCT fb.user_key) FILTER (WHERE fb.value > 0)::int"
            " FROM findings f JOIN reviews r ON r.id = f.review_id JOIN feedback fb ON fb.finding_id = f.id"
            f" WHERE r.project = %s AND fb.value <> 0 AND {INDEPENDENT}"
            " GROUP BY GROUPING SETS ((f.rule), (f.path))",
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


def people_by_kind(db: Database, *, project: str) -> dict[str, tuple[int, int]]:
    """Kind of finding (`agent.finding_kinds.vote_key`) → (people who voted 👎, people who voted 👍) on
    this project's findings: the team votes the strategy prompt shows. A person counts once per kind
    and side, however many findings of that kind they voted on."""
    with connection(db) as conn:
        rows = conn.execute(
            "SELECT DISTINCT f.rule, f.title, fb.user_key, fb.value > 0"
            " FROM findings f JOIN reviews r ON r.id = f.review_id JOIN feedback fb ON fb.finding_id = f.id"
            f" WHERE r.project = %s AND fb.value <> 0 AND {INDEPENDENT}",
            (project,),
        ).fetchall()
    people: dict[str, tuple[set[str], set[str]]] = {}
    for rule, title, user_key, up in rows:
        if not rule:
            continue
        down_people, up_people = people.setdefault(vote_key(rule=str(rule), title=str(title or "")), (set(), set()))
        (up_people if up else down_people).add(str(user_key))
    return {kind: (len(down_people), len(up_people)) for kind, (down_people, up_people) in people.items()}


def rejected_fingerprints(db: Database, *, project: str, mr_iid: int | None = None) -> dict[str, int]:
    """Fingerprint → people whose latest vote on it is 👎, where more people reject it than accept it.

    An author's 👎 on their own merge request counts on that merge request (`mr_iid`) only.
    """
    with connection(db) as conn:
        rows = conn.execute(
            "WITH latest AS ("
            " SELECT DISTINCT ON (f.fingerprint, fb.user_key) f.fingerprint, fb.value"
            " FROM findings f JOIN reviews r ON r.id = f.review_id JOIN feedback fb ON fb.finding_id = f.id"
            " WHERE r.project = %(project)s AND fb.value <> 0"
            f" AND ({INDEPENDENT} OR r.mr_iid IS NOT DISTINCT FROM %(mr_iid)s)"
            " ORDER BY f.fingerprint, fb.user_key, fb.updated_at DESC, fb.id DESC)"
            " SELECT fingerprint, count(*) FILTER (WHERE value < 0)::int FROM latest"
            " GROUP BY fingerprint HAVING sum(value) < 0",
            {"project": project, "mr_iid": mr_iid},
        ).fetchall()
    return {str(fp): int(people) for fp, people in rows}


def standings(db: Database, *, project: str | None = None) -> dict[tuple[str, str], Standing]:
    """(reviewer, category) → findings accepted (net vote > 0) and rejected (net vote < 0), and the
    people who rejected them; authors' 👎 on their own merge requests left out."""
    with connection(db) as conn:
        rows = conn.execute(
            "WITH votes AS ("
            " SELECT f.id, f.reviewer, f.category, fb.user_key, fb.value"
            " FROM findings f JOIN reviews r ON r.id = f.review_id JOIN feedback fb ON fb.finding_id = f.id"
            f" WHERE (%(project)s::text IS NULL OR r.project = %(project)s) AND fb.value <> 0 AND {INDEPENDENT}),"
            " scored AS (SELECT id, sum(value) AS score FROM votes GROUP BY id)"
            " SELECT v.reviewer, v.category,"
            " count(DISTINCT v.id) FILTER (WHERE s.score > 0)::int,"
            " count(DISTINCT v.id) FILTER (WHERE s.score < 0)::int,"
            " count(DISTINCT v.user_key) FILTER (WHERE s.score < 0 AND v.value < 0)::int"
            " FROM votes v JOIN scored s ON s.id = v.id GROUP BY v.reviewer, v.category",
            {"project": project},
        ).fetchall()
    return {
        (str(reviewer), str(category)): Standing(int(acc), int(rej), int(people))
        for reviewer, category, acc, rej, people in rows
        if acc or rej
    }
