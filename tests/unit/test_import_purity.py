"""Importing a pure layer stays pure: no Ray, no HTTP or model client, no Run or Harness layer.

Each import runs in a fresh interpreter, so what another test already imported cannot hide a leak.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY_TOP = ("ray", "httpx", "openai", "anthropic", "fastapi")
HEAVY_LAYERS = ("jr2ray.run", "jr2ray.harness")

PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after(module: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True,
                         env=env, cwd=ROOT, check=True, timeout=120)
    return json.loads(out.stdout)


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules
            if m.split(".")[0] in HEAVY_TOP or any(m == h or m.startswith(h + ".") for h in HEAVY_LAYERS)]


@pytest.mark.parametrize("module", ["jr2ray", "jr2ray.chart", "jr2ray.authoring", "jr2ray.menu"])
def test_importing_a_pure_layer_loads_nothing_heavy(module: str) -> None:
    modules = loaded_after(module)
    assert module in modules  # the probe really imported it
    assert heavy(modules) == []


def test_the_probe_sees_a_heavy_import() -> None:
    """The same probe on the Run layer does report it, so an empty list above means something."""
    assert "jr2ray.run" in heavy(loaded_after("jr2ray.run"))


def test_top_level_names_still_resolve_lazily() -> None:
    import jr2ray

    assert jr2ray.agent is __import__("jr2ray.authoring", fromlist=["agent"]).agent
    assert jr2ray.LocalRun.__name__ == "LocalRun"
    assert set(jr2ray.__all__) <= set(dir(jr2ray))
    with pytest.raises(AttributeError, match="no_such_name"):
        jr2ray.no_such_name  # noqa: B018


def test_a_pooled_run_host_loads_no_http_client_or_model_sdk() -> None:
    """Every pooled RunHost process imports its module: an HTTP client (httpx pulls in rich, click and pygments,
    ~5 MB) or a model SDK there would cost that much in every host; they load when an Effect or a Turn needs them."""
    modules = loaded_after("jr2ray.run.host")
    assert "jr2ray.run.host" in modules
    assert [m for m in modules if m.split(".")[0] in ("httpx", "rich", "pygments", "openai", "anthropic")] == []
