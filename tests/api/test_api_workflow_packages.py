"""A user's own workflows: a package pip-installed from a temp directory declares one workflow through the
`jr2ray.workflows` entry-point group and holds another that only `--workflows` (ApiConfig.workflows) names. Both are
listed and run through the API, next to the project's own `workflows/`; the package is uninstalled afterwards."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from serve.api import ApiConfig, build_app

from .api_helpers import ENV

pytestmark = pytest.mark.ray

DIST, PKG = "jr2ray-test-greetflows", "jr2ray_test_greetflows"

GATE_WORKFLOW = '''
from pydantic import BaseModel, Field

from jr2ray import assign, define_event, jr2_setup


class Door(BaseModel):
    who: str = Field(description="Whom to {verb}.")


class SignInput(BaseModel):
    by: str = Field(description="Who signs it.")


sign = define_event(name="sign", description="Sign the {noun}.", input=SignInput)

machine = jr2_setup(events=[sign], actors={{}}, input=Door).create_machine({{
    "id": "{name}",
    "context": lambda input: {{"who": input.who}},
    "initial": "waiting",
    "states": {{
        "waiting": {{"invoke": {{"src": "gate", "input": {{"meta": {{"asks": "a signature"}}}}}},
                    "on": {{"sign": {{"target": "sent", "actions": assign(by=lambda event: event.by)}}}}}},
        "sent": {{"type": "final"}},
    }},
    "output": lambda context: {{"text": "{verb} " + context["who"] + ", signed " + context["by"]}},
}})
'''


def _write_package(root: Path) -> Path:
    src = root / "greetflows"
    (src / PKG / "more").mkdir(parents=True)
    (src / "pyproject.toml").write_text(textwrap.dedent(f'''
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{DIST}"
        version = "0.0.1"

        [project.entry-points."jr2ray.workflows"]
        greet = "{PKG}.greet"

        [tool.setuptools]
        packages = ["{PKG}", "{PKG}.more"]
    '''))
    (src / PKG / "__init__.py").write_text("")
    (src / PKG / "greet.py").write_text(GATE_WORKFLOW.format(name="greet", verb="hello", noun="greeting"))
    (src / PKG / "more" / "__init__.py").write_text("")
    (src / PKG / "more" / "farewell.py").write_text(GATE_WORKFLOW.format(name="farewell", verb="bye",
                                                                          noun="farewell"))
    return src


def _pip(*argv: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *argv], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    src = _write_package(tmp_path_factory.mktemp("workflow_package"))
    # A regular (not editable) install into this environment, as a user's `pip install .` does; built offline.
    _pip("install", "-q", "--no-deps", "--no-build-isolation", str(src))
    importlib.invalidate_caches()
    try:
        yield PKG
    finally:
        _pip("uninstall", "-y", "-q", DIST)
        importlib.invalidate_caches()


@pytest.fixture(scope="module")
def plugin_app(installed: str, api_config: ApiConfig, ray_cluster: bool) -> FastAPI:
    config = api_config.model_copy(update={"workflows": [f"{installed}.more"], "run_env": dict(ENV)})
    return build_app(config)


async def _play(c: httpx.AsyncClient, name: str, who: str, by: str) -> dict[str, Any]:
    """Start a run of `name`, sign at its Gate once it opens, and return the finished run's view."""
    r = await c.post(f"/workflows/{name}/runs", json={"input": {"who": who}})
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    for _ in range(1200):
        gates = (await c.get(f"/runs/{rid}")).json()["gates"]
        if gates and gates[0]["accepts_now"] == ["sign"]:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the Gate of {name} never opened")
    sent = await c.post(f"/runs/{rid}/gates/{gates[0]['id']}/events", json={"event": "sign", "input": {"by": by}})
    assert sent.status_code == 200, sent.text
    for _ in range(600):
        view = (await c.get(f"/runs/{rid}")).json()
        if view["status"] != "active":
            return view
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run of {name} did not end")


async def test_installed_and_named_workflows_are_listed_and_run(plugin_app: FastAPI, token: str) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=plugin_app), base_url="http://jr2ray.test",
                                 headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        names = {w["name"] for w in (await c.get("/workflows")).json()}
        assert {"greet", "farewell", "notes"} <= names
        greet = await _play(c, "greet", "Ada", "Bob")
        assert (greet["status"], greet["output"]) == ("done", {"text": "hello Ada, signed Bob"})
        farewell = await _play(c, "farewell", "Ada", "Cy")
        assert (farewell["status"], farewell["output"]) == ("done", {"text": "bye Ada, signed Cy"})


async def test_without_the_module_the_named_workflow_is_unknown(installed: str, api_config: ApiConfig,
                                                                ray_cluster: bool, token: str) -> None:
    app = build_app(api_config.model_copy(update={"workflows": None}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://jr2ray.test",
                                 headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        names = {w["name"] for w in (await c.get("/workflows")).json()}
        assert "greet" in names and "farewell" not in names  # the entry point is found; the module is not named
        r = await c.post("/workflows/farewell/runs", json={"input": {"who": "Ada"}})
        assert r.status_code == 404
