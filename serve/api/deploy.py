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
# Serve counts a replica (and a proxy) dead after three failed health checks in a row, one per period: with Serve's
# 10 s a killed replica or proxy is replaced only ~30 s later. A check is one small actor call, so 1 s costs little
# and brings detection to ~3 s; the restart itself is Ray's (README has the figures).
HEALTH_CHECK_PERIOD_S = 1.0
PROXY_HEALTH_ENV = "RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S"


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


def replica_grpc_on_loopback() -> None:
    """On a loopback-only node, the replica's inter-deployment gRPC server binds 127.0.0.1 as well.

    Ray Serve starts that server on "[::]:0" (every interface) right after the replica's constructor returns, with
    no setting to change it; a single-machine head listens on loopback only (`jr2ray up`), so there the address is
    swapped before the server starts. On a cluster node the replica is left as Serve made it.
    """
    import ray
    from ray.serve._private import replica

    from jr2ray.run.loopback import is_loopback_address

    if not is_loopback_address(ray.util.get_node_ip_address()):
        return
    add_port = getattr(replica.add_port_to_grpc_server, "jr2ray_wrapped", replica.add_port_to_grpc_server)

    def on_loopback(server: Any, address: str) -> int:
        return int(add_port(server, "127.0.0.1:" + address.removeprefix("[::]:") if address.startswith("[::]:")
                            else address))

    on_loopback.jr2ray_wrapped = add_port  # type: ignore[attr-defined]
    replica.add_port_to_grpc_server = on_loopback


@functools.cache
def api_deployment() -> Any:
    """The Serve deployment (made on first use: importing this module needs no Ray)."""
    from ray import serve

    @serve.deployment(name=DEPLOYMENT_NAME, num_replicas=1, ray_actor_options={"num_cpus": 0},
                      max_ongoing_requests=1000, health_check_period_s=HEALTH_CHECK_PERIOD_S)
    @serve.ingress()
    class ApiDeployment:
        """Each replica builds its own app (late-bound ingress), so no FastAPI object is pickled."""

        def __init__(self, config: dict[str, Any] | None = None,
                     overrides: dict[str, Any] | None = None) -> None:
            self.config = replica_config(config, overrides)
            replica_grpc_on_loopback()

        def __serve_build_asgi_app__(self) -> FastAPI:
            return build_app(self.config)

    return ApiDeployment


def build_serve_app(args: ServeArgs) -> "Application":
    """The builder a serve config names (`import_path: serve.api:build_serve_app`)."""
    if not isinstance(args, ServeArgs):  # called by hand with a dict
        args = ServeArgs.model_validate(args or {})
    overrides = args.model_dump(exclude_unset=True)
    store = replica_config(None, overrides).store  # what the replicas will open: the same settings, the same store
    app: Application = placed(api_deployment(), store).bind(overrides=overrides)
    return app


def placed(deployment: Any, store: str | None) -> Any:
    """With SQLite the replicas read the journals on the head's disk, so they run on the head; a database store
    lets them run on any node."""
    from jr2ray.run.placement import service_options
    from jr2ray.run.store import is_shared

    if store is not None and is_shared(store):
        return deployment
    return deployment.options(ray_actor_options=service_options(False))


def with_bound_host(config: ApiConfig, host: str) -> ApiConfig:
    """The address the proxy binds is a name the API answers to; on every interface, so is this machine's name."""
    import socket

    extra = [socket.gethostname(), socket.getfqdn()] if host in ("0.0.0.0", "::") else [host]
    return config.model_copy(update={"hosts": [*config.hosts, *(h for h in extra if h not in config.hosts)]})


def start_serve(host: str, port: int, request_timeout_s: float | None = None) -> None:
    """Start Serve (if it is not running) with jr2ray's middleware in its HTTP proxy (serve/api/proxy.py).

    The middleware bounds each of the API's requests (setting `api_request_timeout_s`), so none waits without end for
    a replica that is restarting, and answers the proxy's own errors as the API's JSON 503 with Retry-After. Serve
    loads it from an environment variable that must reach the proxy actor: it is set in the controller's runtime
    env, which the proxies the controller starts inherit. A Serve already running keeps the options it was started
    with (Serve logs that it does). The controller also checks the proxies' health every `HEALTH_CHECK_PERIOD_S`
    (Serve reads that period from the controller's environment), so a dead proxy is restarted in seconds.
    """
    from ray import serve

    from .proxy import proxy_env

    env = {**proxy_env(request_timeout_s), PROXY_HEALTH_ENV: f"{HEALTH_CHECK_PERIOD_S:g}"}  # the controller reads it
    serve.start(http_options={"host": host, "port": port},  # no timeout given: the proxy reads its settings'
                controller_options={"runtime_env": {"env_vars": env}})


def serve_http_port(default: int) -> int:
    """The port Serve's proxies really listen on: a Serve already running keeps its own http_options."""
    try:
        from ray.serve.context import _get_global_client

        client = _get_global_client()
        port = getattr(getattr(client, "http_config", None), "port", None)
        return int(port) if port else default
    except Exception:  # noqa: BLE001 - private API moved: fall back to what we asked for
        return default


def deploy_api(config: ApiConfig, host: str = "127.0.0.1", port: int = 8000, name: str = APP_NAME,
               request_timeout_s: float | None = None) -> str:
    """Start Serve's HTTP proxy (if needed) and deploy the API at `/` on the initialised Ray; returns its URL."""
    from ray import serve

    start_serve(host, port, request_timeout_s)
    port = serve_http_port(default=port)  # a Serve already running keeps its own port: report the real one
    config = with_bound_host(config, host)
    deployment = placed(api_deployment(), config.store)
    serve.run(deployment.bind(config=config.model_dump()), name=name, route_prefix="/", blocking=False)
    return f"http://{host}:{port}"
