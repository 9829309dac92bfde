"""The dashboard's vLLM panels (cluster/grafana-jr2ray.json, the `ray_vllm_*` queries) against a real Prometheus.

They need vLLM's engine metrics, which only the LLM app exports (`log_engine_metrics: true` in both profiles), so
they are checked here, on the tier's tiny model, and not in tests/observe (which runs jr2ray's own panels on a fake
model). Debian's prometheus scrapes every Ray node's metrics export after two identical requests (the second hits the
prefix cache).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from serve.llm import SESSION_HEADER, load_serve_config, ray_metrics_urls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "observe"))
from prom_helpers import VLLM_SERIES, Prometheus, dashboard_exprs, prometheus_bin, without_series  # noqa: E402

if TYPE_CHECKING:  # the fixture's type; conftest is not importable as a package (tests/vllm must not shadow vllm)
    from conftest import TinyServer

pytestmark = pytest.mark.vllm


def test_both_profiles_turn_on_vllm_engine_metrics() -> None:
    for profile in ("cpu", "gpu"):
        app = next(a for a in load_serve_config(profile).applications if a.name == "llm")
        assert all(c.get("log_engine_metrics") is True for c in app.args["llm_configs"]), profile


def test_every_vllm_panel_has_series(tiny_server: TinyServer, tmp_path: Path) -> None:
    prometheus_bin()
    exprs = [e for e in dashboard_exprs() if VLLM_SERIES in e]
    assert len(exprs) >= 3
    body = {"model": tiny_server.model, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": f"{uuid.uuid4().hex} " + "Write release notes. " * 40}]}
    session = {SESSION_HEADER: uuid.uuid4().hex}  # one conversation, so the repeat finds its prefix on its replica
    for _ in range(2):
        r = httpx.post(f"{tiny_server.base_url}/chat/completions", json=body, headers=session, timeout=300)
        r.raise_for_status()
    targets = [u.removeprefix("http://").removesuffix("/metrics") for u in ray_metrics_urls()]
    assert targets, "no Ray node reports a metrics export port"
    prom = Prometheus(tmp_path / "prometheus", *targets)
    try:
        prom.wait_scraped()
        empty = without_series(prom, exprs)
    finally:
        prom.stop()
    assert not empty, "no series for:\n" + "\n".join(empty)
