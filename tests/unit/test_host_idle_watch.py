"""A host's idle watch does not poll a run that cannot park yet. Past its idle marks, a run with a long Effect, a
Turn waiting on the model or a timer about due cannot park until something happens, and everything that can
happen (a call, an Effect's end, a timer firing) is an event. The watch used to look again every 20 ms (50 Hz per
busy live run); it now naps until the next event, which pokes it, so the run still parks on time."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from ray_stand_ins import host_in_process

import jr2ray.run.host as hostmod


async def _watched(h: Any, busy: list[bool], looks: list[float], monkeypatch: pytest.MonkeyPatch) -> str:
    """Adopt a notes run on `h`, parkable only when `busy[0]` is False; `looks` gets the time of each look."""
    monkeypatch.setattr(hostmod, "parkable", lambda eng: not busy[0])
    real = h.may_detach

    def may_detach(run_id: str, idle_s: float | None = None) -> bool:
        looks.append(asyncio.get_running_loop().time())
        return bool(real(run_id, idle_s))

    monkeypatch.setattr(h, "may_detach", may_detach)
    h.idle_s = h.early_s = 0.05
    rid = uuid.uuid4().hex[:12]
    await h.adopt(rid, h.store.location, {"workflow": "notes", "input": {"changes": "one"}, "env": {},
                                          "launcher": None, "create": True})
    return rid


def test_a_run_that_cannot_park_is_not_polled_and_parks_soon_after_the_event_that_frees_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    h = host_in_process(monkeypatch, tmp_path)
    busy, looks = [True], []

    async def go() -> tuple[int, float]:
        rid = await _watched(h, busy, looks, monkeypatch)
        await asyncio.sleep(0.8)  # 16 idle marks long
        quiet_looks = len(looks)
        while len(looks) == quiet_looks:  # the watch looks again, and naps anew...
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # ...and the event comes early in that nap
        busy[0] = False
        freed = asyncio.get_running_loop().time()
        await h.call(rid, "pick", ["writer", "bogus", {}, "d-1", None], False, False)  # a write: an event
        while not h.registry().deactivate.calls:
            await asyncio.sleep(0.01)
        parked_after = asyncio.get_running_loop().time() - freed
        h._watch.cancel()
        return quiet_looks, parked_after

    quiet_looks, parked_after = asyncio.run(go())
    assert quiet_looks <= 8, f"{quiet_looks} looks in 0.8 s at a run that could not park"
    assert parked_after < 0.5, parked_after  # one idle mark (0.05 s) after the event, not at the nap's end
