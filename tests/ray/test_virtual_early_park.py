"""Early parking on a real local Ray: while a run waits for a slot, a live run that has served a call and is idle
past `queued_idle_s` parks at once (the idle setting is long here), and its slot goes to the waiting run. A run
that nobody has called yet keeps its slot: its caller is about to send the call that woke it (a driver that only
waits to hear how it stands has not made that call)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import stats as _stats
from ray_helpers import until as _until
from ray_helpers import virtual_client

from jr2ray.run.store import journal_bytes

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def eclient(ray_home: Path) -> Iterator[Any]:
    with virtual_client(ray_home, "eruns", idle_deactivate_s=600, max_live_runs=1, queued_idle_s=0.2) as c:
        yield c


def test_a_called_idle_run_yields_its_slot_to_a_queued_run(eclient: Any) -> None:
    (first,) = eclient.start_many("notes", [{"changes": "first"}])
    _until("the first run to go live", lambda: first.id in _stats(eclient)["live"])
    (second,) = eclient.start_many("notes", [{"changes": "second"}])
    _until("the second run to queue", lambda: _stats(eclient)["queued"] == [second.id])
    asyncio.run(first.until_turn("writer", timeout=30))  # a driver waiting to hear of the Turn has not called yet
    time.sleep(1.0)  # not called yet: the first run keeps its slot however long the line waits
    assert _stats(eclient)["live"] == [first.id] and second.presence() == "queued"
    assert first.surface("writer").allowed == ["ask"]  # its call: from now on it may yield its slot
    _until("the second run to take the slot", lambda: _stats(eclient)["live"] == [second.id])
    assert first.presence() == "parked" and _stats(eclient)["early_parks"] >= 1
    before = journal_bytes(eclient.store.path(first.id))
    assert second.surface("writer").allowed == ["ask"]  # the second run started from its input
    assert journal_bytes(eclient.store.path(first.id)) == before  # parked: nothing more written for it
    second.cancel()
    receipt = first.pick("writer", "done", {"notes": "too soon"})  # it wakes on a pick (refused by the guard)
    assert receipt.delivered and not receipt.moved
    first.cancel()
    _until("both runs to deactivate", lambda: not _stats(eclient)["live"])


def test_a_run_whose_driver_was_just_handed_a_receipt_keeps_its_slot_until_the_driver_calls(eclient: Any) -> None:
    """The Gate's reply hands the writer's script the receipt of its `ask`: the script acts on it next (it sends
    `done`), so the run is not parked early under it (that call would wake it again: a third activation). Once the
    script has called on the Turn, the early rule applies again."""
    (first,) = eclient.start_many("notes", [{"changes": "first"}])
    _until("the first run to go live", lambda: first.id in _stats(eclient)["live"])
    asked = first.pick_async("writer", "ask", {"question": "which?"})  # its receipt waits for Rest past the Gate
    _until("the Gate to open", lambda: "notes.writing.asking" in [g.id for g in first.gates()])
    first.send("notes.writing.asking", "reply", {"text": "the first"}, "reply-1")  # the writer's Turn reopens
    assert asked.result(30).delivered
    activations = _stats(eclient)["activations"]
    (second,) = eclient.start_many("notes", [{"changes": "second"}])
    _until("the second run to queue", lambda: _stats(eclient)["queued"] == [second.id])
    time.sleep(1.0)  # 5x queued_idle_s: the script has not called since its receipt, so the run keeps its slot
    assert _stats(eclient)["live"] == [first.id] and second.presence() == "queued"
    assert first.surface("writer").allowed == ["ask", "done"]  # the driver looks: now it may yield its slot
    _until("the second run to take the slot", lambda: _stats(eclient)["live"] == [second.id])
    assert first.presence() == "parked"
    assert _stats(eclient)["activations"] == activations + 1  # the second run's only
    second.cancel()
    first.cancel()
    _until("both runs to deactivate", lambda: not _stats(eclient)["live"])
