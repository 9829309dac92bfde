"""The API on Ray Serve: one ingress deployment, a builder that serve configs name, and `deploy_api` for `up`.

A serve config (KubeRay's `serveConfigV2`, `serve run`, `serve deploy`) names `serve.api:build_serve_app` with
optional `args` (`ServeArgs`). Ray's loader calls it with those args and gets an `Application`. Each replica then
reads jr2ray's settings from its own environment (the app's `runtime_env` and the node's), so a secret such as
JR2RAY_TOKEN never travels in the deployment's arguments. `jr2ray up` passes a whole `ApiConfig` instead.
"""

# No `from __future__ import annotations` here: Ray reads the builder's parameter annotation at run time to validate
# the config's `args` into `ServeArgs`.

import functools
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from .app import build_app
from .config import MAX_BODY, ApiConfig

if TYPE_CHECKING:
    from ray.serve import Application

APP_NAME = "jr2ray"
DEPLOYMENT_NAME = "jr2ray-api"
BUILDER_IMPORT_PATH = "serve.api:build_serve_app"


class ServeArgs(BaseModel):
    """The `args` a serve config may give the API app; anything unset comes from the replica's settings."""

    model_config = ConfigDict(extra="forbid")

    home: str | None = Field(default=None, description="JR2RAY_HOME (the journal and token live there).")
    store: str | None = None
    launcher: str | None = None
    workflows: list[str] | None = Field(default=None, description="Workflow modules to serve beside workflows/ and "
                                        "the jr2ray.workflows entry points.")
    poll_s: float = 0.3
    keepalive_s: float = 10.0
    max_body: int = MAX_BODY


def replica_config(config: dict[str, Any] | None, overrides: dict[str, Any] | None) -> ApiConfig:
    """A whole config when `up` gave one; else the replica's settings with the serve config's args on top."""
    if config is not None:
        return ApiConfig.model_validate(config)
    return ApiConfig.from_settings(**(overrides or {}))


@functools.cache
def api_deployment() -> Any:
    """The Serve deployment (made on first use: importing this module needs no Ray)."""
    from ray import serve

    @serve.deployment(name=DEPLOYMENT_NAME, num_replicas=1, ray_actor_options={"num_cpus": 0},
                      max_ongoing_requests=1000)
    @serve.ingress()
    class ApiDeployment:
        """Each replica builds its own app (late-bound ingress), so no FastAPI object is pickled."""

        def __init__(self, config: dict[str, Any] | None = None,
                     overrides: dict[str, Any] | None = None) -> None:
            self.config = replica_config(config, overrides)

        def __serve_build_asgi_app__(self) -> FastAPI:
            return build_app(self.config)

    return ApiDeployment


def build_serve_app(args: ServeArgs) -> "Application":
    """The builder a serve config names (`import_path: serve.api:build_serve_app`)."""
    if not isinstance(args, ServeArgs):  # called by hand with a dict
        args = ServeArgs.model_validate(args or {})
    overrides = args.model_dump(exclude_unset=True)
    app: Application = api_deployment().bind(overrides=overrides)
    return app


def deploy_api(config: ApiConfig, host: str = "127.0.0.1", port: int = 8000, name: str = APP_NAME) -> str:
    """Start Serve's HTTP proxy (if needed) and deploy the API at `/` on the initialised Ray; returns its URL."""
    from ray import serve

    from serve.llm import serve_http_port

    serve.start(http_options={"host": host, "port": port})
    port = serve_http_port(default=port)  # a Serve already running keeps its own port: report the real one
    serve.run(api_deployment().bind(config=config.model_dump()), name=name, route_prefix="/", blocking=False)
    return f"http://{host}:{port}"
