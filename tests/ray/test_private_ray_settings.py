"""A private local Ray that `connect()` starts is sized as `jr2ray up`'s instance: its GCS keeps jr2ray's task-event
cap (about 55 MB less with 3,000 runs parked, 130 MB with 10,000 woken), and the script's own environment is
as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jr2ray.run.ray_start import INSTANCE_RAY_ENV

pytestmark = pytest.mark.ray

SCRIPT = """
import json, os, psutil, ray, jr2ray
jr2ray.connect(launcher=None)
gcs = [p for p in psutil.Process().children(recursive=True) if p.name() == "gcs_server"]
print(json.dumps({"gcs": [p.environ().get(%(var)r) for p in gcs], "driver": os.environ.get(%(var)r)}))
ray.shutdown()
"""


def test_a_ray_started_by_connect_gets_the_instance_ray_settings(tmp_path: Path) -> None:
    var = next(iter(INSTANCE_RAY_ENV))
    env = {k: v for k, v in os.environ.items() if k != var}
    env.update({"JR2RAY_HOME": str(tmp_path), "RAY_ADDRESS": "local"})  # a private Ray, started by connect()
    out = subprocess.run([sys.executable, "-c", SCRIPT % {"var": var}], env=env, capture_output=True, text=True,
                         timeout=240, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["gcs"] == [INSTANCE_RAY_ENV[var]]  # one GCS, started with the cap
    assert got["driver"] is None  # set only while Ray started: the script's env is its own


def test_the_caller_s_own_setting_wins(tmp_path: Path) -> None:
    var = next(iter(INSTANCE_RAY_ENV))
    env = dict(os.environ)
    env.update({"JR2RAY_HOME": str(tmp_path), "RAY_ADDRESS": "local", var: "777"})
    out = subprocess.run([sys.executable, "-c", SCRIPT % {"var": var}], env=env, capture_output=True, text=True,
                         timeout=240, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"gcs": ["777"], "driver": "777"}
