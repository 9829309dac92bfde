"""A private local Ray that `connect()` starts is sized as `jr2ray up`'s instance: its GCS keeps jr2ray's task-event
cap (55 MB of GCS with 3,000 runs parked, 34 MB capped), its raylet's startup bound fits the warm pool (no note on
the script's output), and the script's own environment is as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jr2ray.run.ray_start import STARTUP_VAR, TASK_EVENTS_VAR

pytestmark = pytest.mark.ray

SCRIPT = """
import json, os, psutil, ray, jr2ray
jr2ray.connect(launcher=None)
gcs = [p for p in psutil.Process().children(recursive=True) if p.name() == "gcs_server"]
print(json.dumps({"gcs": [p.environ().get(%(var)r) for p in gcs], "driver": os.environ.get(%(var)r)}))
ray.shutdown()
"""


def test_a_ray_started_by_connect_gets_the_instance_ray_settings(tmp_path: Path) -> None:
    var = TASK_EVENTS_VAR
    env = {k: v for k, v in os.environ.items() if k != var}
    env.update({"JR2RAY_HOME": str(tmp_path), "RAY_ADDRESS": "local"})  # a private Ray, started by connect()
    out = subprocess.run([sys.executable, "-c", SCRIPT % {"var": var}], env=env, capture_output=True, text=True,
                         timeout=240, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["gcs"] == ["10000"]  # one GCS, started with the cap
    assert got["driver"] is None  # set only while Ray started: the script's env is its own


def test_the_caller_s_own_setting_wins(tmp_path: Path) -> None:
    var = TASK_EVENTS_VAR
    env = dict(os.environ)
    env.update({"JR2RAY_HOME": str(tmp_path), "RAY_ADDRESS": "local", var: "777"})
    out = subprocess.run([sys.executable, "-c", SCRIPT % {"var": var}], env=env, capture_output=True, text=True,
                         timeout=240, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"gcs": ["777"], "driver": "777"}


WARM = """
import time, ray, jr2ray
client = jr2ray.connect(launcher=None)
print("warmed", client.warm_pool(), flush=True)
for _ in range(240):  # the pool fills in the background, a few hosts at a time
    if client.stats()["idle_hosts"] >= 16:
        break
    time.sleep(0.5)
print("idle hosts", client.stats()["idle_hosts"], flush=True)
time.sleep(6)  # the raylet pushes its note to the driver through the GCS: give it time to arrive
ray.shutdown()
"""
RAYLET_NOTE = "maximum expected startup concurrency"


def _warm(tmp_path: Path, **extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != STARTUP_VAR}
    env.update({"JR2RAY_HOME": str(tmp_path), "RAY_ADDRESS": "local", "JR2RAY_MAX_LIVE_RUNS": "16", **extra})
    done = subprocess.run([sys.executable, "-c", WARM], env=env, capture_output=True, text=True, timeout=300,
                          check=True)
    assert "idle hosts 16" in done.stdout  # the pool was filled: 16 hosts beside the registry and the timers
    return done.stdout + done.stderr


def test_a_warm_pool_does_not_set_off_the_raylet_s_worker_count_note(tmp_path: Path) -> None:
    """16 warm hosts with the registry and the timers are enough, on a 2-core box with Ray's own startup bound, for
    the raylet to print its note on the script's output (the test below). The bound jr2ray gives the Ray it starts
    fits the pool."""
    assert RAYLET_NOTE not in _warm(tmp_path)


def test_the_note_shows_with_ray_s_own_bound(tmp_path: Path) -> None:
    """The other arm, so the check above can fail: with the caller's bound at Ray's default for 2 cores, the same
    warm pool is reported."""
    assert RAYLET_NOTE in _warm(tmp_path, **{STARTUP_VAR: "2"})
