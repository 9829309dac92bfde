"""The Ray Serve LLM app (S1): vLLM behind Ray Serve's OpenAI-compatible ingress.

Why this package exists: jr2ray's claim (a fixed tools block keeps the prefix cache hitting) is measured straight from
vLLM, so the engine must run with prefix caching on and report `usage.prompt_tokens_details.cached_tokens`. It is cut
as `ray.serve.llm` cuts its own:
- `configs`: the serve config files (one YAML per profile in `serve/config/`) and the app's `args`, read by all below;
- `builders`: `build_app`, what a serve config names (`serve.llm:build_app`), and `deploy`/`undeploy` from a driver;
- `metrics`: the prefix-cache arithmetic (the most of a prompt the cache could serve) and vLLM's own counters;
- `__main__`: `python -m serve.llm [cpu|gpu|PATH]` deploys a profile and keeps serving.

Session affinity: Ray Serve 2.60 ships `ray.serve.experimental.consistent_hash_router.ConsistentHashRouter`, which pins
every request carrying the same `x-session-id` header to one replica (the OpenAI ingress forwards the header to the
LLMServer hop). The profiles route with it, and a Harness sends its conversation id in that header, so each
conversation's KV blocks stay on the replica that already holds them. `ray.serve.llm.request_router` also offers
`PrefixCacheAffinityRouter` (routes by prompt-text prefix match); see cluster/README.md for when to pick which.

The names below are the package's public ones, importable from `serve.llm` as before the split. Ray and Serve are
imported lazily: importing `serve.llm` stays cheap.
"""

from __future__ import annotations

from .admission import ensure_kv_budget, wait_kv_capacity
from .builders import (
    BUILDER_IMPORT_PATH,
    base_url_for,
    build_app,
    deploy,
    running_replicas,
    small_cache,
    undeploy,
    wait_ready,
)
from .configs import (
    CONFIG_DIR,
    DEFAULT_APP_NAME,
    DEFAULT_HOST,
    DEFAULT_PORT,
    MASKING_CAPS_ENV,
    PROFILES,
    SESSION_HEADER,
    TINY_SOURCE,
    LLMAppArgs,
    ServeApplication,
    ServeConfigFile,
    config_path,
    expand_env,
    llm_application,
    load_serve_config,
    masking_caps_env,
    model_ids,
    resolve_model_source,
    resolved_llm_configs,
)
from .metrics import (
    DEFAULT_BLOCK,
    METRICS_URLS_ENV,
    KvCapacity,
    PrefixCacheCounters,
    common_prefix_len,
    parse_kv_capacity,
    parse_prefix_cache_counters,
    parse_vllm_sums,
    ray_metrics_urls,
    read_kv_capacity,
    read_prefix_cache_counters,
    read_vllm_sums,
    reusable_max,
    reusable_per_request,
)

__all__ = [
    "BUILDER_IMPORT_PATH", "CONFIG_DIR", "DEFAULT_APP_NAME", "DEFAULT_BLOCK", "DEFAULT_HOST", "DEFAULT_PORT",
    "MASKING_CAPS_ENV", "METRICS_URLS_ENV", "PROFILES", "SESSION_HEADER", "TINY_SOURCE", "LLMAppArgs",
    "KvCapacity", "PrefixCacheCounters", "ServeApplication", "ServeConfigFile", "base_url_for", "build_app",
    "common_prefix_len",
    "config_path", "deploy", "ensure_kv_budget", "wait_kv_capacity",
    "expand_env", "llm_application", "load_serve_config", "masking_caps_env", "model_ids",
    "parse_kv_capacity", "parse_prefix_cache_counters", "ray_metrics_urls", "read_kv_capacity",
    "read_prefix_cache_counters", "read_vllm_sums", "parse_vllm_sums", "resolve_model_source",
    "resolved_llm_configs", "reusable_max", "reusable_per_request", "running_replicas", "small_cache", "undeploy",
    "wait_ready",
]
