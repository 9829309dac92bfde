"""The Ray Serve LLM app (S1): vLLM behind Ray Serve's OpenAI-compatible ingress.

Why this module exists: jr2ray's claim (a fixed tools block keeps the prefix cache hitting) is measured straight from
vLLM, so the engine must run with prefix caching on and report `usage.prompt_tokens_details.cached_tokens`. One YAML
file per profile (`serve/config/cpu.yaml`, `serve/config/gpu.yaml`) is the single source of the engine settings; it is
`serve run`-compatible and is also what `build_app` and `deploy` read, so dev, CI and the home-lab run the same config.

Session affinity: Ray Serve 2.60 ships `ray.serve.experimental.consistent_hash_router.ConsistentHashRouter`, which pins
every request carrying the same `x-session-id` header to one replica (the OpenAI ingress forwards the header to the
LLMServer hop). The profiles route with it, and a Harness sends its conversation id in that header, so each
conversation's KV blocks stay on the replica that already holds them. `ray.serve.llm.request_router` also offers
`PrefixCacheAffinityRouter` (routes by prompt-text prefix match); see cluster/README.md for when to pick which.

Ray and Serve are imported lazily: the pure helpers here (`reusable_max`, config loading) stay cheap to import.
"""

from __future__ import annotations

import copy
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field

from jr2ray.settings import ENV_NAMES, load_settings

if TYPE_CHECKING:
    from ray.serve.deployment import Application

CONFIG_DIR = Path(__file__).resolve().parent / "config"
PROFILES: tuple[str, ...] = ("cpu", "gpu")

SESSION_HEADER = "x-session-id"
"""Ray Serve's default session-id header (env RAY_SERVE_SESSION_ID_HEADER_KEY changes it cluster-wide)."""

TINY_SOURCE = "jr2ray:tiny"
"""A `model_source` placeholder: the locally built tiny model (`jr2ray.tinymodel.ensure_tiny`)."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_APP_NAME = "llm"
DEFAULT_BLOCK = 32

BUILDER_IMPORT_PATH = "serve.llm:build_app"


# ---------------------------------------------------------------------------------------------------------------------
# Prefix-cache arithmetic (pure)
# ---------------------------------------------------------------------------------------------------------------------


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading token ids two prompts share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reusable_max(prompt_a_ids: Sequence[int], prompt_b_ids: Sequence[int], block: int = DEFAULT_BLOCK) -> int:
    """The most prompt tokens of B that vLLM can serve from the KV cache after it has seen A.

    vLLM caches whole blocks only, and always recomputes at least the last prompt token (it needs its logits), so the
    hit is the shared prefix capped at len(B) - 1, rounded down to a block. When B repeats A or extends it by a
    partial block, this is the closed form floor((shared - 1) / block) * block; it differs only when the shared
    prefix ends exactly on a block edge before the end of B (then that last full block is still a hit).
    """
    if block <= 0:
        raise ValueError("block must be positive")
    if not prompt_b_ids:
        return 0
    usable = min(common_prefix_len(prompt_a_ids, prompt_b_ids), len(prompt_b_ids) - 1)
    return (usable // block) * block


def reusable_per_request(
    requests: Sequence[tuple[Sequence[int] | None, Sequence[int] | None]], block: int = DEFAULT_BLOCK
) -> list[int | None]:
    """For each (prompt ids, generated ids) in send order: the most of its prompt the cache could serve.

    vLLM keeps the blocks of what it generated as well as the prompt, so an earlier request's cached sequence is its
    prompt plus its output minus the last sampled token (whose KV was never computed). None where ids are missing.
    """
    seen: list[list[int]] = []
    out: list[int | None] = []
    for prompt, generated in requests:
        if not prompt:
            out.append(None)
            continue
        out.append(max((reusable_max(prev, prompt, block) for prev in seen), default=0))
        seen.append(list(prompt) + list(generated or [])[:-1])
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Config (pydantic at the boundary)
# ---------------------------------------------------------------------------------------------------------------------


class LLMAppArgs(BaseModel):
    """The `args` of the LLM application in a serve config: what `ray.serve.llm.build_openai_app` takes.

    `model_source` may be the placeholder `jr2ray:tiny` (built on demand), a path with `~` or `$VARS`, or a hub id.
    """

    model_config = ConfigDict(extra="forbid")

    llm_configs: list[dict[str, Any]] = Field(min_length=1)
    ingress_deployment_config: dict[str, Any] = Field(default_factory=dict)
    ingress_cls_config: dict[str, Any] | None = None
    masking_caps: dict[str, int] | None = Field(
        default=None,
        description="Not the server's: the caps a Harness adds under masking for this profile's (random-weight) model.",
    )


class ServeApplication(BaseModel):
    """One entry of a serve config's `applications:` list (only the fields jr2ray reads)."""

    model_config = ConfigDict(extra="allow")

    name: str = DEFAULT_APP_NAME
    route_prefix: str | None = "/"
    import_path: str
    args: dict[str, Any] = Field(default_factory=dict)


class ServeConfigFile(BaseModel):
    """A `serve run`/`serve deploy` config file: jr2ray reads its `applications:` list."""

    model_config = ConfigDict(extra="allow")

    applications: list[ServeApplication] = Field(min_length=1)


def config_path(profile_or_path: str | Path) -> Path:
    """`cpu`/`gpu` name a file in serve/config/; anything else is taken as a path to a serve config YAML."""
    if isinstance(profile_or_path, str) and profile_or_path in PROFILES:
        return CONFIG_DIR / f"{profile_or_path}.yaml"
    path = Path(profile_or_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no serve config at {path} (profiles: {', '.join(PROFILES)})")
    return path


def load_serve_config(profile_or_path: str | Path) -> ServeConfigFile:
    """Parse and validate a profile's serve config file."""
    with config_path(profile_or_path).open() as fh:
        return ServeConfigFile.model_validate(yaml.safe_load(fh))


def llm_application(profile_or_path: str | Path) -> ServeApplication:
    """The application entry of a serve config that this module builds (import path `serve.llm:...`)."""
    cfg = load_serve_config(profile_or_path)
    for app in cfg.applications:
        if app.import_path.startswith("serve.llm:"):
            return app
    raise ValueError(f"{config_path(profile_or_path)} has no application built by serve.llm")


def resolve_model_source(source: str, progress: Callable[[str], None] | None = None) -> str:
    """Turn the config's model_source into something vLLM can load on this node."""
    if source == TINY_SOURCE:
        from jr2ray.tinymodel import ensure_tiny

        return str(ensure_tiny(progress))
    return os.path.expanduser(expand_env(source))


_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}"
                      r"|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)")


def expand_env(text: str, env: Mapping[str, str] | None = None) -> str:
    """Expand `$VAR`, `${VAR}` and `${VAR:-default}` (shell style); an unset variable without default stays as is."""
    env = os.environ if env is None else env  # the variables a config names are its own, not jr2ray's settings

    def sub(m: re.Match[str]) -> str:
        name = m.group("name") or m.group("bare")
        if name in env and (env[name] or m.group("default") is None):
            return env[name]
        if m.group("default") is not None:
            return m.group("default")
        return m.group(0)

    return _ENV_REF.sub(sub, text)


def resolved_llm_configs(args: LLMAppArgs, progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The llm_configs with model sources resolved (tiny model built if missing); the input is not modified."""
    out: list[dict[str, Any]] = []
    for raw in args.llm_configs:
        cfg = copy.deepcopy(raw)
        cfg.setdefault("log_engine_metrics", True)  # vLLM engine metrics beside jr2ray's, in any config
        loading = cfg.setdefault("model_loading_config", {})
        source = loading.get("model_source")
        if isinstance(source, str):
            loading["model_source"] = resolve_model_source(source, progress)
        out.append(cfg)
    return out


MASKING_CAPS_ENV = "JR2RAY_MASKING_CAPS"


def masking_caps_env(profile_or_path: str | Path) -> dict[str, str]:
    """The env a Run's Harness needs for this profile's masking caps: `{}` when the profile sets none."""
    caps = LLMAppArgs.model_validate(llm_application(profile_or_path).args).masking_caps
    return {MASKING_CAPS_ENV: json.dumps(caps, sort_keys=True)} if caps else {}


def model_ids(args: LLMAppArgs) -> list[str]:
    """The served model names (what clients pass as `model`)."""
    return [str(c["model_loading_config"]["model_id"]) for c in args.llm_configs]


# ---------------------------------------------------------------------------------------------------------------------
# Building and deploying
# ---------------------------------------------------------------------------------------------------------------------


def _coerce_args(source: str | Path | Mapping[str, Any] | LLMAppArgs) -> LLMAppArgs:
    if isinstance(source, LLMAppArgs):
        return source
    if isinstance(source, Mapping):
        return LLMAppArgs.model_validate(dict(source))
    return LLMAppArgs.model_validate(llm_application(source).args)


def build_app(profile_or_config_path: str | Path | Mapping[str, Any] | LLMAppArgs) -> Application:
    """Build the OpenAI-compatible LLM app.

    Takes a profile name (`cpu`, `gpu`), a serve config path, or the app's `args` mapping. The last form is what
    `serve run serve/config/cpu.yaml` (and KubeRay's serveConfigV2) calls through `import_path: serve.llm:build_app`.
    """
    from ray.serve.llm import LLMConfig, build_openai_app

    args = _coerce_args(profile_or_config_path)
    llm_configs = [LLMConfig.model_validate(c) for c in resolved_llm_configs(args)]
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
    name: str | None = None,
    route_prefix: str | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    timeout_s: float = 900.0,
    progress: Callable[[str], None] | None = None,
    replicas: int | None = None,
) -> str:
    """Deploy the profile's LLM app on the already-initialised Ray, wait until it answers, return its base URL.

    `replicas` overrides every model's `deployment_config.num_replicas` (the session-affinity check uses 2).

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
    app_name = name or app_entry.name
    prefix = route_prefix if route_prefix is not None else (app_entry.route_prefix or "/")

    for cfg in args.llm_configs:
        source = cfg.get("model_loading_config", {}).get("model_source")
        if source == TINY_SOURCE:
            resolve_model_source(source, say)  # build now, in the driver, with progress shown

    start = time.monotonic()
    from serve.api.deploy import start_serve

    start_serve(host, port)  # the same options as the API's, whichever of the two starts Serve
    port = serve_http_port(default=port)
    say(f"deploying {app_name!r} at {prefix} from {config_path(profile)}")
    serve.run(build_app(args), name=app_name, route_prefix=prefix, blocking=False)
    url = base_url_for(host, port, prefix)
    for model in model_ids(args):
        wait_ready(url, model, timeout_s=max(1.0, timeout_s - (time.monotonic() - start)), progress=progress)
    say(f"LLM app ready at {url} after {time.monotonic() - start:.1f}s")
    return url


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


def serve_http_port(default: int) -> int:
    """The port Serve's proxies really listen on: a Serve already running keeps its own http_options."""
    try:
        from ray.serve.context import _get_global_client

        client = _get_global_client()
        port = getattr(getattr(client, "http_config", None), "port", None)
        return int(port) if port else default
    except Exception:  # noqa: BLE001 - private API moved: fall back to what we asked for
        return default


def undeploy(name: str = DEFAULT_APP_NAME) -> None:
    """Delete the LLM app (the engine replicas go with it); Serve itself keeps running for other apps."""
    from ray import serve

    serve.delete(name)


# ---------------------------------------------------------------------------------------------------------------------
# vLLM prefix-cache counters
# ---------------------------------------------------------------------------------------------------------------------


class PrefixCacheCounters(BaseModel):
    """vLLM's cumulative prefix-cache counters (tokens), summed over replicas and engines.

    Under Ray Serve the engine exports them through Ray's metrics agent (names sanitised to
    `ray_vllm_prefix_cache_queries_total` / `ray_vllm_prefix_cache_hits_total`); the agent publishes on each node's
    metrics export port every few seconds, so they lag per-request `cached_tokens`, which stays the primary measure.
    """

    queries: float
    hits: float
    sources: list[str] = Field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def parse_prefix_cache_counters(text: str, model: str | None = None) -> tuple[float, float] | None:
    """Sum the prefix-cache query/hit counters in one Prometheus text page; None when the page has neither.

    Matches both the plain vLLM names (`vllm:prefix_cache_queries_total`) and Ray's sanitised export
    (`ray_vllm_prefix_cache_queries_total`); the `external_` (KV-connector) variants are left out.
    """
    found = False
    queries = hits = 0.0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name = m.group("name").replace(":", "_")
        if name.endswith("_created") or "external_prefix_cache" in name:
            continue
        if name.endswith("vllm_prefix_cache_queries_total") or name.endswith("vllm_prefix_cache_queries"):
            kind = "q"
        elif name.endswith("vllm_prefix_cache_hits_total") or name.endswith("vllm_prefix_cache_hits"):
            kind = "h"
        else:
            continue
        labels = {lm.group("key"): lm.group("value") for lm in _LABEL.finditer(m.group("labels") or "")}
        if model is not None and labels.get("model_name", model) != model:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        found = True
        if kind == "q":
            queries += value
        else:
            hits += value
    return (queries, hits) if found else None


METRICS_URLS_ENV = ENV_NAMES["vllm_metrics_urls"]
"""Comma-separated Prometheus URLs to read instead of asking Ray (e.g. from a process that is not a Ray driver)."""


def ray_metrics_urls() -> list[str]:
    """The Prometheus endpoints of every live Ray node's metrics agent (needs an initialised Ray).

    This node's own agent is addressed as 127.0.0.1 (it listens on all interfaces), so local reads stay on loopback.
    """
    import ray
    from ray.util import get_node_ip_address

    local_ip = get_node_ip_address()
    urls: list[str] = []
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if node.get("Alive") and port:
            address = node.get("NodeManagerAddress") or DEFAULT_HOST
            host = DEFAULT_HOST if address == local_ip else address
            urls.append(f"http://{host}:{port}/metrics")
    return urls


def read_prefix_cache_counters(
    model: str | None = None, urls: Sequence[str] | None = None, timeout_s: float = 5.0
) -> PrefixCacheCounters | None:
    """Read vLLM's prefix-cache counters from Ray's metrics export (or the given Prometheus URLs).

    URL sources, first found wins: `urls`, env JR2RAY_VLLM_METRICS_URLS, the nodes of the Ray this process is a
    driver of. Counters are cumulative since the engine started: diff two reads around the requests you measure.
    Returns None when nothing reachable exports them (metrics off, agent not up yet, or no request served yet).
    """
    if urls is None:
        urls = load_settings().vllm_metrics_urls or None
    if urls is None:
        try:
            import ray

            if not ray.is_initialized():
                return None
            urls = ray_metrics_urls()
        except Exception:  # noqa: BLE001 - Ray absent or unreachable: nothing to read
            return None
    total_q = total_h = 0.0
    sources: list[str] = []
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        for url in urls:
            try:
                resp = client.get(url)
            except httpx.HTTPError:
                continue
            if resp.status_code != 200:
                continue
            parsed = parse_prefix_cache_counters(resp.text, model)
            if parsed is not None:
                total_q += parsed[0]
                total_h += parsed[1]
                sources.append(url)
    if not sources:
        return None
    return PrefixCacheCounters(queries=total_q, hits=total_h, sources=sources)


def main(argv: list[str] | None = None) -> int:
    """`python -m serve.llm [cpu|gpu|PATH]`: start Ray, deploy, print the base URL, and keep serving until Ctrl-C."""
    import argparse

    import ray
    from ray import serve

    ap = argparse.ArgumentParser(prog="python -m serve.llm")
    ap.add_argument("profile", nargs="?", default="cpu")
    ap.add_argument("--num-cpus", type=int, default=4)
    ap.add_argument("--port", type=int, default=DEFAULT_PORT)
    ns = ap.parse_args(argv)
    ray.init(num_cpus=ns.num_cpus, include_dashboard=False)
    try:
        url = deploy(ns.profile, port=ns.port, progress=print)
        print(url, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
