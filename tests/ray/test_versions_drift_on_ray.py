"""Drift on a real local Ray: runs whose version is gone from the store are `drifted` in the index and the journal,
listed and filtered, read with their last value and context, and cancelled; they keep their timer rows, and once the
version is back (and the instance restarted) each overdue timer fires exactly once."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import until as _until
from ray_helpers import virtual_client

from jr2ray.run import versions
from jr2ray.run.store import open_store

pytestmark = pytest.mark.ray
IDLE_S = 0.5
DELAY_MS = 15000  # long enough that the runs park at `waiting` before the instance goes down

TICK = '''
from pydantic import BaseModel, Field

from jr2ray import assign, define_event, jr2_setup


class Door(BaseModel):
    who: str = Field(description="Who waits.")


class Ok(BaseModel):
    by: str = Field(description="Who says so.")


ok = define_event(name="ok", description="Let it go on.", input=Ok)

machine = jr2_setup(events=[ok], actors={}, input=Door).create_machine({
    "id": "tick",
    "context": lambda input: {"who": input.who, "fired": 0},
    "initial": "waiting",
    "states": {
        "waiting": {"invoke": {"src": "gate", "input": {"meta": {"asks": "ok"}}},
                    "after": {DELAY: {"target": "late", "actions": assign(fired=lambda context: context["fired"] + 1)}},
                    "on": {"ok": {"target": "done"}}},
        "late": {"invoke": {"src": "gate", "input": {"meta": {"asks": "ok, late"}}}, "on": {"ok": {"target": "done"}}},
        "done": {"type": "final"},
    },
})
'''.replace("DELAY", str(DELAY_MS))


@pytest.fixture(scope="module")
def tick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("tickflows_root")
    (root / "tickflows").mkdir()
    (root / "tickflows" / "__init__.py").write_text("")
    (root / "tickflows" / "tick.py").write_text(TICK)
    sys.path.insert(0, str(root))
    old = os.environ.get("JR2RAY_WORKFLOWS")
    os.environ["JR2RAY_WORKFLOWS"] = "tickflows.tick"
    yield
    sys.path.remove(str(root))
    if old is None:
        os.environ.pop("JR2RAY_WORKFLOWS", None)
    else:
        os.environ["JR2RAY_WORKFLOWS"] = old


def _status(store: Any, run_id: str) -> str:
    line = store.indexed(run_id)
    return line.status if line else "?"


def test_drift_is_durable_readable_cancellable_and_timers_fire_once_after_revert(ray_home: Path, tick: None) -> None:
    where = "drift"
    with virtual_client(ray_home, where, idle_deactivate_s=IDLE_S) as c:  # `up`: three runs park at their Gate
        started = time.time()
        runs = [c.start("tick", {"who": f"w{i}"}) for i in range(3)]
        ids = [r.id for r in runs]
        _until("the runs to park", lambda: not set(ids) & set(c.stats()["live"]))
        assert all(r.status().value == "waiting" for r in runs)
        version = c.store.indexed(ids[0]).version
        assert version and all(c.store.indexed(r).version == version for r in ids)
    store = open_store(ray_home / where)  # `down`, and the version is gone from the store
    assert store.drop_version("tick", version)
    versions.forget("tick", version)
    time.sleep(max(0.0, started + DELAY_MS / 1000 + 0.5 - time.time()))  # every run's timer is overdue now

    with virtual_client(ray_home, where, idle_deactivate_s=IDLE_S) as c:  # `up`: the timers try to wake them
        c.registry()
        _until("the runs to be drifted", lambda: all(_status(c.store, r) == "drifted" for r in ids), 60)
        drifted = [line.id for line in c.store.list_runs(status="drifted")]
        assert sorted(drifted) == sorted(ids)
        j = c.store.open(ids[0])
        try:
            said = [e.data for e in j.ledger("status")]
        finally:
            j.close()
        assert said[-1]["status"] == "drifted" and "not in the store" in said[-1]["error"]
        st = c.get(ids[0]).status()
        assert st.status == "drifted" and st.value == "waiting" and st.context == {"who": "w0", "fired": 0}
        assert st.version == version
        timers = c.store.timer_index()
        try:
            assert sorted(r for r, _at in timers.due(float("inf"))) == sorted(ids)  # each kept its reminder
        finally:
            timers.close()
        assert c.get(ids[2]).cancel().status == "cancelled"
        assert _status(c.store, ids[2]) == "cancelled"

    versions.current(open_store(ray_home / where), "tick")  # the same file again: its version is back
    with virtual_client(ray_home, where, idle_deactivate_s=IDLE_S) as c:  # `up` once more
        c.registry()
        for rid in ids[:2]:
            _until(f"run {rid}'s overdue timer to fire", lambda rid=rid: c.get(rid).status().value == "late", 60)
        time.sleep(1.0)
        for rid in ids[:2]:
            st = c.get(rid).status()
            assert st.status == "active" and st.context["fired"] == 1  # once, not twice
            c.get(rid).send("tick.late", "ok", {"by": "me"})
            assert c.get(rid).wait(30).status == "done"
        assert _status(c.store, ids[2]) == "cancelled"
