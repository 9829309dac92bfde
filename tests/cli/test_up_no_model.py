"""A new user's first run: `jr2ray up` without --llm, then a notes run whose writer the Harness plays with the local
model. `up` warns that no model is served, and the run faults with an error that names the missing model endpoint
(it used to call port 8000, get the API's 401 and fault with a reason no one could act on)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from up_instance import UP_TIMEOUT_S, child_env, free_port, run_cli, stop_instance

pytest.importorskip("ray")
pytestmark = pytest.mark.ray


def test_up_without_llm_warns_and_the_agent_fault_names_the_missing_model(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = child_env(home, {"JR2RAY_NOTES_DRIVER": "harness"})
    env.pop("JR2RAY_LOCAL_BASE_URL", None)
    port = free_port()
    try:
        try:
            up = run_cli(["up", "--llm", "none", "--port", str(port), "--ray-port", str(free_port())], env,
                         UP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`jr2ray up` did not finish within {UP_TIMEOUT_S:.0f}s")
        assert up.code == 0, up.explain()
        assert "warning: no model is served" in up.stderr and f"http://127.0.0.1:{port}/v1" in up.stderr
        assert re.search(r"Runs of [a-z_, ]*\bnotes\b[a-z_, ]* will fault", up.stderr) and "--llm cpu" in up.stderr

        run = run_cli(["run", "notes", "--input", json.dumps({"changes": "fix: x"}), "--detach"], env)
        assert run.code == 0, run.explain()
        rid = run.json()["id"]
        token = (home / "token").read_text().strip()
        deadline, view = time.monotonic() + 180, {}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                          timeout=30) as http:
            while time.monotonic() < deadline:
                view = http.get(f"/runs/{rid}").json()
                if view["status"] not in ("queued", "active"):  # queued: not live yet (its host may be starting)
                    break
                time.sleep(0.5)
        assert view["status"] == "error", view
        reason = view["error"]["reason"]
        assert reason.startswith("the Agent's Turn could not go on: provider_error: ")
        assert f"no model is served at http://127.0.0.1:{port}/v1/chat/completions" in reason, reason
        assert "jr2ray up --llm cpu" in reason and "JR2RAY_LOCAL_BASE_URL" in reason
    finally:
        stop_instance(home, env)
