"""The LLM app's builder, and deploying it from a driver.

`build_app` is what a serve config names (`import_path: serve.llm:build_app`): Ray Serve's loader calls it on the
cluster (`serve run`, `serve deploy`, KubeRay's serveConfigV2) with the app's `args`. `deploy` builds the same app in
a driver on an initialised Ray and waits until it answers; `undeploy` takes it down.

Serve itself (its HTTP proxy, with the API's middleware) is started the API's way, `serve.api.deploy.start_serve`,
so the two apps share one proxy whichever of them is deployed first. Ray, Serve and the API's module are imported
inside the functions: importing `serve.llm` needs none of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from jr2ray.settings import Settings, load_settings

from .configs import (
    DEFAULT_APP_NAME,
    DEFAULT_HOST,
    DEFAULT_PORT,
    TINY_SOURCE,
    LLMAppArgs,
    config_path,
    llm_application,
    model_ids,
    resolve_model_source,
    resolved_llm_configs,
)

if TYPE_CHECKING:
    from ray.serve.deployment import Application

BUILDER_IMPORT_PATH = "serve.llm:build_app"


def _coerce_args(source: str | Path | Mapping[str, Any] | LLMAppArgs) -> LLMAppArgs:
    if isinstance(source, LLMAppArgs):
        return source
    if isinstance(source, Mapping):
        return LLMAppArgs.model_validate(dict(source))
    return LLMAppArgs.model_validate(llm_application(source).args)


def build_app(profile_or_config_path: str | Path | Mapping[str, Any] | LLMAppArgs) -> Application:
    """Build the OpenAI-compatible LLM app.

    Takes a profile name (`cpu`, `gpu`), a serve config path, or the app's `args` mapping. The last form is what
    `serve run serve/config/cpu.yaml` (and KubeRay's serveConfigV2) calls through `import_path: serve.llm:build_app`;
    Serve's loader passes the args alone (one parameter), so the builder reads its process's settings here, once.
    """
    return app_for(profile_or_config_path, load_settings())


def app_for(profile_or_config_path: str | Path | Mapping[str, Any] | LLMAppArgs, settings: Settings) -> Application:
    """`build_app` with the caller's settings (the tiny model is built under their home): what `deploy` uses."""
    from ray.serve.llm import LLMConfig, build_openai_app

    args = _coerce_args(profile_or_config_path)
    llm_configs = [LLMConfig.model_validate(c) for c in resolved_llm_configs(args, settings)]
    serving: dict[str, Any] = {"llm_configs": llm_configs}
    if args.ingress_deployment_config:
        serving["ingress_deployment_config"] = args.ingress_deployment_config
    if args.ingress_cls_config:
        serving["ingress_cls_config"] = args.ingress_cls_config
    # Ray validates the dict as LLMServingArgs itself (and annotates the parameter as a dict).
    return build_openai_app(serving)


def base_url_for(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, route_prefix: str | None = "/") -> str:
    """The OpenAI base URL of an app served at `route_prefix`."""
    prefix = (route_prefix or "/").rstrip("/")
    return f"http://{host}:{port}{prefix}/v1"


def wait_ready(base_url: str, model: str, timeout_s: float = 900.0, poll_s: float = 1.0,
               progress: Callable[[str], None] | None = None, every_s: float = 15.0) -> float:
    """Poll `GET {base_url}/models` until `model` is listed; return the seconds waited.

    `progress` hears a line every `every_s` seconds with what the app is doing, so a slow start visibly moves.

    Why poll HTTP rather than trust `serve.run`: the proxy route and the engine come up separately, and only a listed
    model proves a request would reach a live engine.
    """
    start = time.monotonic()
    last = "no answer yet"
    told = start
    with httpx.Client(timeout=10.0, trust_env=False) as client:
        while True:
            if progress is not None and time.monotonic() - told >= every_s:
                told = time.monotonic()
                progress(f"  still starting ({told - start:.0f}s): {_serve_app_state() or last}")
            try:
                resp = client.get(f"{base_url}/models")
                if resp.status_code == 200 and model in {m.get("id") for m in resp.json().get("data", [])}:
                    return time.monotonic() - start
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
            except (httpx.HTTPError, ValueError) as exc:
                last = repr(exc)
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"{base_url} did not list model {model!r} within {timeout_s:.0f}s ({last})")
            time.sleep(poll_s)


def deploy(
    profile: str | Path = "cpu",
    *,
    settings: Settings,
    name: str | None = None,
    route_prefix: str | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    timeout_s: float = 900.0,
    progress: Callable[[str], None] | None = None,
    replicas: int | None = None,
    engine_kwargs: Mapping[str, Any] | None = None,
    kv_blocks: int | None = None,
) -> str:
    """Deploy the profile's LLM app on the already-initialised Ray, wait until it answers, return its base URL.

    `settings` are the driver's (the tiny model is built under their home). `replicas` overrides every model's
    `deployment_config.num_replicas` (the session-affinity check uses 2). `engine_kwargs` are laid over every model's
    (the admission check makes the KV cache small with `num_gpu_blocks_override`). `kv_blocks` gives each engine a
    cache of that many blocks (`small_cache`; `up --kv-blocks`).

    On a 2-core box call `ray.init(num_cpus=4)` first: the LLMServer replica takes 2 logical CPUs (replica + engine
    bundle) and the ingress 1, so 2 logical CPUs never schedule the ingress.
    """
    import ray
    from ray import serve

    say = progress or (lambda _msg: None)
    if not ray.is_initialized():
        raise RuntimeError("deploy() needs an initialised Ray (e.g. ray.init(num_cpus=4) on a 2-core machine)")
    app_entry = llm_application(profile)
    args = LLMAppArgs.model_validate(app_entry.args)
    if replicas is not None:
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, not {replicas}")
        for cfg in args.llm_configs:
            cfg.setdefault("deployment_config", {})["num_replicas"] = replicas
    for cfg in args.llm_configs:
        cfg.setdefault("engine_kwargs", {}).update(engine_kwargs or {})
        if kv_blocks:
            cfg["engine_kwargs"] = small_cache(cfg["engine_kwargs"], kv_blocks)
    app_name = name or app_entry.name
    prefix = route_prefix if route_prefix is not None else (app_entry.route_prefix or "/")

    for cfg in args.llm_configs:
        source = cfg.get("model_loading_config", {}).get("model_source")
        if source == TINY_SOURCE:
            resolve_model_source(source, settings, say)  # build now, in the driver, with progress shown

    start = time.monotonic()
    from serve.api.deploy import serve_http_port, start_serve

    start_serve(host, port)  # the same options as the API's, whichever of the two starts Serve
    port = serve_http_port(default=port)
    say(f"deploying {app_name!r} at {prefix} from {config_path(profile)}")
    serve.run(app_for(args, settings), name=app_name, route_prefix=prefix, blocking=False)
    url = base_url_for(host, port, prefix)
    for model in model_ids(args):
        wait_ready(url, model, timeout_s=max(1.0, timeout_s - (time.monotonic() - start)), progress=progress)
    engines = sum(int(c.get("deployment_config", {}).get("num_replicas", 1)) for c in args.llm_configs)
    # The model answers once one replica is up; with more, placements and affinity need them all.
    while running_replicas(app_name) < engines:
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{app_name!r}: fewer than {engines} LLM replicas running within {timeout_s:.0f}s "
                               f"({_serve_app_state()})")
        time.sleep(2.0)
    say(f"LLM app ready at {url} after {time.monotonic() - start:.1f}s")
    if settings.turn_admission:  # the runs' Harnesses will look for this app's budget: create it from vLLM's figure
        from jr2ray.run.actor import NAMESPACE

        from .admission import ensure_kv_budget

        _, capacity = ensure_kv_budget(app_name, settings, namespace=NAMESPACE, engines=engines)
        say(f"Turn admission: the KV budget of {app_name!r} is {capacity} tokens (read from vLLM)")
    return url


def small_cache(engine_kwargs: Mapping[str, Any], blocks: int) -> dict[str, Any]:
    """The engine's kwargs with a KV cache of `blocks` blocks (vLLM's `num_gpu_blocks_override`), and its context
    cut to what that cache serves: vLLM keeps one block back, so a prompt fits in (blocks - 1) x block_size."""
    if blocks < 2:
        raise ValueError(f"a KV cache of {blocks} block(s) serves no prompt: give at least 2")
    block = int(engine_kwargs.get("block_size") or 16)  # vLLM's default block size
    fits = (blocks - 1) * block
    longest = engine_kwargs.get("max_model_len")
    return {**engine_kwargs, "num_gpu_blocks_override": blocks,
            "max_model_len": fits if longest is None else min(int(longest), fits)}


def running_replicas(app_name: str) -> int:
    """How many LLMServer replicas of the app Serve reports RUNNING."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return 0
    return sum(n for name, dep in app.deployments.items() if name.startswith("LLMServer")
               for state, n in dep.replica_states.items() if str(getattr(state, "value", state)) == "RUNNING")


def _serve_app_state() -> str | None:
    """A one-line view of Serve's applications and replica states, e.g. `llm: DEPLOYING (LLMServer:tiny STARTING)`."""
    try:
        from ray import serve

        parts = []
        for name, app in serve.status().applications.items():
            deps = []
            for d, dep in app.deployments.items():
                states = "/".join(f"{getattr(k, 'value', k)}x{n}" for k, n in dep.replica_states.items())
                deps.append(f"{d} {states}")
            deps_text = ", ".join(deps)
            parts.append(f"{name}: {getattr(app.status, 'value', app.status)} ({deps_text})")
        return "; ".join(parts) or None
    except Exception:  # noqa: BLE001 - only a progress hint
        return None


def undeploy(name: str = DEFAULT_APP_NAME) -> None:
    """Delete the LLM app (the engine replicas go with it); Serve itself keeps running for other apps."""
    from ray import serve

    serve.delete(name)
