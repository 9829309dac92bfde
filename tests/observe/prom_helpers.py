"""Debian's Prometheus, started and stopped by a test, and the queries of the shipped dashboard and alert rules.

Shared by tests/observe and the vllm tier (whose test checks the dashboard's vLLM panels)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "cluster"
DASHBOARD = CLUSTER / "grafana-jr2ray.json"
ALERTS = CLUSTER / "jr2ray-alerts.yml"
SCRAPE = CLUSTER / "prometheus.yml"
VLLM_SERIES = "ray_vllm_"
SCRAPE_S = 2  # the test's scrape and rule interval (the shipped file says 15 s)
SERIES_TIMEOUT_S = 240.0  # Ray's metrics agent reports every few seconds; a loaded 2-core box is slower


def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("Debian's prometheus is not installed (.ci/install installs it)")
    return path


def dashboard_exprs() -> list[str]:
    """Every query of every panel (rows' panels included), in order."""
    found: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            found.extend(t["expr"] for t in p.get("targets", []) if t.get("expr"))
            walk(p.get("panels", []))

    walk(json.loads(DASHBOARD.read_text())["panels"])
    return found


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def signals(rule: dict[str, Any]) -> list[str]:
    return [s.strip() for s in str(rule["annotations"]["signal"]).split(";;")]


def flat(expr: str) -> str:
    return re.sub(r"\s+", " ", expr).strip()


class Prometheus:
    """Debian's prometheus on a free loopback port, with a copy of the shipped config aimed at one target."""

    def __init__(self, workdir: Path, *targets: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config = yaml.safe_load(SCRAPE.read_text())
        config["global"] = {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"}
        job = next(j for j in config["scrape_configs"] if j["job_name"] == "jr2ray")
        job["static_configs"] = [{"targets": list(targets)}]
        shutil.copy(ALERTS, workdir / ALERTS.name)  # rule_files are relative to the config file
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [prometheus_bin(), f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir)
        self.workdir = workdir

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"prometheus exited ({self.proc.returncode}):\n{(self.workdir / 'prometheus.log').read_text()}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def api(self, path: str, **params: str) -> Any:
        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        body = r.json()
        assert body.get("status") == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result = data["result"]
        return list(result) if isinstance(result, list) else [result]

    def wait_scraped(self, timeout_s: float = 120.0) -> None:
        """Until Prometheus is ready and has scraped one of its targets."""
        import time

        deadline = time.monotonic() + timeout_s
        while not (self.ready() and any(t["health"] == "up" for t in self.api("targets")["activeTargets"])):
            if time.monotonic() > deadline:
                pytest.fail(f"prometheus did not scrape a target within {timeout_s:.0f}s")
            time.sleep(0.5)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()




def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def without_series(prom: Prometheus, exprs: list[str], timeout_s: float = SERIES_TIMEOUT_S) -> list[str]:
    """The expressions that still give an empty result after polling Prometheus for up to `timeout_s`."""
    import time

    empty = list(exprs)
    deadline = time.monotonic() + timeout_s
    while True:
        empty = [e for e in empty if not prom.query(e)]
        if not empty or time.monotonic() >= deadline:
            return empty
        time.sleep(SCRAPE_S)
