"""Serve profiles and cluster manifests: they parse, their import paths resolve, and the copies agree.

Every Serve app they name is built by Ray's own loader (the task Serve's controller runs for a deploy), on a local
Ray, with the CPU model swapped in for the GPU one; and every JR2RAY_* variable they set is one the code reads.

Also the pure helpers of serve/llm/ (prefix-cache arithmetic, Prometheus parsing, env expansion), which need no Ray.
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.util
import os
import re
from collections.abc import Iterator
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
    load_serve_config,
    parse_prefix_cache_counters,
    reusable_max,
)

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
API_BUILDER = "serve.api:build_serve_app"


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
    assert {a.import_path for a in cfg.applications} == {API_BUILDER, "serve.llm:build_app"}, name
    for app in cfg.applications:
        assert _resolve(app.import_path) is not None, app.import_path
        if app.import_path.startswith("serve.llm:"):
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
    (gpu_api,) = [a for a in load_serve_config("gpu").applications if a.import_path == API_BUILDER]
    (svc_api,) = [a for a in _serve_configs()["rayservice"].applications if a.import_path == API_BUILDER]
    assert (svc_api.args, svc_api.route_prefix) == (gpu_api.args, gpu_api.route_prefix)


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


# --- Ray's own loader --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A Ray of this module's own unless one is up in this process; yields the JR2RAY_HOME the builds use."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield tmp_path_factory.mktemp("cluster_build_home")
    if started:
        ray.shutdown()


def _cpu_swapped(app: Any) -> Any:
    """The app with the CPU profile's model and accelerator wherever a GPU model is named (this box has no GPU)."""
    if app.import_path != "serve.llm:build_app":
        return app
    (cpu_llm,) = llm_application("cpu").args["llm_configs"]
    args = copy.deepcopy(app.args)
    for llm in args["llm_configs"]:
        if llm["accelerator_config"]["kind"] != "cpu":
            llm["model_loading_config"]["model_source"] = cpu_llm["model_loading_config"]["model_source"]
            llm["accelerator_config"] = dict(cpu_llm["accelerator_config"])
    return app.model_copy(update={"args": args})


@pytest.fixture(scope="module")
def loader_builds(local_ray: Path) -> dict[str, list[tuple[str, str, Any]]]:
    """Every profile's apps given to Ray's loader, two at a time (each build imports vLLM; side by side on 2 cores
    they take about half as long as one after another), then collected: {profile: [(import path, app name, ref)]}.
    The CPU profile's go first and are waited for: its LLM app builds the tiny model in the task, once, before any
    other build could build it beside it."""
    import ray
    from ray.serve._private.application_state import build_serve_application
    from ray.serve.schema import LoggingConfig, ServeDeploySchema

    out: dict[str, list[tuple[str, str, Any]]] = {}
    for name, cfg in _serve_configs().items():
        schema = ServeDeploySchema.model_validate(cfg.model_dump(exclude_none=True))
        for app in map(_cpu_swapped, schema.applications):
            env = copy.deepcopy(app.runtime_env or {})
            env.setdefault("env_vars", {})["JR2RAY_HOME"] = str(local_ray)
            # Serve's task asks for no CPU; one each keeps two builds (and two vLLM imports) at a time on local_ray.
            ref = build_serve_application.options(runtime_env=env, max_retries=0, num_cpus=1).remote(
                app.import_path, "test", app.name, app.args, LoggingConfig(), None, {}, {}, {})
            out.setdefault(name, []).append((app.import_path, app.name, ref))
        if name == "cpu":
            refs = [ref for _, _, ref in out[name]]
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=600)
            assert len(done) == len(refs), "the CPU profile's builds did not end within 600 s"
    return out


@pytest.mark.ray
@pytest.mark.parametrize("name", ["cpu", "gpu", "rayservice"])
def test_every_serve_app_is_built_by_rays_own_loader(name: str,
                                                     loader_builds: dict[str, list[tuple[str, str, Any]]]) -> None:
    """Serve's controller builds a deployed config's apps in the `build_serve_application` task: import the
    `import_path`, call it with `args` if it is a builder, and build the deployments. A FastAPI object (the old
    `serve.api:app`) fails there, which is how the KubeRay config could not deploy the API."""
    import ray

    assert loader_builds[name], name
    for import_path, app_name, ref in loader_builds[name]:
        _, deploy_args, error = ray.get(ref, timeout=600)
        assert error is None, (name, app_name, error)
        names = {d["deployment_name"] for d in deploy_args}
        ingress = [d["deployment_name"] for d in deploy_args if d["ingress"]]
        if import_path == API_BUILDER:
            assert names == {"jr2ray-api"} and ingress == ["jr2ray-api"], (name, names)
        else:
            assert len(ingress) == 1 and any("LLMServer" in n for n in names), (name, names)


def test_a_fastapi_object_is_refused_by_rays_loader() -> None:
    """The check above can fail: Ray's loader refuses what the RayService used to name."""
    api = pytest.importorskip("ray.serve._private.api")
    from serve.api import ApiConfig, build_app

    with pytest.raises(TypeError, match="builder function"):
        api.call_user_app_builder_with_args_if_necessary(build_app(ApiConfig(launcher="none")), {})
    with pytest.raises(Exception, match="extra"):  # a typo in the API app's args is a build error, not ignored
        api.call_user_app_builder_with_args_if_necessary(_resolve(API_BUILDER), {"hme": "/x"})


# --- the environment the configs set ------------------------------------------------------------------------------
_SET_IN_COMMAND = re.compile(r"\b(JR2RAY_[A-Z0-9_]+)=")
_NAMED = re.compile(r"^JR2RAY_[A-Z0-9_]+$")


def _names_read_by_code() -> set[str]:
    """Every variable of jr2ray's settings, plus any JR2RAY_* name the package's code spells out."""
    from jr2ray.settings import ENV_NAMES

    names = set(ENV_NAMES.values())
    for package in ("jr2ray", "serve", "workflows"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAMED.match(node.value):
                    names.add(node.value)
    return names


def _names_set_by_configs() -> dict[str, set[str]]:
    """JR2RAY_* variables each config sets: serve apps' runtime_env, pod env, `ray start` lines, the image."""
    out: dict[str, set[str]] = {}
    for cfg_name, cfg in _serve_configs().items():
        for app in cfg.applications:
            env_vars = (getattr(app, "runtime_env", None) or {}).get("env_vars", {})
            out.setdefault(cfg_name, set()).update(env_vars)
    (svc,) = [d for d in _rayservice_docs() if d["kind"] == "RayService"]
    groups = [svc["spec"]["rayClusterConfig"]["headGroupSpec"], *svc["spec"]["rayClusterConfig"]["workerGroupSpecs"]]
    for group in groups:
        for container in group["template"]["spec"]["containers"]:
            out["rayservice"].update(e["name"] for e in container.get("env", []))
    out["ray-up"] = set(_SET_IN_COMMAND.findall((CLUSTER / "ray-up.yaml").read_text()))
    out["Dockerfile"] = set(re.findall(r"^ENV (JR2RAY_[A-Z0-9_]+)=", (CLUSTER / "Dockerfile").read_text(), re.M))
    return {k: {n for n in v if n.startswith("JR2RAY_")} for k, v in out.items()}


def _referenced_by_configs() -> set[str]:
    """Variables a serve config expands itself (`${JR2RAY_GPU_MODEL:-...}` in a model source)."""
    texts = [config_path(p).read_text() for p in ("cpu", "gpu")] + [(CLUSTER / "rayservice.yaml").read_text()]
    return {n for t in texts for n in re.findall(r"\$\{?(JR2RAY_[A-Z0-9_]+)", t)}


def test_every_jr2ray_variable_a_config_sets_is_one_the_code_reads() -> None:
    known = _names_read_by_code() | _referenced_by_configs()
    assert "JR2RAY_LOCAL_BASE_URL" in known and "JR2RAY_LLM_BASE_URL" not in known
    unread = {cfg: sorted(names - known) for cfg, names in _names_set_by_configs().items() if names - known}
    assert not unread, f"set by a config but read by no code: {unread}"


@pytest.mark.parametrize("name", ["cpu", "gpu", "rayservice"])
def test_the_model_url_a_config_sets_reaches_the_harness(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Follow the variable: the API replica's environment -> the Run actors it starts -> the Harness's provider."""
    from jr2ray.harness.providers import ProviderConfig
    from jr2ray.settings import load_settings
    from serve.api.deploy import replica_config

    cfg = _serve_configs()[name]
    (api,) = [a for a in cfg.applications if a.import_path == API_BUILDER]
    (llm,) = [a for a in cfg.applications if a.import_path.startswith("serve.llm:")]

    def only(env: dict[str, str]) -> None:
        for key in [k for k in os.environ if k.startswith("JR2RAY_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)

    only(dict((getattr(api, "runtime_env", None) or {}).get("env_vars", {})))  # in the API replica
    run_env = replica_config(None, api.args).run_env or {}
    only(run_env)  # in a Run actor the replica starts, where the Harness runs
    port = int((getattr(cfg, "http_options", None) or {}).get("port", 8000))
    config = ProviderConfig.from_settings(load_settings())
    assert config.local_base_url == base_url_for(port=port, route_prefix=llm.route_prefix)


# --- pure helpers of serve/llm/ ----------------------------------------------------------------------------------


def test_reusable_max() -> None:
    a = list(range(445))
    assert reusable_max(a, a) == 416  # a repeat of 445 tokens reuses 416: whole 32-token blocks, never the last token
    assert reusable_max(a, a, block=16) == 432
    assert reusable_max(list(range(100)), list(range(64)) + [-1] * 36) == 64  # shared prefix ends on a block edge
    assert reusable_max(list(range(100)), list(range(70)) + [-1]) == 64
    assert reusable_max([1, 2], []) == 0
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    # Where the shared prefix does not end on a block edge, the closed form floor((shared - 1) / block) * block agrees.
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


@pytest.mark.parametrize(("store", "on_head"), [(None, True), ("postgresql://jr:pw@127.0.0.1:5432/jr2ray", False)])
def test_the_built_api_runs_on_the_head_only_with_the_sqlite_store(tmp_path: Path, store: str | None,
                                                                    on_head: bool) -> None:
    """A serve config's API (KubeRay builds it with `build_serve_app`) reads SQLite journals on the head's disk, so
    its replicas are pinned there; with PostgreSQL they may run on any node."""
    from jr2ray.run.placement import HEAD_RESOURCE
    from serve.api import build_serve_app

    args = {"home": str(tmp_path), "launcher": "none", **({"store": store} if store else {})}
    options = build_serve_app(args)._bound_deployment.ray_actor_options
    assert (HEAD_RESOURCE in (options.get("resources") or {})) is on_head


def test_gcs_fault_tolerance_configs_name_the_redis_they_ship() -> None:
    """KubeRay's `gcsFaultToleranceOptions` points at the Redis Service and password Secret of gcs-ft-redis.yaml, and
    `ray up` reads cluster/gcs.env (RAY_REDIS_ADDRESS) on every node before `ray start`."""
    docs = [d for d in yaml.safe_load_all((CLUSTER / "gcs-ft-redis.yaml").read_text()) if d]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (redis,) = sts["spec"]["template"]["spec"]["containers"]
    (secret,) = [e["valueFrom"]["secretKeyRef"] for e in redis["env"] if e["name"] == "REDIS_PASSWORD"]
    ft = yaml.safe_load((CLUSTER / "gcs-ft-patch.yaml").read_text())["spec"]["rayClusterConfig"][
        "gcsFaultToleranceOptions"]
    assert ft["redisAddress"] == f"redis://{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}"
    assert ft["redisPassword"]["valueFrom"]["secretKeyRef"] == secret
    assert "--appendonly" in redis["args"] and ft["externalStorageNamespace"]
    raw = yaml.safe_load((CLUSTER / "ray-up.yaml").read_text())
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert any("cluster/gcs.env" in c for c in raw[key]), key
    example = (CLUSTER / "gcs.env.example").read_text()
    assert "RAY_REDIS_ADDRESS=" in example and "RAY_gcs_rpc_server_reconnect_timeout_s=" in example
