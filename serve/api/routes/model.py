"""`/v1/...` on the API: the answer a model client gets when it calls this API instead of a model server.

`JR2RAY_LOCAL_BASE_URL` defaults to http://127.0.0.1:8000/v1, which is this API's own port when `jr2ray up` ran
without `--llm` (that flag serves the model under /llm/v1). A Harness calling it would get a 401 for its "none" key
and fault with a reason no one can act on; this route answers a 404 that names the missing model endpoint and the
two ways to provide one, and that sentence becomes the Agent's fault reason in the run's error. It needs no token
(the path holds no run data), and it is not part of the API's schema.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .. import refusals

router = APIRouter()
PREFIX = "/v1"


@router.api_route(PREFIX + "/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
                  include_in_schema=False)
async def no_model_here(request: Request, rest: str) -> JSONResponse:
    """The API's `detail`, and the same sentence where an OpenAI client reads it (`error.message`)."""
    refusal = refusals.no_model_here(f"{PREFIX}/{rest}", str(request.base_url).rstrip("/"))
    error = {"message": refusal.detail, "type": "not_found_error", "code": "no_model_served"}
    return JSONResponse({**refusal.body(), "error": error}, status_code=refusal.status)
