"""A virtual run's handle waiting, in-process. `until_turn(..., counted_from_open=True)` (what `ScriptedAgent` waits
with): a Turn found already at Rest when it is first seen open is answered from that one look, with no second watch
of the run; a Turn that opens before it is at Rest is waited for again. A write's answer: the standing the host
carried with it is what the handle's waiters are answered from next, and a write without one leaves them waiting
for a fresh look (a script that answers a Gate and waits for it again is never told it is still open)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from ray_stand_ins import Wired

from jr2ray.run.models import Carried, RunStatus, Standing, TurnView, Waiting
from jr2ray.run.virtual import VirtualRunHandle
from jr2ray.run.watching import SharedWatch


def _standing(allowed: list[str] | None) -> Standing:
    turn = TurnView(iid="t1", slot="writer", state="notes.writing", active=True, conversation="c1", allowed=allowed)
    status = RunStatus(id="run-1", workflow="notes", digest="d", status="active", turns=[turn])
    return Standing(status=status, waiting=Waiting.of(status))


def _watches(monkeypatch: pytest.MonkeyPatch, seen: list[Standing]) -> list[str]:
    """Each `_until` (one watch of the run, shared by its waiters) answers with the next standing its test accepts."""
    asked: list[str] = []

    async def until(self: VirtualRunHandle, want: Callable[[Standing], bool], what: str) -> Standing:
        asked.append(what)
        return next(st for st in seen if want(st))
    _wait_with(monkeypatch, until)
    return asked


def _wait_with(monkeypatch: pytest.MonkeyPatch, until: Callable[..., Coroutine[Any, Any, Standing]]) -> None:
    """The handle's watches answered by `until`, awaited right here (not on a driver's loop)."""
    async def direct(self: VirtualRunHandle, coro: Coroutine[Any, Any, Any]) -> Any:
        return await coro
    monkeypatch.setattr(VirtualRunHandle, "_until", until)
    monkeypatch.setattr(VirtualRunHandle, "_async", direct)


def test_a_turn_at_rest_when_first_seen_open_takes_one_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _watches(monkeypatch, [_standing(["ask", "done"])])
    st = asyncio.run(VirtualRunHandle("run-1", registry=None).until_turn("writer", timeout=5, counted_from_open=True))
    assert st.waiting.turns == {"writer": ["ask", "done"]}
    assert len(asked) == 1, asked


def test_a_turn_open_but_not_at_rest_is_waited_for_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _watches(monkeypatch, [_standing(None), _standing(["done"])])
    st = asyncio.run(VirtualRunHandle("run-1", registry=None).until_turn("writer", timeout=5, counted_from_open=True))
    assert st.waiting.turns == {"writer": ["done"]}
    assert len(asked) == 2, asked


class _OnLoop:
    """The driver's loop, as the handle's `_invoke` sees it: already on it."""

    def on_loop(self) -> bool:
        return True


def _watched_handle(seen: Standing) -> tuple[VirtualRunHandle, SharedWatch]:
    handle = VirtualRunHandle("run-1", registry=None)
    handle._waker = _OnLoop()  # type: ignore[assignment]
    shared = handle._shared = SharedWatch(handle)
    shared.pump = object()  # type: ignore[assignment]  # a watch its waiters share is open
    shared.take(seen)
    return handle, shared


def test_a_writes_carried_standing_answers_the_next_waiter() -> None:
    before, after = _standing(["ask", "done"]), _standing(None).model_copy(update={"version": 3})
    handle, shared = _watched_handle(before)
    assert handle.landed(Carried(value="the receipt", standing=after)) == "the receipt"
    assert shared.latest == after and not shared.stale


def test_a_write_without_a_standing_leaves_the_watchs_standing_stale() -> None:
    handle, shared = _watched_handle(_standing(["ask", "done"]))
    assert handle.landed("the receipt") == "the receipt"
    assert shared.stale  # the next waiter waits for a fresh look, not the standing from before the write


class _OffLoop:
    """The driver's loop as a pick's answer sees it on Ray's thread: elsewhere, reached through its inbox."""

    def __init__(self) -> None:
        self.handed: list[Callable[[], None]] = []
        self.inbox = self

    def on_loop(self) -> bool:
        return False

    def put(self, call: Callable[[], None]) -> None:
        self.handed.append(call)


def test_a_carried_standing_that_lands_off_the_drivers_loop_is_taken_there_and_stale_till_then() -> None:
    """A pick's answer lands on Ray's thread; the watch belongs to the driver's loop, so the standing it carried
    crosses over, and until it is taken there no waiter may be answered from the standing from before the write."""
    before, after = _standing(["ask", "done"]), _standing(None).model_copy(update={"version": 3})
    handle, shared = _watched_handle(before)
    off = handle._waker = _OffLoop()  # type: ignore[assignment]
    assert handle.landed(Carried(value="the receipt", standing=after)) == "the receipt"
    assert shared.latest == before and shared.stale and len(off.handed) == 1
    off.handed[0]()  # the driver's loop runs what crossed over
    assert shared.latest == after and not shared.stale


def test_a_write_that_lands_when_nobody_waits_hands_nothing_over_and_starts_no_watch() -> None:
    handle = VirtualRunHandle("run-1", registry=None)
    off = handle._waker = _OffLoop()  # type: ignore[assignment]
    assert handle.landed(Carried(value="the receipt", standing=_standing(None))) == "the receipt"
    assert handle._shared is None and off.handed == []


class _Waker:
    """What a shared watch reads of the driver's loop: its wake id."""

    id = "wake-1"


def test_a_handle_keeps_its_shared_watch_only_while_someone_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two waiters share one watch; once neither waits, the watch stops and the handle holds nothing for it (a
    driver may hold 10,000 handles of runs nobody waits on)."""
    first, later = _standing(None), _standing(["ask", "done"]).model_copy(update={"version": 2})
    feeds: list[str | None] = []

    async def feed(handle: Any, told: str | None = None) -> Any:
        feeds.append(told)
        yield first
        await asyncio.sleep(0.01)
        yield later
        await asyncio.Event().wait()  # a live run that does not change again

    monkeypatch.setattr("jr2ray.run.watching.watch", feed)

    async def main() -> tuple[Standing, Standing, int, SharedWatch | None]:
        handle = VirtualRunHandle("run-1", registry=None)
        handle._waker = _Waker()  # type: ignore[assignment]
        opened = asyncio.ensure_future(handle._until(lambda st: True, "anything"))
        at_rest = asyncio.ensure_future(handle._until(lambda st: bool(st.waiting.turns.get("writer")), "at Rest"))
        await asyncio.sleep(0.001)
        during = handle._shared  # both wait: the first standing answered one of them only
        waiting = 0 if during is None else len(during.waiters)
        got = await asyncio.wait_for(asyncio.gather(opened, at_rest), 5)
        for _ in range(5):  # the pump's clean-up, once no waiter is left
            await asyncio.sleep(0)
        return got[0], got[1], waiting, handle._shared

    a, b, waiting, after = asyncio.run(main())
    assert (a, b) == (first, later)
    assert len(feeds) == 1 and feeds[0] is not None and feeds[0].startswith("wake-1:")  # one watch, named
    assert waiting == 1 and after is None


def test_a_watch_whose_waiter_gives_up_or_whose_let_go_is_cancelled_is_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiter that times out stops the watch, and the handle lets go of it. A cancel that lands while the watch is
    being closed (its feed's clean-up awaits) still lets it go: a later waiter gets a new watch and its answer,
    instead of finding a finished pump and waiting for ever."""
    seen = _standing(["ask", "done"])
    feeds: list[str | None] = []

    async def feed(handle: Any, told: str | None = None) -> Any:
        feeds.append(told)
        try:
            yield seen
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)  # a clean-up that takes a while (a round letting go of its call)

    monkeypatch.setattr("jr2ray.run.watching.watch", feed)

    async def main() -> tuple[bool, bool, Standing]:
        handle = VirtualRunHandle("run-1", registry=None)
        handle._waker = _Waker()  # type: ignore[assignment]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(handle._until(lambda st: False, "never"), 0.02)
        await asyncio.sleep(0.1)
        gave_up_let_go = handle._shared is None
        await asyncio.wait_for(handle._until(lambda st: True, "anything"), 5)  # answered: the watch closes
        shared = handle._shared
        assert shared is not None and shared.pump is not None  # in its feed's clean-up now
        shared.pump.cancel()  # e.g. the driver's loop shutting its tasks down
        await asyncio.sleep(0.1)
        cancelled_let_go = handle._shared is None
        again = await asyncio.wait_for(handle._until(lambda st: True, "anything"), 5)
        return gave_up_let_go, cancelled_let_go, again

    gave_up_let_go, cancelled_let_go, again = asyncio.run(main())
    assert gave_up_let_go and cancelled_let_go
    assert again == seen and len(feeds) == 3


def test_the_timeout_counts_from_when_the_turn_opens_not_from_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run long in line (here: its Turn opens 0.3 s after the wait began) does not fail a 0.1 s step timeout
    counted from the Turn's opening; counted from the call, as `until_turn` does by default, it does."""
    at_rest = _standing(["ask", "done"])

    async def until(self: VirtualRunHandle, want: Callable[[Standing], bool], what: str) -> Standing:
        await asyncio.sleep(0.3)  # the run waits for its slot; its Turn opens at Rest once it is taken
        return at_rest
    _wait_with(monkeypatch, until)
    handle = VirtualRunHandle("run-1", registry=None)
    assert asyncio.run(handle.until_turn("writer", timeout=0.1, counted_from_open=True)) == at_rest
    with pytest.raises(TimeoutError):
        asyncio.run(handle.until_turn("writer", timeout=0.1))


def test_once_the_turn_is_open_the_timeout_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted from the opening, the timeout still bounds the wait for Rest after it: a Turn open at once but at
    Rest only 0.3 s later fails a 0.1 s timeout."""
    looks = iter([(0.0, _standing(None)), (0.3, _standing(["done"]))])

    async def until(self: VirtualRunHandle, want: Callable[[Standing], bool], what: str) -> Standing:
        after, st = next(looks)
        await asyncio.sleep(after)
        return st
    _wait_with(monkeypatch, until)
    with pytest.raises(TimeoutError):
        asyncio.run(VirtualRunHandle("run-1", registry=None).until_turn("writer", timeout=0.1,
                                                                        counted_from_open=True))


def test_a_scripted_agents_step_timeout_counts_from_the_turns_opening(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ScriptedAgent` waits on a virtual run's handle as above: its 0.1 s step timeout is not spent in line."""
    from jr2ray.menu.receipt import Receipt
    from jr2ray.testing import ScriptedAgent

    async def until(self: VirtualRunHandle, want: Callable[[Standing], bool], what: str) -> Standing:
        await asyncio.sleep(0.3)
        return _standing(["ask", "done"])

    async def landed() -> Receipt:
        return Receipt(delivered=True, moved=True, turn_complete=True, allowed=[], pick="done")
    _wait_with(monkeypatch, until)
    monkeypatch.setattr(VirtualRunHandle, "pick_async", lambda self, *a: landed())
    agent = ScriptedAgent("writer", [("done", {"notes": "# Notes"})], timeout=0.1)
    (receipt,) = asyncio.run(agent.play_async(VirtualRunHandle("run-1", registry=None)))
    assert receipt.moved and receipt.pick == "done"


class _Host:
    """A run's host whose one long `watch` call answers how the run stood as it parked."""

    def __init__(self, answer: Standing) -> None:
        self.call = self
        self.wire = Wired(self)
        self.answer = answer

    def remote(self, *args: Any) -> asyncio.Future[Standing]:
        fut: asyncio.Future[Standing] = asyncio.get_running_loop().create_future()
        fut.set_result(self.answer)
        return fut


class _Waker:
    """The driver's wake listener: no wake ever comes (a finished run is never woken)."""

    id = "wake-1"

    def expect(self, run_id: str) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    def forget(self, run_id: str, fut: asyncio.Future[Any]) -> None:
        fut.cancel()

    async def woken_standing(self, run_id: str, fut: asyncio.Future[Any]) -> Any:
        return await fut


def test_a_watch_that_hears_its_run_finished_and_parked_in_one_answer_ends() -> None:
    """A finished run parks at once; when its host lets it go before the open watch answers, the watch's one
    answer is the parked, finished standing. That is the end: waiting on for the run's next wake hung a driver's
    `events()` for ever (no finished run is woken)."""
    from jr2ray.run.watching import watch

    done = _standing(None)
    done = done.model_copy(update={"parked": True, "version": 4,
                                   "status": done.status.model_copy(update={"status": "done", "turns": []})})
    handle = VirtualRunHandle("run-1", registry=None)
    handle.host = _Host(done)
    handle._waker = _Waker()  # type: ignore[assignment]

    async def all_of() -> list[Standing]:
        return [st async for st in watch(handle)]

    seen = asyncio.run(asyncio.wait_for(all_of(), 5))
    assert [st.status.status for st in seen] == ["done"] and seen[0].parked
