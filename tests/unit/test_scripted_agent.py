"""jr2ray.testing.ScriptedAgent on an in-process LocalRun: the notes writer played from a script, the editor
answering the Gate while the writer's `ask` waits for Rest."""

from __future__ import annotations

import asyncio

import pytest

import jr2ray
from jr2ray.testing import ScriptedAgent, ScriptError, Step
from workflows.notes import machine as notes


async def _editor(run: jr2ray.LocalRun, text: str) -> None:
    for _ in range(500):
        if run.gates():
            run.send(run.gates()[0].id, "reply", {"text": text})
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the Gate never opened")


async def test_a_script_plays_the_writer_to_published() -> None:
    run = jr2ray.LocalRun(notes, {"changes": "fix: crash"})
    writer = ScriptedAgent("writer", [
        Step(name="done", args={"notes": "too soon"}),  # delivered, but the guard holds it: the run stays put
        ("ask", {"question": "Which one?"}),
        ("done", lambda r: {"notes": f"# Notes\n{r.answer}"}),
    ], timeout=10)
    receipts, _ = await asyncio.gather(writer.play_async(run), _editor(run, "The crash fix."))
    assert [r.pick for r in receipts] == ["done", "ask", "done"]
    assert not receipts[0].moved and receipts[1].answer == "The editor replied: The crash fix."
    status = await run.wait(10)
    assert status.value == "published"
    assert status.output == {"notes": "# Notes\nThe editor replied: The crash fix."}


async def test_a_refused_step_stops_the_script_with_the_reason() -> None:
    run = jr2ray.LocalRun(notes, {"changes": "fix: crash"})
    writer = ScriptedAgent("writer", [("publish", {"notes": "x"})], timeout=10)
    with pytest.raises(ScriptError, match="expected delivery, got off_menu") as err:
        await writer.play_async(run)
    assert err.value.receipts[0].refused == "off_menu"
    expected = ScriptedAgent("writer", [Step(name="publish", args={}, expect_refusal="off_menu")], timeout=10)
    assert (await expected.play_async(run))[0].refused == "off_menu"


async def test_a_seat_with_no_turn_times_out_naming_the_seat() -> None:
    run = jr2ray.LocalRun(notes, {"changes": "fix: crash"})
    with pytest.raises(ScriptError, match="seat 'nobody' was not ready"):
        await ScriptedAgent("nobody", ["ask"], timeout=0.3).play_async(run)
