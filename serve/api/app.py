"""The app builder: one FastAPI app from one config, with no global state.

Tests run it under uvicorn in-process; each Serve replica builds its own from the same config (see `deploy.py`).
Every refusal happens before the first call that could change a run, so a refused request changes nothing.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from jr2ray.run import telemetry
from jr2ray.run.errors import RunError
from jr2ray.settings import load_settings

from . import refusals
from .config import VERSION, ApiConfig
from .context import ApiContext, is_ray_unavailable
from .docs import add_docs
from .middleware import AuthMiddleware, BodyLimitMiddleware, HostMiddleware, TraceMiddleware
from .refusals import NotLive
from .routes import ROUTERS
from .routes.console import mount_static
from .schemas import COMMON

DESCRIPTION = ("Runs of statechart workflows on Ray. Send `Authorization: Bearer <token>` (printed by `jr2ray up`, "
               "stored in $JR2RAY_HOME/token).")


def build_app(config: ApiConfig | None = None) -> FastAPI:
    """One API app. `config` defaults to jr2ray's settings (see `ApiConfig.from_settings`)."""
    if config is None or not config.home:  # the replica's own settings, read once here, fill what was not given
        settings = load_settings()
        config = (ApiConfig.from_settings(settings) if config is None
                  else config.model_copy(update={"home": str(settings.home_dir(create=False))}))
    ctx = ApiContext(config)
    app = FastAPI(title="jr2ray", version=VERSION, responses=COMMON, description=DESCRIPTION,
                  docs_url=None, redoc_url=None)
    app.state.ctx = ctx
    if config.home:  # always, after the fill above
        telemetry.setup_in_actor("api", config.home, on=config.telemetry)
    _add_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    mount_static(app)
    add_docs(app)
    app.add_middleware(BodyLimitMiddleware, limit=ctx.config.max_body)
    app.add_middleware(AuthMiddleware, ctx=ctx)
    app.add_middleware(HostMiddleware, hosts=ctx.config.hosts)  # added last: runs first, on every response
    app.add_middleware(TraceMiddleware)  # outermost: a request's span covers its refusals too
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Turn the errors routes raise into their status and reason (both are worded in `refusals`)."""

    def answer(refusal: refusals.Refusal) -> JSONResponse:
        telemetry.refusal(refusal.status, refusal.detail)
        return JSONResponse(refusal.body(), status_code=refusal.status, headers=refusal.headers())

    @app.exception_handler(RequestValidationError)
    async def on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return answer(refusals.invalid_body(exc))

    @app.exception_handler(RunError)
    async def on_run_error(_: Request, exc: RunError) -> JSONResponse:
        return answer(refusals.run_error(exc))

    @app.exception_handler(Exception)
    async def on_anything_else(_: Request, exc: Exception) -> JSONResponse:
        """Ray not answering (an actor restarting, the GCS away) is a 503 to retry; anything else a JSON 500."""
        if is_ray_unavailable(exc):
            return answer(refusals.run_error(refusals.run_unavailable(type(exc).__name__)))
        return answer(refusals.unexpected(exc))

    @app.exception_handler(NotLive)
    async def on_not_live(request: Request, exc: NotLive) -> JSONResponse:
        return answer(refusals.not_live(str(exc), at_gate="/gates/" in request.url.path))
