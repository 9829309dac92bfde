"""Serve profiles and cluster manifests: they parse, their import paths resolve, and the copies agree.

Also the pure helpers of serve/llm.py (prefix-cache arithmetic, Prometheus parsing, env expansion), which need no Ray.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from serve.llm import (
    LLMAppArgs,
    ServeConfigFile,
    base_url_for,
    common_prefix_len,
    config_path,
    expand_env,
    llm_application,
    parse_prefix_cache_counters,
    reusable_max,
)

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _resolve(import_path: str) -> Any:
    """`pkg.mod:attr` or `pkg.mod.attr` -> the object."""
    module, sep, attr = import_path.partition(":")
    if not sep:
        module, _, attr = import_path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _rayservice_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((CLUSTER / "rayservice.yaml").read_text()) if d]


def _serve_configs() -> dict[str, ServeConfigFile]:
    out = {p: ServeConfigFile.model_validate(yaml.safe_load(config_path(p).read_text())) for p in ("cpu", "gpu")}
    (svc,) = [d for d in _rayservice_docs() if d["kind"] == "RayService"]
    out["rayservice"] = ServeConfigFile.model_validate(yaml.safe_load(svc["spec"]["serveConfigV2"]))
    return out


@pytest.mark.parametrize("name", ["cpu", "gpu", "rayservice"])
def test_serve_configs_parse_and_import_paths_exist(name: str) -> None:
    cfg = _serve_configs()[name]
    for app in cfg.applications:
        module = app.import_path.partition(":")[0]
        if module == "serve.api" and not _module_exists(module):
            continue  # the jr2ray API lands separately; its import path is checked once it exists
        assert _resolve(app.import_path) is not None, app.import_path
        if module == "serve.llm":
            args = LLMAppArgs.model_validate(app.args)
            for llm in args.llm_configs:
                assert llm["engine_kwargs"]["enable_prefix_caching"] is True
                assert llm["engine_kwargs"]["enable_prompt_tokens_details"] is True
                assert llm["engine_kwargs"]["enable_auto_tool_choice"] is True
                assert llm["engine_kwargs"]["tool_call_parser"] == "hermes"
                router = llm["deployment_config"]["request_router_config"]["request_router_class"]
                if _module_exists("ray"):
                    assert _resolve(router) is not None, router


def test_serve_configs_validate_against_ray_schema() -> None:
    schema = pytest.importorskip("ray.serve.schema")
    for cfg in _serve_configs().values():
        schema.ServeDeploySchema.model_validate(cfg.model_dump(exclude_none=True))


def test_cpu_profile_is_the_ci_profile() -> None:
    app = llm_application("cpu")
    (llm,) = app.args["llm_configs"]
    assert llm["model_loading_config"] == {"model_id": "tiny", "model_source": "jr2ray:tiny"}
    assert llm["accelerator_config"] == {"kind": "cpu"}
    assert llm["engine_kwargs"]["block_size"] % 32 == 0
    assert llm["runtime_env"]["env_vars"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert base_url_for(route_prefix=app.route_prefix) == "http://127.0.0.1:8000/llm/v1"


def test_rayservice_llm_app_matches_gpu_profile() -> None:
    gpu = llm_application("gpu")
    (svc,) = [a for a in _serve_configs()["rayservice"].applications if a.import_path.startswith("serve.llm:")]
    assert svc.args == gpu.args
    assert svc.route_prefix == gpu.route_prefix
    names = {a.name for a in _serve_configs()["rayservice"].applications}
    assert {"api", "llm"} <= names


def test_rayservice_manifest_shape() -> None:
    (svc,) = [d for d in _rayservice_docs() if d["kind"] == "RayService"]
    assert svc["apiVersion"] == "ray.io/v1"
    cluster = svc["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == "2.60.0"
    (gpu,) = cluster["workerGroupSpecs"]
    (container,) = gpu["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_ray_up_config_validates() -> None:
    util = pytest.importorskip("ray.autoscaler._private.util")
    raw = yaml.safe_load((CLUSTER / "ray-up.yaml").read_text())
    assert raw["provider"]["type"] == "local"
    prepared = util.prepare_config(raw)
    util.validate_config(prepared)
    assert prepared["max_workers"] == len(raw["provider"]["worker_ips"])


def test_cluster_readme_exists() -> None:
    text = (CLUSTER / "README.md").read_text()
    for needle in ("ray up", "RayService", "x-session-id", "ConsistentHashRouter"):
        assert needle in text


# --- pure helpers of serve/llm.py ---------------------------------------------------------------------------------


def test_reusable_max() -> None:
    a = list(range(445))
    assert reusable_max(a, a) == 416  # measured on the CPU build: 416 of 445 reused on a repeat
    assert reusable_max(a, a, block=16) == 432
    assert reusable_max(list(range(100)), list(range(64)) + [-1] * 36) == 64  # shared prefix ends on a block edge
    assert reusable_max(list(range(100)), list(range(70)) + [-1]) == 64
    assert reusable_max([1, 2], []) == 0
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    # Where the shared prefix does not end on a block edge, S2's floor((shared - 1) / block) * block agrees.
    for shared in (33, 50, 95):
        b = list(range(shared)) + [-1] * 40
        assert reusable_max(list(range(200)), b) == ((shared - 1) // 32) * 32


def test_parse_prefix_cache_counters() -> None:
    page = "\n".join(
        [
            "# HELP ray_vllm_prefix_cache_queries_total x",
            "# TYPE ray_vllm_prefix_cache_queries_total counter",
            'ray_vllm_prefix_cache_queries_total{ReplicaId="a",engine="0",model_name="tiny"} 3348.0',
            'ray_vllm_prefix_cache_queries_total{ReplicaId="b",engine="0",model_name="tiny"} 2.0',
            'ray_vllm_prefix_cache_hits_total{ReplicaId="a",engine="0",model_name="tiny"} 2720.0',
            'ray_vllm_prefix_cache_hits_total{ReplicaId="c",engine="0",model_name="other"} 99.0',
            'ray_vllm_external_prefix_cache_hits_total{model_name="tiny"} 7.0',
            'vllm:prefix_cache_queries_total{model_name="plain"} 10.0',
            "ray_node_cpu_count 2",
        ]
    )
    assert parse_prefix_cache_counters(page, "tiny") == (3350.0, 2720.0)
    assert parse_prefix_cache_counters(page, "plain") == (10.0, 0.0)
    assert parse_prefix_cache_counters("ray_node_cpu_count 2\n") is None


def test_expand_env() -> None:
    assert expand_env("${M:-/models/q}", {}) == "/models/q"
    assert expand_env("${M:-/models/q}", {"M": "/x"}) == "/x"
    assert expand_env("$H/a", {"H": "/h"}) == "/h/a"
    assert expand_env("${NOPE}", {}) == "${NOPE}"
    assert expand_env("Qwen/Qwen2.5-7B-Instruct", {}) == "Qwen/Qwen2.5-7B-Instruct"
