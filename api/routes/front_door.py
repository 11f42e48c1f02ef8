"""`GET /`: a person who opens the server's address in a browser lands on the dashboard.

Everything else at the root is an API answering JSON; the bare address is the one URL people type.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

router = APIRouter(include_in_schema=False)


@router.get("/")
async def front_door(request: Request) -> RedirectResponse:
    # behind a proxy that mounts us under a path prefix, the dashboard is under that prefix too
    return RedirectResponse(f"{request.scope.get('root_path', '')}/dashboard")
