"""A run whose next timer is about due does not park. The timer service wakes a parked run up to `LEAD_MS` before
its timer; a park in that moment writes the timer's row again with the same due time, and the service, done with
its wake, drops that row as fired: the run would sleep past its timer. Kept live, the run fires the timer itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel, Field

from jr2ray import define_event, jr2_setup
from jr2ray.run import LocalRun, Store
from jr2ray.run.parking import SOON_MS, parkable


class Door(BaseModel):
    who: str = Field(description="Who waits.")


class Ok(BaseModel):
    by: str = Field(description="Who says so.")


def _ticking(delay_ms: int):  # noqa: ANN202 - a Jr2Machine
    ok = define_event(name="ok", description="Let it go on.", input=Ok)
    return jr2_setup(events=[ok], actors={}, input=Door).create_machine({
        "id": "tick",
        "initial": "waiting",
        "states": {
            "waiting": {"invoke": {"src": "gate", "input": {"meta": {"asks": "ok"}}},
                        "after": {delay_ms: {"target": "late"}},
                        "on": {"ok": {"target": "done"}}},
            "late": {"invoke": {"src": "gate", "input": {"meta": {"asks": "ok, late"}}},
                     "on": {"ok": {"target": "done"}}},
            "done": {"type": "final"},
        },
    })


async def test_a_run_at_a_gate_with_a_far_timer_parks_and_one_with_a_timer_about_due_does_not(tmp_path: Path) -> None:
    far = LocalRun(_ticking(60_000), {"who": "far"}, store=Store(tmp_path / "far"))
    near = LocalRun(_ticking(int(SOON_MS) // 2), {"who": "near"}, store=Store(tmp_path / "near"))
    assert parkable(far.engine)
    assert not parkable(near.engine)
    assert near.status().value == "waiting"  # the timer has not fired: it is only near
    while near.status().value == "waiting":  # live, the run fires its timer itself...
        await asyncio.sleep(0.05)
    assert near.status().value == "late" and parkable(near.engine)  # ...and then parks at its next Gate

