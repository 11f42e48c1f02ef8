"""The read API: reviews with their findings, verdicts, reasons and feedback."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status

from api.deps import ApiClientDep, ConnectionDep
from api.review_reads import get_review, list_reviews
from api.schemas import ReviewDetail, ReviewPage

router = APIRouter(prefix="/api/v1/reviews", tags=["reviews"])
MAX_PAGE = 100
# Postgres' column types, checked here so that an out-of-range value is a 422, not a 500 from the
# driver: reviews.id and OFFSET are bigint, mr_iid is integer
MAX_BIGINT = 2**63 - 1
MAX_INT = 2**31 - 1
MAX_PROJECT_CHARS = 512  # a GitLab path is at most 255 characters per level, a numeric id far fewer
NO_NUL = r"^[^\x00]*$"  # Postgres text cannot hold U+0000


@router.get("")
async def reviews(
    client: ApiClientDep,
    conn: ConnectionDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    offset: Annotated[int, Query(ge=0, le=MAX_BIGINT)] = 0,
    project: Annotated[str | None, Query(max_length=MAX_PROJECT_CHARS, pattern=NO_NUL)] = None,
    mr_iid: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
) -> ReviewPage:
    return await list_reviews(
        conn, limit=limit, offset=offset, project=project, mr_iid=mr_iid, scope=client.project_list
    )


@router.get("/{review_id}")
async def review(
    review_id: Annotated[int, Path(ge=0, le=MAX_BIGINT)], client: ApiClientDep, conn: ConnectionDep
) -> ReviewDetail:
    # outside the token's projects reads as absent (404, not 403): ids are no oracle for other projects
    found = await get_review(conn, review_id, scope=client.project_list)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"review {review_id} not found")
    return found
