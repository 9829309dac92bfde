"""Ray's GCS fault tolerance on one node (issue 23): `up --gcs-redis` keeps the GCS state in a throwaway Debian
`redis-server`, and when the GCS alone is SIGKILLed (by pid, this test's own instance only) `jr2ray supervise` starts
that GCS again, on the same port with its state from Redis, while the raylet goes on: the raylet keeps its pid, the
head is not restarted (instance.json keeps when its Ray started), the API answers, every parked run takes its Gate
event once and a timer that fell due during the outage fires once. The recovery time is printed (`-s`) with the load
average; it is a figure, not an assertion."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_supervise import ENV, PARKED, _healthy
from up_instance import REPO, UP_TIMEOUT_S, UpInstance, free_port, port_open, start_instance, stop_instance, wait_for

from jr2ray.run.head import vital_pids
from jr2ray.run.store import Store

pytest.importorskip("ray")
pytestmark = pytest.mark.ray


def _post(up: UpInstance, path: str, body: dict[str, Any]) -> httpx.Response:
    """A POST that takes the API's 503 (its replica slow to answer on a loaded box) as "retry shortly", as a client
    should; picks and Gate events carry a delivery id, so a retry is applied once."""
    deadline = time.monotonic() + 180
    while True:
        with up.http() as h:
            r = h.post(path, json=body)
        if r.status_code != 503 or time.monotonic() > deadline:
            return r
        time.sleep(float(r.json().get("retry_after", 2)))


def _view(up: UpInstance, rid: str) -> dict[str, Any]:
    deadline = time.monotonic() + 180
    while True:
        with up.http() as h:
            r = h.get(f"/runs/{rid}")
        if r.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _to_gate(up: UpInstance, cooldown_ms: int) -> str:
    """A deploy run at its approval Gate (as test_supervise's, with retries on 503)."""
    r = _post(up, "/workflows/deploy/runs", {"input": {"deploy_seconds": 0.05, "cooldown_ms": cooldown_ms}})
    assert r.status_code == 201, r.text
    rid = str(r.json()["id"])

    def iid() -> str:
        return next(t["iid"] for t in _view(up, rid)["turns"] if t["slot"] == "operator" and t["active"])

    for name in ("deploy", "submit"):
        got = _post(up, f"/agents/{iid()}/picks", {"name": name, "args": {}, "delivery_id": f"{rid}-{name}"})
        assert got.status_code == 200, got.text
    wait_for(f"the approval Gate of {rid}", lambda: [g["id"] for g in _view(up, rid)["gates"]] == ["approval"])
    return rid


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[str]:
    """A throwaway redis-server on a free loopback port, no persistence; stopped (by its pid) after the test."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("Debian's redis-server is not installed (.ci/install installs it)")
    port = free_port()
    log = (tmp_path / "redis.log").open("w")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for("redis-server to listen", lambda: port_open("127.0.0.1", port) or proc.poll() is not None, 30)
        assert proc.poll() is None, (tmp_path / "redis.log").read_text()
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_a_gcs_kill_is_healed_by_restarting_the_gcs_alone_from_redis(
        tmp_path_factory: pytest.TempPathFactory, redis: str) -> None:
    home = tmp_path_factory.mktemp("gcs-redis-home")
    up = start_instance(home, ENV, args=("--gcs-redis", redis))
    store = Store(home / "runs")
    log = (home / "supervise.log").open("w")
    sup = subprocess.Popen([sys.executable, "-m", "jr2ray.cli", "supervise", "--interval", "0.5"], env=up.env,
                           cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    figures: dict[str, float] = {}
    try:
        before = json.loads((home / "instance.json").read_text())
        assert before["gcs_redis"] == redis and before["gcs_namespace"], before
        assert json.loads((home / "config.json").read_text())["gcs_redis"] == redis  # kept for the next `up`
        assert up.temp_dir
        time.sleep(3)  # the supervisor has seen the GCS run (its command line and environment)
        assert sup.poll() is None, (home / "supervise.log").read_text()
        parked = [_to_gate(up, 100) for _ in range(PARKED)]
        due = _to_gate(up, 4000)  # approved just before the kill: its cooldown falls due while the GCS is down

        def parked_now() -> bool:
            with up.http() as h:
                rows = h.get("/runs", params={"where": "parked", "limit": 1000}).json()
            return set(parked) <= {row["id"] for row in rows}

        wait_for("the Gate runs to park", parked_now, timeout_s=60)
        vital = vital_pids(up.temp_dir)
        assert len(vital["gcs_server"]) == 1 and len(vital["raylet"]) == 1, vital
        assert _post(up, f"/runs/{due}/gates/approval/events", {"event": "approve", "input": {"by": "ops"},
                                                                "delivery_id": f"due-{due}"}).status_code == 200
        killed_at = time.monotonic()
        os.kill(vital["gcs_server"][0], signal.SIGKILL)

        def gcs_back() -> bool:
            now = vital_pids(up.temp_dir or "")
            return bool(now["gcs_server"]) and now["gcs_server"] != vital["gcs_server"] and \
                port_open("127.0.0.1", up.ray_port)

        wait_for("a new GCS to answer on the head's port", gcs_back, timeout_s=120, every_s=0.2)
        figures["gcs_s"] = time.monotonic() - killed_at
        wait_for("the API to answer", lambda: _healthy(up.api), timeout_s=UP_TIMEOUT_S, every_s=0.5)
        figures["api_s"] = time.monotonic() - killed_at
        for rid in parked:  # every parked run takes its Gate event, once
            r = _post(up, f"/runs/{rid}/gates/approval/events", {"event": "approve", "input": {"by": "ops"},
                                                                  "delivery_id": f"gcs-{rid}"})
            assert r.status_code == 200, r.text
        figures["gate_s"] = time.monotonic() - killed_at
        for rid in [*parked, due]:
            wait_for(f"run {rid} to finish", lambda rid=rid: _view(up, rid)["status"] == "done", timeout_s=120)
            j = store.open(rid)
            try:
                names = [e.data["name"] for e in j.ledger("admission")]
            finally:
                j.close()
            assert names == ["deploy", "submit", "approve"], (rid, names)  # each event applied once
        assert _view(up, due)["value"] == "released"
        # The head was never restarted: the raylet that ran before the kill runs still, and Ray's start is the same.
        assert vital_pids(up.temp_dir)["raylet"] == vital["raylet"]
        after = json.loads((home / "instance.json").read_text())
        assert after["ray_started_at"] == before["ray_started_at"]
        text = (home / "supervise.log").read_text()
        assert "started it again" in text and "the raylet" in text, text
        assert "the instance is up again" not in text, text
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(60)
        except subprocess.TimeoutExpired:
            sup.kill()
        log.close()
        print(f"\nGCS kill with Redis (s from the kill): {figures}; load average {os.getloadavg()}")
        print((home / "supervise.log").read_text())
        stop_instance(home, up.env, up.temp_dir)
        assert not port_open("127.0.0.1", up.ray_port)
