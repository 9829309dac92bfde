"""A moved run's Harness starts over on the new version, on a real local Ray with a scripted model.

A writer (a Harness, `continue`) drafts, an editor reviews at a Gate while the run parks, then the same writer
revises. The file is edited under the parked run and `jr2ray migrate` moves it: the revising Turn's first model
request carries the new version's tools block and the moved notice, in a fresh conversation, and the old
conversation stays in the journal."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_helpers import stats as _stats
from ray_helpers import until as _until
from ray_helpers import workflow_package

from conformance_fakes import FakeModelServer, calls

pytestmark = pytest.mark.ray
OLD_SUBMIT = "Submit the draft for review."
NEW_SUBMIT = "Hand in the draft; the editor reviews it."
SOURCE = '''"""Draft, review at a Gate, revise: one writer seat with a continued conversation."""

from pydantic import BaseModel, Field

from jr2ray import agent, define_event, jr2_setup


class Draft(BaseModel):
    text: str = Field(description="The draft.")


class Door(BaseModel):
    topic: str = Field(description="What to write about.")


submit = define_event(name="submit", description="%s", input=Draft)
review = define_event(name="review", description="The editor's review.", input=Draft)

machine = jr2_setup(
    events=[submit, review],
    actors={"writer": agent(model="local/tiny", instructions="You write one short paragraph.", workspace="none",
                            driver="harness")},
    input=Door,
).create_machine({
    "id": "vrevise",
    "initial": "drafting",
    "states": {
        "drafting": {"invoke": {"src": "writer", "input": {"prompt": "Draft it.", "continue": True}},
                     "on": {"submit": "review"}},
        "review": {"invoke": {"src": "gate", "input": {"meta": {}}}, "on": {"review": "revising"}},
        "revising": {"invoke": {"src": "writer", "input": {"prompt": "Revise it.", "continue": True}},
                     "on": {"submit": "published"}},
        "published": {"type": "final"},
    },
})
'''


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with workflow_package(tmp_path_factory.mktemp("vrevise_root"), "hflows", "vrevise", SOURCE % OLD_SUBMIT) as path:
        yield path


@pytest.fixture(scope="module")
def hclient(ray_home: Path, flow: Path) -> Iterator[Any]:
    """Virtual runs whose Agent seats are Harness actors (the Ray launcher)."""
    import jr2ray
    from jr2ray.settings import load_settings

    os.environ["JR2RAY_HOME"] = str(ray_home)
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    try:
        yield jr2ray.connect(store=ray_home / "vharness", launcher="jr2ray.harness.launcher:RayTurnLauncher",
                             settings=load_settings(idle_deactivate_s=0.5), virtual=True)
    finally:
        ray.shutdown()


def _migrate(client: Any) -> int:
    from jr2ray.cli.main import main

    os.environ["JR2RAY_STORE"] = client.store.location
    try:
        return main(["migrate", "vrevise"])
    finally:
        os.environ.pop("JR2RAY_STORE", None)


def _contents(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if isinstance(m.get("content"), str)]


def test_a_moved_runs_harness_starts_a_fresh_conversation_on_the_new_tools_with_the_notice(
        hclient: Any, flow: Path, model: FakeModelServer) -> None:
    from jr2ray.menu.texts import WORKFLOW_MOVED

    model.reset()
    model.push(calls(("submit", {"text": "draft one"})))
    run = hclient.start("vrevise", {"topic": "tides"}, env={"JR2RAY_LOCAL_BASE_URL": model.url})
    (gate,) = _until("the review Gate", lambda: run.gates())
    _until("the run to park at its Gate", lambda: run.id not in _stats(hclient)["live"])
    first = model.requests[0].body
    tools_old = json.dumps(first["tools"])
    assert OLD_SUBMIT in tools_old and any("Draft it." in c for c in _contents(first))

    flow.write_text(SOURCE % NEW_SUBMIT)  # a text edit: the tools block differs, the states do not
    assert _migrate(hclient) == 0
    model.push(calls(("submit", {"text": "draft two"})))
    run.send(gate.id, "review", {"text": "Shorter, please."})
    assert run.wait(60).status == "done"

    assert len(model.requests) == 2
    moved = model.requests[1].body
    tools_new = json.dumps(moved["tools"])
    assert NEW_SUBMIT in tools_new and OLD_SUBMIT not in tools_new
    said = _contents(moved)
    assert any(WORKFLOW_MOVED in c for c in said) and any("Revise it." in c for c in said)
    assert not any("Draft it." in c or "draft one" in c for c in said)  # a fresh conversation, not the old one

    j = hclient.store.open(run.id)
    try:
        kept: dict[str, list[str]] = {}
        for e in j.ledger("transcript"):
            kept.setdefault(e.key or "", []).extend(e.data["messages"])
    finally:
        j.close()
    old_key = f"{run.id}:root:writer"
    assert old_key in kept and any("Draft it." in m for m in kept[old_key])  # kept, not continued
    assert f"{old_key}:moved1" in kept
