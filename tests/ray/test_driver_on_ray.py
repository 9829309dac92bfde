"""The driver API on a real local Ray: start_many returns at once, wait returns as runs finish, the asyncio forms,
and a pick that opens a Gate leaves the caller free to answer it."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from ray_helpers import actor_gone

from jr2ray.run import RunError
from jr2ray.testing import ScriptedAgent

pytestmark = pytest.mark.ray
GATE = "notes.writing.asking"


def _writer(text: str = "x") -> ScriptedAgent:
    return ScriptedAgent("writer", [("ask", {"question": "q?"}), ("done", {"notes": text})], timeout=60)


async def _answer(run, text: str) -> None:
    while not any(g.id == GATE and g.accepts_now for g in await run.gates_async()):
        await asyncio.sleep(0.05)
    await run.send_async(GATE, "reply", {"text": text})


def test_start_many_then_wait_collects_them_as_they_finish(client) -> None:
    with pytest.raises(ValueError, match="input 1"):
        client.start_many("notes", [{"changes": "ok"}, {"changes": 42}])
    before = set(client.store.run_ids())
    runs = client.start_many("notes", [{"changes": f"fix {i}"} for i in range(3)])
    assert len({r.id for r in runs}) == 3
    assert before.isdisjoint(r.id for r in runs)

    done, pending = client.wait(runs, timeout=0.5)  # nobody has picked: none can finish
    assert done == [] and pending == runs

    async def drive_first_two() -> None:
        await asyncio.gather(*(_writer(f"n{i}").play_async(r) for i, r in enumerate(runs[:2])),
                             *(_answer(r, "ok") for r in runs[:2]))

    asyncio.run(drive_first_two())
    done, pending = client.wait(runs, timeout=30, num_returns=2)
    assert {h.id for h in done} == {runs[0].id, runs[1].id} and pending == [runs[2]]
    assert sorted(h.final.output["notes"] for h in done if h.final) == ["n0", "n1"]
    runs[2].cancel()
    finished = [h.id for h in client.as_finished(runs, timeout=30)]
    assert sorted(finished) == sorted(r.id for r in runs)
    assert runs[2].final is not None and runs[2].final.status == "cancelled"


def test_a_pick_that_opens_a_gate_does_not_block_the_caller(client) -> None:
    (run,) = client.start_many("notes", [{"changes": "fix: crash"}])

    async def drive() -> tuple[object, object, bool]:
        await asyncio.wait_for(_wait_turn(run), 60)
        ref = run.pick_async("writer", "ask", {"question": "Which?"})  # returns at once: the receipt waits for Rest
        while not await run.gates_async():
            await asyncio.sleep(0.05)
        waiting = not ref.done()  # the Gate is open and the caller is free: no receipt yet
        await _answer(run, "The crash fix.")
        receipt = await ref
        final = await run.pick_async("writer", "done", {"notes": "# Notes"})
        status = await run.wait_async(30)
        return receipt, (final, status), waiting

    receipt, (final, status), waiting = asyncio.run(drive())
    assert waiting
    assert receipt.answer == "The editor replied: The crash fix." and final.turn_complete
    assert status.value == "published"
    assert asyncio.run(run.status_async()).status == "done"
    deadline = time.monotonic() + 60  # a finished run's actor exits; the asyncio reads then come from the journal
    while not actor_gone(run.id):
        assert time.monotonic() < deadline, "the finished run's actor never exited"
        time.sleep(0.5)
    assert asyncio.run(run.status_async()).output == {"notes": "# Notes"}
    assert asyncio.run(run.wait_async(1)).status == "done"


async def _wait_turn(run) -> None:
    while True:
        with contextlib.suppress(RunError):  # the Turn is not open yet
            if (await run.surface_async("writer")).allowed:
                return
        await asyncio.sleep(0.05)
