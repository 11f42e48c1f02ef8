"""POST /api/v1/findings/{id}/feedback: a vote (and comment) through the API, one per token, latest wins.

A token is one voter, whatever `user` it sends: that name is stored beside the vote (`claimed_user`)
for people to read, and counts as nobody (issue 21: one scoped token varying `user` was three people).

The body is read only after the bearer token was checked (a dependency, resolved before the route
reads anything), and the body-limit middleware (api/body_limit.py) bounds it: a stranger can make
the server neither read nor parse a large body.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, status
from pydantic import ValidationError

from api.deps import ApiClientDep, ConnectionDep
from api.review_reads import store_api_vote, token_voter
from api.schemas import FeedbackIn, FeedbackOut

router = APIRouter(prefix="/api/v1/findings", tags=["feedback"])
JSON_TYPES = ("application/json",)
# the body is parsed in the route, so its schema is declared for the OpenAPI document by hand
FEEDBACK_BODY = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": FeedbackIn.model_json_schema()}}}
}


async def read_vote(request: Request) -> FeedbackIn:
    kind = request.headers.get("content-type", "application/json").partition(";")[0].strip().lower()
    if kind not in JSON_TYPES and not kind.endswith("+json"):
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "expected an application/json body")
    body = await request.body()
    try:
        # pydantic's own JSON parser: deep nesting is a validation error ("recursion limit"), not a crash
        return FeedbackIn.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"{where}: {first['msg']}" if where else first["msg"]
        ) from exc


@router.post("/{finding_id}/feedback", openapi_extra=FEEDBACK_BODY)
async def post_feedback(finding_id: int, request: Request, client: ApiClientDep, conn: ConnectionDep) -> FeedbackOut:
    body = await read_vote(request)  # after `client`: authentication before the body is read
    # one token is one person (issue 21): the `user` it names is recorded, never counted as someone else
    user_key = token_voter(client.name)
    async with conn.transaction():
        # a finding outside the token's projects is "not found", as the read API answers for its review
        stored = await store_api_vote(
            conn,
            finding_id=finding_id,
            user_key=user_key,
            claimed_user=body.user,
            value=body.value,
            comment=body.comment,
            scope=client.project_list,
        )
    if stored is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"finding {finding_id} not found")
    return stored
