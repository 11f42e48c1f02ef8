"""Reading reviews for the API, and storing votes that arrive through it."""

from __future__ import annotations

from collections import defaultdict

from api.db import DbConnection
from api.schemas import FeedbackOut, FindingOut, ReviewDetail, ReviewPage, ReviewSummary

LIST_SQL = """
SELECT r.id, r.source, r.project, r.mr_iid, r.title, r.head_sha, r.status, r.strategy_source,
       r.is_shadow, r.cost_tokens, r.created_at, r.finished_at,
       (SELECT count(*) FROM findings f WHERE f.review_id = r.id) AS findings,
       (SELECT count(*) FROM findings f WHERE f.review_id = r.id AND f.verdict = 'REAL') AS findings_real
  FROM reviews r
 WHERE (%(project)s::text IS NULL OR r.project = %(project)s)
   AND (%(mr_iid)s::int IS NULL OR r.mr_iid = %(mr_iid)s)
   AND (%(scope)s::text[] IS NULL OR r.project = ANY(%(scope)s))
 ORDER BY r.id DESC
 LIMIT %(limit)s OFFSET %(offset)s
"""
COUNT_SQL = """
SELECT count(*) AS n FROM reviews r
 WHERE (%(project)s::text IS NULL OR r.project = %(project)s)
   AND (%(mr_iid)s::int IS NULL OR r.mr_iid = %(mr_iid)s)
   AND (%(scope)s::text[] IS NULL OR r.project = ANY(%(scope)s))
"""


async def list_reviews(
    conn: DbConnection,
    *,
    limit: int,
    offset: int,
    project: str | None = None,
    mr_iid: int | None = None,
    scope: list[str] | None = None,
) -> ReviewPage:
    """A page of reviews, newest first; `scope` (a token's projects, None: all) bounds what is seen."""
    params = {"project": project, "mr_iid": mr_iid, "limit": limit, "offset": offset, "scope": scope}
    cur = await conn.execute(LIST_SQL, params)
    items = [ReviewSummary.model_validate(row) for row in await cur.fetchall()]
    cur = await conn.execute(COUNT_SQL, params)
    row = await cur.fetchone()
    return ReviewPage(items=items, total=int(row["n"]) if row else 0, limit=limit, offset=offset)


async def get_review(conn: DbConnection, review_id: int, *, scope: list[str] | None = None) -> ReviewDetail | None:
    """The review with its findings and votes; None when there is none, or it is outside `scope`
    (the same answer, so review ids tell a scoped token nothing about other projects)."""
    cur = await conn.execute(
        "SELECT * FROM reviews WHERE id = %s AND (%s::text[] IS NULL OR project = ANY(%s))",
        (review_id, scope, scope),
    )
    review = await cur.fetchone()
    if review is None:
        return None
    cur = await conn.execute(
        "SELECT fb.* FROM feedback fb JOIN findings f ON f.id = fb.finding_id WHERE f.review_id = %s ORDER BY fb.id",
        (review_id,),
    )
    votes: dict[int, list[FeedbackOut]] = defaultdict(list)
    for row in await cur.fetchall():
        votes[int(row["finding_id"])].append(FeedbackOut.model_validate(row))
    cur = await conn.execute("SELECT * FROM findings WHERE review_id = %s ORDER BY id", (review_id,))
    findings = [
        FindingOut.model_validate({**row, "feedback": votes.get(int(row["id"]), [])}) for row in await cur.fetchall()
    ]
    return ReviewDetail.model_validate({**review, "findings": findings})


def token_voter(name: str) -> str:
    """The voter an API token is, through the API and the dashboard alike: one person per token."""
    return f"token:{name}"


async def store_api_vote(
    conn: DbConnection,
    *,
    finding_id: int,
    user_key: str,
    value: int,
    comment: str | None,
    claimed_user: str | None = None,
    scope: list[str] | None = None,
) -> FeedbackOut | None:
    """Upsert one vote per (finding, voter); None (nothing stored) when the finding does not exist or
    its review's project is outside `scope`: a scoped token cannot tell the two apart. `claimed_user`
    (who the token says voted) is recorded with the vote and identifies no one."""
    cur = await conn.execute(
        "SELECT 1 FROM findings f JOIN reviews r ON r.id = f.review_id"
        " WHERE f.id = %s AND (%s::text[] IS NULL OR r.project = ANY(%s))",
        (finding_id, scope, scope),
    )
    if await cur.fetchone() is None:
        return None
    cur = await conn.execute(
        """
        INSERT INTO feedback (finding_id, user_key, source, value, comment, claimed_user)
        VALUES (%s, %s, 'api', %s, %s, %s)
        ON CONFLICT (finding_id, user_key) DO UPDATE SET
            value = EXCLUDED.value, source = 'api', comment = coalesce(EXCLUDED.comment, feedback.comment),
            claimed_user = EXCLUDED.claimed_user, updated_at = now()
        RETURNING *
        """,
        (finding_id, user_key, value, comment, claimed_user),
    )
    row = await cur.fetchone()
    return FeedbackOut.model_validate(row) if row else None
