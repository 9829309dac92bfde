"""The driver API end to end, as a new user meets it: `jr2ray up`, then a plain Python script that calls
`jr2ray.connect()` with no arguments and no RAY_* variables, starts runs with `start_many`, plays the writer with
`jr2ray.testing.ScriptedAgent`, answers the Gates with the asyncio forms, and collects the runs with `wait`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from up_instance import FOREIGN_ENV, REPO, UpInstance, up_fixture

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

up = up_fixture("driver-home")
N = 3


def test_a_driver_script_finds_the_local_instance_and_drives_many_runs(up: UpInstance) -> None:
    script = Path(__file__).with_name("driver_notes.py")
    env = {**up.env, "PYTHONPATH": str(REPO)}
    assert not set(FOREIGN_ENV) & set(env)  # no Ray address or auth copied by hand
    proc = subprocess.run([sys.executable, str(script), str(N)], check=False, env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Ray's driver prints its raylet's notes on stdout too (while `up` warms the host pool in the background, the
    # "worker processes have been started" one): the script's answer is its one JSON line.
    out = json.loads(next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("{")))
    assert out["store"] == str(up.home.resolve() / "runs")  # the instance's journals, not a private store
    assert sorted(out["ids"]) == out["finished"] and out["pending"] == []
    assert out["values"] == ["published"] * N
    assert out["ask_answers"] == [f"The editor replied: reply to {rid}" for rid in out["ids"]]
    assert out["outputs"] == [{"notes": f"# Notes\nThe editor replied: reply to {rid}"} for rid in out["ids"]]
    assert out["delivered"] == [f"edit-{rid}" for rid in out["ids"]] and out["status_async"] == "done"
    with up.http() as http:  # the instance's API sees the driver's runs: they ran on its Ray, in its store
        listed = {r["id"]: r["status"] for r in http.get("/runs", params={"limit": 1000}).json()}
    assert all(listed.get(rid) == "done" for rid in out["ids"])
