"""POST /api/v1/findings/{id}/feedback: a vote (and comment) through the API, one per user, latest wins."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from api.deps import ApiClientDep, ConnectionDep
from api.review_reads import store_api_vote
from api.schemas import FeedbackIn, FeedbackOut

router = APIRouter(prefix="/api/v1/findings", tags=["feedback"])


@router.post("/{finding_id}/feedback")
async def post_feedback(finding_id: int, body: FeedbackIn, client: ApiClientDep, conn: ConnectionDep) -> FeedbackOut:
    # the token names the integration; `user` names the person when one token serves several
    user_key = f"api:{client}" if body.user is None else f"api:{client}:{body.user}"
    async with conn.transaction():
        stored = await store_api_vote(
            conn, finding_id=finding_id, user_key=user_key, value=body.value, comment=body.comment
        )
    if stored is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"finding {finding_id} not found")
    return stored
