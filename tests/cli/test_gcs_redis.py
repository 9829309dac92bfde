"""Ray's GCS fault tolerance on one node (issue 23): `up --gcs-redis` keeps the GCS state in a throwaway Debian
`redis-server`, and when the GCS alone is SIGKILLed (by pid, this test's own instance only) `jr2ray supervise` starts
that GCS again, on the same port with its state from Redis, while the raylet goes on: the raylet keeps its pid, the
head is not restarted (instance.json keeps when its Ray started), the API answers, every parked run takes its Gate
event once and a timer that fell due during the outage fires once. The recovery time is printed (`-s`) with the load
average; it is a figure, not an assertion."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_supervise import ENV, _kill_and_recover, supervised
from up_instance import free_port, port_open, start_instance, stop_instance, wait_for

from jr2ray.run.head import vital_pids
from jr2ray.run.store import Store

pytest.importorskip("ray")
pytestmark = pytest.mark.ray


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
    try:
        inst = json.loads((home / "instance.json").read_text())
        assert inst["gcs_redis"] == redis and inst["gcs_namespace"], inst
        assert json.loads((home / "config.json").read_text())["gcs_redis"] == redis  # kept for the next `up`
        # How its GCS was started, for a supervisor that never saw it run (0600: its env).
        kept = home / "gcs_launch.json"
        launch = json.loads(kept.read_text())
        assert launch["ray_started_at"] == inst["ray_started_at"]
        assert launch["pid"] in vital_pids(up.temp_dir)["gcs_server"]
        assert kept.stat().st_mode & 0o777 == 0o600
        figures: dict[str, dict[str, float]] = {}
        with supervised(up, figures):
            figures["gcs_server"] = _kill_and_recover(up, Store(home / "runs"), "gcs_server", whole_head=False)
            text = (home / "supervise.log").read_text()
            assert "started it again" in text and "the raylet" in text, text
            assert "the instance is up again" not in text, text
        stop_instance(home, up.env, up.temp_dir)  # `jr2ray down`, once the supervisor is stopped
        assert not port_open("127.0.0.1", up.ray_port)  # `down` stopped the restarted GCS too
        assert not kept.exists()  # and forgot how it ran
    finally:
        stop_instance(home, up.env, up.temp_dir)  # a failure above leaves nothing running
