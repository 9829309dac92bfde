"""Rest (M9.2) and the verdict order (D3 before D4) through the real Run engine (LocalRun), with a journal.

The Menu tier pins the pure readings; this file pins what a Turn sees: a pick in a mode with a deadline is
answered at once, a timer that moves inside the Agent's state holds every pick, and each refusal leaves the
run's journal byte-identical.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import jr2ray
from jr2ray import agent, define_event, jr2_setup
from jr2ray.chart import ManualClock
from jr2ray.menu import Receipt, texts
from jr2ray.run import Store
from workflows.coder import machine as coder


class Empty(BaseModel):
    pass


def timer_machine(own_after: dict[Any, Any] | None = None, mode_after: dict[Any, Any] | None = None,
                  b_after: dict[Any, Any] | None = None) -> Any:
    """Agent w at t.s with modes a and b (`go` flips them); `finish` leaves for t.done; t.timeout is outside.
    `mode_after` puts timers on mode a, `b_after` on mode b."""
    events = [define_event(name=n, description=f"Pick {n}.", input=Empty) for n in ("go", "finish")]
    s: dict[str, Any] = {"invoke": {"src": "w"}, "initial": "a", "on": {"finish": "#t.done"},
                         "states": {"a": {"on": {"go": "b"}}, "b": {"on": {"go": "a"}}}}
    if own_after:
        s["after"] = own_after
    if mode_after:
        s["states"]["a"]["after"] = mode_after
    if b_after:
        s["states"]["b"]["after"] = b_after
    return jr2_setup(events=events, actors={"w": agent(model="local/tiny", instructions="You are w.")}).create_machine(
        {"id": "t", "initial": "s", "states": {"s": s, "timeout": {}, "done": {"type": "final"}}})


def journal_bytes(store_dir: Path, run_id: str) -> dict[str, bytes]:
    """The run's journal, byte for byte: the SQLite file and its WAL. The -shm file is SQLite's shared index of
    the WAL, which any reader touches, so it is not part of what the run wrote."""
    return {p.name: p.read_bytes() for p in sorted(store_dir.glob(f"{run_id}.sqlite*"))
            if not p.name.endswith("-shm")}


def journal_view(store: Store, run_id: str) -> Any:
    j = store.open(run_id)
    try:
        return [e.model_dump() for e in j.ledger()], j.latest_snapshot()
    finally:
        j.close()


async def settled(run: jr2ray.LocalRun) -> None:
    """Let the run write what its start staged: feed events between macrosteps are flushed on the next step of the loop,
    and the "before" of a refusal must be the journal as the refusal finds it."""
    await asyncio.sleep(0.05)


async def pick_now(run: jr2ray.LocalRun, name: str, args: Any = None) -> Receipt:
    """A pick whose receipt must come without the clock moving: a wait here would be a Turn locked out."""
    return await asyncio.wait_for(run.pick("w", name, args), timeout=5)


async def test_m9_2_a_pick_in_a_mode_with_a_deadline_is_answered_at_once(tmp_path: Path) -> None:
    clock = ManualClock()
    run = jr2ray.LocalRun(timer_machine(mode_after={60000: "#t.timeout"}), store=Store(tmp_path), clock=clock)
    assert run.surface("w").allowed == ["finish", "go"]
    r = await pick_now(run, "go")
    assert (r.delivered, r.moved, r.turn_complete, r.refused) == (True, True, False, None)
    assert r.allowed == ["finish", "go"] and run.value == {"s": "b"}
    r = await pick_now(run, "go")  # back into the mode with the deadline: still answered at once
    assert (r.delivered, r.moved, r.turn_complete) == (True, True, False) and run.value == {"s": "a"}
    clock.advance(60000)  # the deadline fires: it leaves the Agent's state, so the Turn ends
    assert run.value == "timeout" and run.surface("w").turn_over


async def test_m9_2_a_timer_that_moves_inside_holds_every_pick_and_the_refusal_changes_nothing(
        tmp_path: Path) -> None:
    clock = ManualClock()
    store = Store(tmp_path)
    run = jr2ray.LocalRun(timer_machine(own_after={1000: ".b"}), store=store, clock=clock)
    assert run.surface("w").allowed == []
    await settled(run)
    before, view = journal_bytes(tmp_path, run.id), journal_view(store, run.id)
    for name in ("go", "finish"):
        r = await pick_now(run, name)
        assert (r.delivered, r.refused, r.allowed) == (False, "not_at_rest", [])
    assert journal_bytes(tmp_path, run.id) == before and journal_view(store, run.id) == view
    assert run.value == {"s": "a"}
    clock.advance(1000)  # the timer moves the Machine to b, inside the Agent's state: Rest again
    assert run.value == {"s": "b"} and run.surface("w").allowed == ["finish", "go"]
    r = await pick_now(run, "finish")
    assert (r.delivered, r.moved, r.turn_complete) == (True, True, True)
    assert (await run.wait(5)).status == "done"


async def test_m9_2_a_pick_that_starts_an_in_state_timer_is_outstanding_until_it_fires(tmp_path: Path) -> None:
    """D7 with a timer as the work: `go` enters mode b, whose timer would move back to a, so the receipt waits."""
    clock = ManualClock()
    run = jr2ray.LocalRun(timer_machine(b_after={1000: "a"}), store=Store(tmp_path), clock=clock)
    pending = asyncio.ensure_future(run.pick("w", "go"))
    await asyncio.sleep(0.05)
    assert not pending.done() and run.value == {"s": "b"} and run.surface("w").allowed == []
    clock.advance(1000)
    r = await asyncio.wait_for(pending, timeout=5)
    assert (r.delivered, r.moved, r.turn_complete) == (True, True, False)
    assert run.value == {"s": "a"} and r.allowed == ["finish", "go"]


async def test_d3_dispute_with_empty_args_in_implement_is_unmoved_and_changes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run = jr2ray.LocalRun(coder, {"task": "Add a --verbose flag."}, store=store)
    await settled(run)
    before, view, value = journal_bytes(tmp_path, run.id), journal_view(store, run.id), run.value
    r = await asyncio.wait_for(run.pick("coder", "dispute", {}), timeout=5)
    assert (r.delivered, r.moved, r.turn_complete, r.refused, r.detail) == (False, False, False, "other_state", None)
    assert r.allowed == ["finish", "run_tests"]
    assert texts.receipt_text(r).splitlines() == [texts.correction("dispute"), "Allowed now: finish, run_tests."]
    assert journal_bytes(tmp_path, run.id) == before and journal_view(store, run.id) == view
    assert run.value == value
    run.cancel()


async def test_d4_finish_with_empty_args_in_implement_is_refused_bad_args_and_changes_nothing(
        tmp_path: Path) -> None:
    """The same empty arguments on a pick `implement` does take: now the schema speaks, and says what to fix."""
    store = Store(tmp_path)
    run = jr2ray.LocalRun(coder, {"task": "Add a --verbose flag."}, store=store)
    await settled(run)
    before, view = journal_bytes(tmp_path, run.id), journal_view(store, run.id)
    r = await asyncio.wait_for(run.pick("coder", "finish", {}), timeout=5)
    assert (r.delivered, r.refused) == (False, "bad_args") and "summary" in (r.detail or "")
    assert "Fix the arguments" in texts.receipt_text(r)
    assert journal_bytes(tmp_path, run.id) == before and journal_view(store, run.id) == view
    run.cancel()
