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
 ORDER BY r.id DESC
 LIMIT %(limit)s OFFSET %(offset)s
"""
COUNT_SQL = """
SELECT count(*) AS n FROM reviews r
 WHERE (%(project)s::text IS NULL OR r.project = %(project)s)
   AND (%(mr_iid)s::int IS NULL OR r.mr_iid = %(mr_iid)s)
"""


async def list_reviews(
    conn: DbConnection, *, limit: int, offset: int, project: str | None = None, mr_iid: int | None = None
) -> ReviewPage:
    params = {"project": project, "mr_iid": mr_iid, "limit": limit, "offset": offset}
    cur = await conn.execute(LIST_SQL, params)
    items = [ReviewSummary.model_validate(row) for row in await cur.fetchall()]
    cur = await conn.execute(COUNT_SQL, params)
    row = await cur.fetchone()
    return ReviewPage(items=items, total=int(row["n"]) if row else 0, limit=limit, offset=offset)


async def get_review(conn: DbConnection, review_id: int) -> ReviewDetail | None:
    cur = await conn.execute("SELECT * FROM reviews WHERE id = %s", (review_id,))
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


async def store_api_vote(
    conn: DbConnection, *, finding_id: int, user_key: str, value: int, comment: str | None
) -> FeedbackOut | None:
    """Upsert one vote per (finding, user); None when the finding does not exist."""
    cur = await conn.execute("SELECT 1 FROM findings WHERE id = %s", (finding_id,))
    if await cur.fetchone() is None:
        return None
    cur = await conn.execute(
        """
        INSERT INTO feedback (finding_id, user_key, source, value, comment) VALUES (%s, %s, 'api', %s, %s)
        ON CONFLICT (finding_id, user_key) DO UPDATE SET
            value = EXCLUDED.value, source = 'api', comment = coalesce(EXCLUDED.comment, feedback.comment),
            updated_at = now()
        RETURNING *
        """,
        (finding_id, user_key, value, comment),
    )
    row = await cur.fetchone()
    return FeedbackOut.model_validate(row) if row else None
