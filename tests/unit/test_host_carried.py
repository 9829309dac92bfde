"""A pooled RunHost's answers to a driver's handle, in-process (no Ray): a write asked to carry how the run stands
answers `Carried` with the standing its watchers would be told next (the same object, made once per version); one
not asked answers plainly; and a pick whose run parks before Rest answers `PickParked`, never carried."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from ray_stand_ins import host_in_process

from jr2ray.menu import Receipt
from jr2ray.run.errors import first_outcome
from jr2ray.run.models import Carried, PickParked, Standing, Waiting

GATE = "notes.writing.asking"


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    return host_in_process(monkeypatch, tmp_path)


async def _started(h: Any) -> str:
    rid = uuid.uuid4().hex[:12]
    spec = {"workflow": "notes", "input": {"changes": "one"}, "env": {}, "launcher": None, "create": True}
    await h.adopt(rid, h.store.location, spec)
    return rid


def test_a_write_asked_to_carry_its_standing_answers_with_what_its_watchers_are_told(host: Any) -> None:
    async def go() -> tuple[Any, Any, Any]:
        rid = await _started(host)
        plain = await host.call(rid, "pick", ["writer", "bogus", {}, "d-1", None], False, False)
        carried = await host.call(rid, "pick", ["writer", "bogus", {}, "d-2", None], False, True)
        watched = await host.call(rid, "watch", [-1, None, 0.0], False)
        host._watch.cancel()
        return plain, carried, watched

    plain, carried, watched = asyncio.run(go())
    assert isinstance(plain, Receipt) and plain.refused  # a refusal is journaled: still a write's answer
    assert isinstance(carried, Carried) and isinstance(carried.value, Receipt) and carried.value.refused
    assert isinstance(watched, Standing) and watched is carried.standing  # made once for this version
    assert carried.standing.waiting.turns.get("writer"), "the writer's Turn is still at Rest after a refusal"


def test_a_pick_whose_run_parks_before_rest_answers_parked_not_carried(host: Any) -> None:
    async def go() -> tuple[str, Any]:
        rid = await _started(host)
        pick = asyncio.ensure_future(
            host.call(rid, "pick", ["writer", "ask", {"question": "Which first?"}, "ask-1", "waker-1"], False, True))
        for _ in range(20):  # until the ask waits for Rest at the open Gate
            await asyncio.sleep(0)
            if host.engine.gates():
                break
        assert await host.detach(rid)
        host._watch.cancel()
        return rid, await pick

    rid, got = asyncio.run(go())
    assert got == PickParked(run_id=rid, epoch=1)  # the activation it parked from


def test_a_watch_waits_through_a_bump_that_changes_nothing_its_caller_sees(host: Any) -> None:
    """Every call that writes bumps the host's version after its events did: a watch told the standing of those
    events answered again, the same standing, one Ray call a write for nothing. It waits on until a real change."""
    async def go() -> tuple[bool, Any, Standing]:
        rid = await _started(host)
        told = await host.call(rid, "watch", [-1, None, 0.0], False)
        watch = asyncio.ensure_future(host.call(rid, "watch", [told.version, None, 5.0], False))
        host._changed_now()  # a bump, nothing changed
        for _ in range(5):
            await asyncio.sleep(0)
        early = watch.done()
        pick = asyncio.ensure_future(host.call(rid, "pick", ["writer", "ask", {"question": "Which first?"}, "ask-1"]))
        got = await asyncio.wait_for(watch, 5)
        pick.cancel()
        host._watch.cancel()
        return early, told, got

    early, told, got = asyncio.run(go())
    assert not early, "answered a bump that changed nothing"
    assert told.waiting.gates == [] and got.waiting.gates == [GATE] and got.version > told.version


def test_a_run_that_went_there_and_back_is_told_it_is_back(host: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller told version V0 (the Gate open) whose own write carried V1 (the Gate closed) must be told when the
    run stands as at V0 again: comparing with V0 alone would call that nothing new, and its watch would hang."""
    from jr2ray.run import host as hostmod

    shape = {"gates": ["g"]}

    def standing_of(eng: Any, due_ms: Any = None, parked: bool = False, version: int = 0) -> Standing:
        return Standing(status=eng.status(), waiting=Waiting(gates=list(shape["gates"])), version=version)

    monkeypatch.setattr(hostmod, "standing_of", standing_of)

    async def go() -> tuple[Standing, Standing, Any]:
        rid = await _started(host)
        told = await host.call(rid, "watch", [-1, None, 0.0], False)  # V0: the Gate open
        shape["gates"] = []
        host._changed_now()
        carried = host._standing(host.engine)  # V1, as a write's Carried answer gives it
        shape["gates"] = ["g"]
        host._changed_now()  # V2: back as at V0
        got = await host.call(rid, "watch", [told.version, None, 1.0], False)
        host._watch.cancel()
        return told, carried, got

    told, carried, got = asyncio.run(go())
    assert carried.waiting.gates == [] and told.waiting.gates == ["g"]
    assert got is not None, "the watch said nothing changed: the caller was told V1 (no Gate) by its write"
    assert got.waiting.gates == ["g"] and got.version > carried.version


def test_a_refused_pick_answers_a_watch_though_no_standing_changed(host: Any) -> None:
    """A refusal changes no standing, but it is in the run's feed (a pick and its receipt), which the API's event
    stream follows by watching: a watch answers when the feed moved, not only when the standing did."""
    async def go() -> tuple[Standing, Any]:
        rid = await _started(host)
        told = await host.call(rid, "watch", [-1, None, 0.0], False)
        watch = asyncio.ensure_future(host.call(rid, "watch", [told.version, None, 2.0], False))
        await asyncio.sleep(0)
        await host.call(rid, "pick", ["writer", "bogus", {}, "d-1", None], False)
        got = await watch
        host._watch.cancel()
        return told, got

    told, got = asyncio.run(go())
    assert got is not None, "the watch waited out its poll: the refused pick's feed events were not told"
    assert got.waiting == told.waiting and got.version > told.version


async def _parked_at_gate(h: Any) -> tuple[str, list[Any]]:
    """A run whose writer asked (the Gate opened) and which parked before that pick's Rest; then adopted again, as a
    wake does. Returns the run id and the parked pick's call, as its driver would send it again."""
    rid = await _started(h)
    ask = ["writer", "ask", {"question": "Which first?"}, "ask-1", "waker-1"]
    pick = asyncio.ensure_future(h.call(rid, "pick", ask, False))
    for _ in range(20):
        await asyncio.sleep(0)
        if h.engine.gates():
            break
    assert await h.detach(rid)
    assert await pick == PickParked(run_id=rid, epoch=1)
    await h.adopt(rid, h.store.location, None)
    return rid, ask


def test_a_reply_carries_the_receipt_of_the_pick_parked_on_its_run(host: Any) -> None:
    """The Gate's reply and the parked `ask` sent again were two calls on the host at every wake: the reply now
    carries the pick, and its answer the pick's receipt (the same one the pick sent again alone gets)."""
    async def go() -> tuple[Any, Any]:
        rid, ask = await _parked_at_gate(host)
        got = await host.call(rid, "send", [GATE, "reply", {"text": "the first"}, "rep-1"], False, False, [ask])
        alone = await host.call(rid, "pick", ask, False)
        host._watch.cancel()
        return got, alone

    got, alone = asyncio.run(go())
    assert isinstance(got, Carried) and got.standing is None, "not asked for the standing: none made"
    assert got.value.ok and got.picks == [alone]
    assert alone.delivered and alone.delivery_id == "ask-1" and "done" in alone.allowed


def test_a_carried_pick_with_no_receipt_yet_comes_back_unanswered_and_is_not_delivered(host: Any) -> None:
    """A carried pick is only read back, never delivered: one the run has no receipt for (a new delivery id here)
    comes back None, for its driver to send alone, and nothing of it is journaled."""
    async def go() -> tuple[Any, list[str]]:
        rid, _ask = await _parked_at_gate(host)
        fresh = ["writer", "done", {"notes": "# Notes"}, "done-1", "waker-1"]
        got = await host.call(rid, "send", [GATE, "reply", {"text": "the first"}, "rep-1"], False, True, [fresh])
        admitted = [e.data["name"] for e in host.engine.journal.ledger("admission")]
        host._watch.cancel()
        return got, admitted

    got, admitted = asyncio.run(go())
    assert isinstance(got, Carried) and got.picks == [None] and got.standing is not None
    assert admitted == ["ask", "reply"], "the carried pick was delivered"


def test_a_watch_is_not_answered_again_with_what_its_handles_write_carried(host: Any) -> None:
    """A handle's watch and its reply's answer each told the driver the same news (the Gate closed, the writer's
    Turn open), one Ray call of the watch for nothing at every wake. A watch named in the write (its handle's own)
    waits for what changes after that; a watch of another name (another handle, the API's stream) is answered."""
    async def go() -> tuple[Any, bool, bool, Any]:
        rid, ask = await _parked_at_gate(host)
        told = await host.call(rid, "watch", [-1, None, 0.0], False)
        mine = asyncio.ensure_future(host.call(rid, "watch", [told.version, "waker-1", 5.0, "waker-1:Task-7"], False))
        other = asyncio.ensure_future(host.call(rid, "watch", [told.version, "waker-2", 5.0, "waker-2:Task-9"], False))
        await asyncio.sleep(0)
        got = await host.call(rid, "send", [GATE, "reply", {"text": "the first"}, "rep-1"], False, "waker-1:Task-7",
                              [ask])
        for _ in range(5):
            await asyncio.sleep(0)
        mine_early, other_answered = mine.done(), other.done()
        await host.call(rid, "pick", ["writer", "done", {"notes": "# N"}, "done-1"], False)  # a change after it
        after = await asyncio.wait_for(mine, 5)
        host._watch.cancel()
        return got, mine_early, other_answered, after

    got, mine_early, other_answered, after = asyncio.run(go())
    assert isinstance(got, Carried) and got.standing is not None and got.standing.waiting.gates == []
    assert not mine_early, "the watch the write named was answered with what the write had carried"
    assert other_answered, "another caller's watch must still hear of the change"
    assert after is not None and after.version > got.standing.version


async def _parked(h: Any) -> tuple[str, list[Any]]:
    """`_parked_at_gate`, let go again: the run parked at its Gate, the writer's `ask` parked with it."""
    rid, ask = await _parked_at_gate(h)
    assert await h.detach(rid)
    return rid, ask


def test_the_reply_that_wakes_a_run_rides_with_its_adoption(host: Any) -> None:
    """A driver's reply to a parked run was an activation (the registry asks a host to adopt the run) and then the
    reply itself on that host: two calls. It rides with the adoption now, with the parked pick it carries, and the
    adoption's answer holds the reply's."""
    async def go() -> Any:
        rid, ask = await _parked(host)
        info = await host.adopt(rid, host.store.location, None, None, None, False,
                                ["send", [GATE, "reply", {"text": "the first"}, "rep-1"], False, [ask]])
        host._watch.cancel()
        return info

    info = asyncio.run(go())
    got = first_outcome(info["first"])
    assert isinstance(got, Carried) and got.value.ok and got.picks[0].delivery_id == "ask-1"
    assert info["run_id"] and [e.data["name"] for e in host.engine.journal.ledger("admission")] == ["ask", "reply"]


def test_a_refused_reply_riding_with_an_adoption_takes_no_lease_and_writes_nothing(host: Any) -> None:
    """A reply the parked run refuses is refused before the run is taken: adopt raises the reply's own error (the
    driver raises it as from a call of its own), the host holds nothing (back to the pool), and the journal is
    byte-identical (before, the run was taken first, and its new lease was written). A good reply then takes it."""
    from jr2ray.run.errors import BadRequest, UnknownGate
    from jr2ray.run.store import journal_bytes

    async def go() -> tuple[list[BaseException], bytes, bytes, Any]:
        rid, ask = await _parked(host)
        before = journal_bytes(host.store.path(rid))
        errors: list[BaseException] = []
        for first in (["send", ["no.such.gate", "reply", {"text": "x"}, "rep-1"], "w:Task-1", [ask]],
                      ["send", [GATE, "reply", {"text": 7}, "rep-2"], False, [ask]]):  # a payload it refuses
            try:
                await host.adopt(rid, host.store.location, None, None, None, False, first)
            except Exception as exc:  # noqa: BLE001 - what the registry hands on to the driver
                errors.append(exc)
            assert host.run_id is None and host.engine is None and host.epoch is None
        after = journal_bytes(host.store.path(rid))
        info = await host.adopt(rid, host.store.location, None, None, None, False,
                                ["send", [GATE, "reply", {"text": "the first"}, "rep-3"], False, [ask]])
        host._watch.cancel()
        return errors, before, after, info

    errors, before, after, info = asyncio.run(go())
    assert [type(e) for e in errors] == [UnknownGate, BadRequest], errors
    assert "no open Gate 'no.such.gate'" in str(errors[0]) and "open now: notes.writing.asking" in str(errors[0])
    assert after == before, "a refused Gate event changed the parked run's journal"
    got = first_outcome(info["first"])
    assert isinstance(got, Carried) and got.value.ok and got.picks[0].delivery_id == "ask-1"
    assert [e.data["name"] for e in host.engine.journal.ledger("admission")] == ["ask", "reply"]


def test_a_late_pick_on_a_finished_run_is_answered_even_with_a_detach_queued_before_its_engine_step(host: Any) -> None:
    """The host took the pick (the run was still here), but its engine step came after a `detach` the registry had
    queued on the loop: the finished run was let go under it, and the pick got "deactivated" (a flaky API test).
    Now the run is not let go before the engine has the pick: the pick gets the ended Turn's receipt, and the run
    parks right after."""
    async def go() -> tuple[Any, Any, Any]:
        rid = await _started(host)
        await host.call(rid, "cancel", [], False)  # finished, and this activation has served a call
        pick = asyncio.ensure_future(host.call(rid, "pick", ["writer", "ask", {"question": "?"}, "late-1"], False))
        await asyncio.sleep(0)  # one step of the loop: the call is taken, its engine step queued behind this one
        early = await host.detach(rid)  # runs before the pick's engine step
        got = await pick
        later = await host.detach(rid)
        host._watch.cancel()
        return early, got, later

    early, got, later = asyncio.run(go())
    assert early is None  # not while a pick is on its way to the engine
    assert isinstance(got, Receipt) and got.refused == "turn_over" and not got.delivered
    assert later is not None and host.inflight == 0  # and at once after it


def test_a_reused_delivery_id_or_an_ended_run_is_refused_at_rest_too(host: Any) -> None:
    """A delivery id used before for another event is a Conflict, and a Gate event to an ended run an UnknownGate
    saying what it became: both decided before the parked run is taken, its journal unchanged. A true retry (the
    same event, the same id) still takes the run and is answered as before."""
    from jr2ray.run.errors import Conflict, UnknownGate
    from jr2ray.run.store import journal_bytes

    async def refused(rid: str, first: list[Any]) -> tuple[BaseException, bool]:
        before = journal_bytes(host.store.path(rid))
        with pytest.raises(Exception) as got:  # noqa: PT011 - which one is asserted below
            await host.adopt(rid, host.store.location, None, None, None, False, first)
        return got.value, journal_bytes(host.store.path(rid)) == before and host.run_id is None

    async def go() -> list[Any]:
        rid, ask = await _parked(host)
        reply = [GATE, "reply", {"text": "the first"}, "rep-1"]
        await host.adopt(rid, host.store.location, None, None, None, False, ["send", reply, False, [ask]])
        assert await host.detach(rid)
        conflict = await refused(rid, ["send", [GATE, "reply", {"text": "another"}, "rep-1"], False, None])
        retry = await host.adopt(rid, host.store.location, None, None, None, False, ["send", reply, False, None])
        await host.call(rid, "cancel", [], False)
        assert await host.detach(rid)
        ended = await refused(rid, ["send", reply[:3] + ["rep-2"], False, None])
        host._watch.cancel()
        return [conflict, first_outcome(retry["first"]), ended]

    (conflict, unchanged), retried, (ended, unchanged_too) = asyncio.run(go())
    assert type(conflict) is Conflict and "already used" in str(conflict) and unchanged
    assert retried.ok and retried.delivery_id == "rep-1"
    assert type(ended) is UnknownGate and str(ended).endswith("the run is cancelled") and unchanged_too


def test_a_finished_run_parks_without_naming_its_watchers_and_one_that_waits_names_them(host: Any) -> None:
    """A run parked while it waits (its writer's Turn at Rest) names the drivers watching it: the registry tells them
    when it is woken. A finished run is not woken for them (their watches end on its finished standing, which is
    what the watch is answered), so it names none: noted, they stayed in the registry for as long as it ran."""
    async def park_watched(rid: str) -> tuple[Any, Any]:
        told = await host.call(rid, "watch", [-1, None, 0.0], False)
        watch = asyncio.ensure_future(host.call(rid, "watch", [told.version, "waker-1", 5.0], False))
        await asyncio.sleep(0)
        gone = await host.detach(rid)
        return gone, await watch

    async def go() -> tuple[tuple[Any, Any], tuple[Any, Any]]:
        waiting = await park_watched(await _started(host))
        ended = await _started(host)
        await host.call(ended, "cancel", [], False)
        finished = await park_watched(ended)
        host._watch.cancel()
        return waiting, finished

    (waiting, its_watch), (finished, last_watch) = asyncio.run(go())
    assert waiting.watchers == ["waker-1"] and its_watch.parked and its_watch.status.status == "active"
    assert finished.watchers == [] and last_watch.parked and last_watch.status.status == "cancelled"
