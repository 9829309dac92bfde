"""Early parking on a real local Ray: while a run waits for a slot, a live run that has served a call and is idle
past `queued_idle_s` parks at once (the idle setting is long here), and its slot goes to the waiting run. A run
that nobody has called yet keeps its slot: its caller is about to send the call that woke it."""

from __future__ import annotations

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
