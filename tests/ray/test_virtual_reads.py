"""Reads are not activity, on a real local Ray: a client that keeps reading a live run (a Console page, a driver
polling its status) does not keep the run from parking, and once it is parked its reads come from its journal and
wake nothing. A write still counts: a pick restarts the run's idle clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import stats as _stats
from ray_helpers import until as _until
from ray_helpers import virtual_client

pytestmark = pytest.mark.ray
IDLE_S = 1.0
READ_EVERY_S = 0.1  # ten reads a second: far more often than the idle time


@pytest.fixture(scope="module")
def rclient(ray_home: Path) -> Iterator[Any]:
    with virtual_client(ray_home, "rruns", idle_deactivate_s=IDLE_S) as c:
        yield c


def _read_until_parked(run: Any, limit_s: float) -> tuple[int, bool]:
    """Read the run over and over until the registry says it parked (or `limit_s` passed): (reads, parked)."""
    reads = 0
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert run.status().status == "active"
        assert run.surface("writer").allowed == ["ask"]
        reads += 2
        if run.presence() == "parked":
            return reads, True
        time.sleep(READ_EVERY_S)
    return reads, False


def test_a_live_run_read_all_the_time_still_parks_and_its_reads_then_wake_nothing(rclient: Any) -> None:
    (run,) = rclient.start_many("notes", [{"changes": "read me"}])
    assert run.ready().status == "active"  # live now, its host known to the handle: the reads below go there
    assert run.host is not None
    reads, parked = _read_until_parked(run, limit_s=20 * IDLE_S)
    assert parked, f"the run was read {reads} times and never parked"
    assert reads >= 2
    before = _stats(rclient)["activations"]
    for _ in range(5):  # parked: status, Gates, history and a seat's surface come from its journal
        assert run.status().status == "active"
        assert run.gates() == []
        assert run.history()
        assert run.surface("writer").allowed == ["ask"]
    assert run.presence() == "parked"
    assert _stats(rclient)["activations"] == before
    run.cancel()


def test_a_pick_still_keeps_a_run_live(rclient: Any) -> None:
    (run,) = rclient.start_many("notes", [{"changes": "pick me"}])
    run.ready()
    woke = _stats(rclient)["activations"]
    for _ in range(int(3 * IDLE_S / 0.25)):  # a pick every quarter of the idle time, for three idle times
        receipt = run.pick("writer", "done", {"notes": "too soon"})  # refused by the guard: the Turn stays open
        assert receipt.delivered and not receipt.moved
        assert run.presence() == "live"
        time.sleep(0.25 * IDLE_S)
    assert _stats(rclient)["activations"] == woke  # never parked between picks: no wake was needed
    _until("the run to park once the picks stop", lambda: run.presence() == "parked")
    run.cancel()
