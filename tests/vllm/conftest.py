"""One Ray Serve LLM app (CPU profile, tiny model, 2 replicas) for the whole vllm tier: it takes a minute or two
to start. Its 2 replicas are what the session-affinity check needs; every other check sends its requests with a
session key (as the Harness does), so one conversation stays on one replica and its prefix cache.

Env: JR2RAY_HOME, when set, keeps the tiny model between runs (otherwise it is built into a temp dir, ~5 s).
JR2RAY_TEST_LLM_PORT picks the Serve HTTP port (default: a free port). JR2RAY_TEST_LLM_URL points the tier at an
LLM app that is already up (a developer's loop; CI leaves it unset and deploys its own).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict


class TinyServer(BaseModel):
    """What the tests need to talk to the deployed app and to render prompts exactly as vLLM does."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    base_url: str
    model: str
    model_dir: Path
    startup_s: float
    tokenizer: Any


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyServer]:
    pytest.importorskip("vllm")
    pytest.importorskip("ray.serve.llm")
    import ray
    from ray import serve
    from transformers import AutoTokenizer

    from jr2ray.tinymodel import SERVED_MODEL_NAME, ensure_tiny
    from serve.llm import deploy, undeploy, wait_ready

    saved_home = os.environ.get("JR2RAY_HOME")
    if not saved_home:
        os.environ["JR2RAY_HOME"] = str(tmp_path_factory.mktemp("jr2ray-home"))
    from jr2ray.settings import load_settings

    model_dir = ensure_tiny(load_settings())

    started_ray = False
    if ray.is_initialized() and ray.cluster_resources().get("CPU", 0) < 8:
        ray.shutdown()  # a smaller Ray left by an earlier tier cannot hold this app and the KV check's
    if not ray.is_initialized():
        # 8 logical CPUs on a 2-core box: each LLMServer replica takes 2 (replica + engine bundle), each ingress 1;
        # the tier runs this app with 2 replicas (5) and, for the KV admission check, one with 1 (3).
        # Ray's metrics agent exports every 10 s by default; the bench and the KV checks poll vLLM's counters after
        # each arm until they cover it, so at 1 s they wait one export instead of ten.
        ray.init(num_cpus=8, include_dashboard=False, namespace="jr2ray-vllm-tests",
                 _system_config={"metrics_report_interval_ms": 1000})
        started_ray = True
    if ray.cluster_resources().get("CPU", 0) < 8:
        pytest.fail("the vllm tier needs >= 8 logical CPUs in Ray (this app's 2 LLMServer replicas x 2 and ingress, "
                    "and the KV check's app: 1 replica x 2 and ingress)")

    external = os.environ.get("JR2RAY_TEST_LLM_URL")
    if external:
        wait_ready(external, SERVED_MODEL_NAME, timeout_s=60)
        yield TinyServer(base_url=external, model=SERVED_MODEL_NAME, model_dir=model_dir, startup_s=0.0,
                         tokenizer=AutoTokenizer.from_pretrained(str(model_dir)))
        if started_ray:
            ray.shutdown()
        return
    port = int(os.environ.get("JR2RAY_TEST_LLM_PORT") or _free_port())
    t0 = time.monotonic()
    try:
        url = deploy("cpu", settings=load_settings(), port=port, replicas=2, timeout_s=900)  # both running
        server = TinyServer(
            base_url=url,
            model=SERVED_MODEL_NAME,
            model_dir=model_dir,
            startup_s=time.monotonic() - t0,
            tokenizer=AutoTokenizer.from_pretrained(str(model_dir)),
        )
        print(f"\n[vllm tier] {url} up in {server.startup_s:.1f}s")
        yield server
    finally:
        try:
            undeploy()
            serve.shutdown()
        finally:
            if started_ray:
                ray.shutdown()
            if not saved_home:
                os.environ.pop("JR2RAY_HOME", None)
