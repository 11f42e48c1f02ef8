"""The read API: reviews with their findings, verdicts, reasons and feedback."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from api.deps import ApiClientDep, ConnectionDep
from api.review_reads import get_review, list_reviews
from api.schemas import ReviewDetail, ReviewPage

router = APIRouter(prefix="/api/v1/reviews", tags=["reviews"])
MAX_PAGE = 100


@router.get("")
async def reviews(
    client: ApiClientDep,
    conn: ConnectionDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    offset: Annotated[int, Query(ge=0)] = 0,
    project: str | None = None,
    mr_iid: int | None = None,
) -> ReviewPage:
    return await list_reviews(
        conn, limit=limit, offset=offset, project=project, mr_iid=mr_iid, scope=client.project_list
    )


@router.get("/{review_id}")
async def review(review_id: int, client: ApiClientDep, conn: ConnectionDep) -> ReviewDetail:
    # outside the token's projects reads as absent (404, not 403): ids are no oracle for other projects
    found = await get_review(conn, review_id, scope=client.project_list)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"review {review_id} not found")
    return found
