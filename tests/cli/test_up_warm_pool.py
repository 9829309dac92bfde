"""After `jr2ray up` the virtual-run host pool fills to its size (one host per live-run slot) in the background,
before any run: the first burst of runs then starts no process. And `up --launcher none` says nothing about model
calls (no Harness is started), records its launcher, and names the seats that wait for a driver."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from up_instance import REPO, start_instance, stop_instance

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

SLOTS = 3
# Joins the instance as a driver script does (`connect()`, no arguments) and polls the registry until the pool is
# full or the deadline passes; prints what it saw last. One process: each join costs seconds on a loaded box.
POLL = """
import json, sys, time
import ray, jr2ray
client = jr2ray.connect()
reg = client.registry()
deadline = time.monotonic() + float(sys.argv[1])
first = stats = ray.get(reg.stats.remote())
while stats["idle_hosts"] < int(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.5)
    stats = ray.get(reg.stats.remote())
time.sleep(2.0)  # and it stays there: nothing starts more than the slots
stats = ray.get(reg.stats.remote())
print(json.dumps({"first_idle": first["idle_hosts"], "idle_hosts": stats["idle_hosts"], "live": stats["live"],
                  "queued": stats["queued"], "max_live": stats["max_live"], "store": client.store.location,
                  "launcher": client.launcher}))
"""


def test_up_warms_the_pool_to_its_size_without_any_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = start_instance(home, {"JR2RAY_MAX_LIVE_RUNS": str(SLOTS), "JR2RAY_NOTES_DRIVER": "harness"})
    try:
        assert f"warming {SLOTS} run host(s) in the background" in up.up.stderr, up.up.explain()
        # --launcher none (start_instance's): notes' writer is the Harness's seat, yet nothing will call a model.
        assert "no model is served" not in up.up.stderr, up.up.explain()
        assert "note: runs here start no Harness (--launcher none)" in up.up.stderr, up.up.explain()
        assert re.search(r"would play \(in [a-z_, ]*\bnotes\b[a-z_, ]*\)", up.up.stderr), up.up.explain()
        assert json.loads((home / "config.json").read_text())["launcher"] == "none"
        assert json.loads((home / "instance.json").read_text())["launcher"] == "none"  # the running instance's

        proc = subprocess.run([sys.executable, "-c", POLL, "240", str(SLOTS)], env={**up.env, "PYTHONPATH": str(REPO)},
                              cwd=REPO, capture_output=True, text=True, timeout=420, check=False)
        assert proc.returncode == 0, proc.stderr[-4000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        assert got["store"] == str(home.resolve() / "runs")  # the instance's registry, not a private one
        assert got["max_live"] == SLOTS
        assert got["launcher"] is None  # connect() with no arguments starts runs as the instance does: no Harness
        assert (got["idle_hosts"], got["live"], got["queued"]) == (SLOTS, [], []), got

        again = up.cli("up", "--llm", "none", "--port", str(up.port), "--launcher", "none", timeout=600)
        assert again.code == 0, again.explain()
        assert "warming" not in again.stderr  # the pool is full already: a second `up` adds no host
    finally:
        stop_instance(home, up.env, up.temp_dir)
