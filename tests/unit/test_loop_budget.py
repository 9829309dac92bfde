"""A step of a loop sends straight for a bounded time, and a pick's answer reaches its awaiter in batches."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
from typing import Any

import pytest

from jr2ray.run.handover import Awaited
from jr2ray.run.loop_budget import LoopBudget
from jr2ray.run.wakes import PendingPick


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_step_sends_straight_until_its_time_is_spent_and_the_next_step_starts_afresh() -> None:
    """5 ms a step, 1 ms a send: five sends straight in a step, the rest of that step's go another way; the next
    step of the loop has its own 5 ms."""
    async def go() -> list[list[bool]]:
        clock = _Clock()
        budget = LoopBudget(asyncio.get_running_loop(), step_s=0.005, clock=clock)
        steps = []
        for _ in range(2):
            took = []
            for _ in range(8):
                ok = budget.take()
                took.append(ok)
                if ok:
                    clock.now += 0.001
            steps.append(took)
            await asyncio.sleep(0)
        return steps

    assert asyncio.run(go()) == [[True] * 5 + [False] * 3] * 2


def test_the_first_send_of_a_step_always_goes_however_long_it_takes() -> None:
    async def go() -> list[bool]:
        clock = _Clock()
        budget = LoopBudget(asyncio.get_running_loop(), step_s=0.005, clock=clock)
        took = [budget.take()]
        clock.now += 0.050  # one slow send
        took.append(budget.take())
        await asyncio.sleep(0)
        took.append(budget.take())
        return took

    assert asyncio.run(go()) == [True, False, True]


def test_one_budget_per_loop() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        assert LoopBudget.of(loop) is LoopBudget.of(loop)
        assert LoopBudget.of(loop).loop() is loop  # its own loop's, not one made for another
        other = asyncio.new_event_loop()
        try:
            assert LoopBudget.of(other) is not LoopBudget.of(loop) and LoopBudget.of(other).loop() is other
        finally:
            other.close()

    asyncio.run(go())


def test_a_loop_that_has_ended_is_not_kept_alive_by_its_budget_or_inbox() -> None:
    """Each `asyncio.run` makes a new loop; the tables of budgets and inboxes are keyed weakly by the loop, and
    what they hold must not hold the loop, or every script's loop would stay in memory."""
    import weakref as _weakref

    from jr2ray.run.handover import Inbox

    refs = []

    async def go() -> None:
        loop = asyncio.get_running_loop()
        refs.append(_weakref.ref(loop))
        assert LoopBudget.of(loop) is not None and Inbox.of(loop) is not None

    asyncio.run(go())
    gc.collect()
    assert refs[0]() is None


def _answer_later(cf: concurrent.futures.Future[Any], value: Any) -> None:
    threading.Timer(0.05, lambda: cf.set_result(value)).start()


def test_an_awaited_pick_gets_the_answer_set_from_another_thread_and_an_error_too() -> None:
    async def go() -> tuple[Any, BaseException | None]:
        ok: concurrent.futures.Future[Any] = concurrent.futures.Future()
        bad: concurrent.futures.Future[Any] = concurrent.futures.Future()
        _answer_later(ok, "receipt")
        threading.Timer(0.05, lambda: bad.set_exception(ValueError("refused"))).start()
        got = await PendingPick(ok)
        try:
            await PendingPick(bad)
        except ValueError as exc:
            return got, exc
        return got, None

    got, exc = asyncio.run(go())
    assert got == "receipt" and isinstance(exc, ValueError) and str(exc) == "refused"


def test_an_answer_already_there_is_handed_back_without_waiting() -> None:
    async def go() -> Any:
        cf: concurrent.futures.Future[Any] = concurrent.futures.Future()
        cf.set_result(7)
        return await PendingPick(cf)

    assert asyncio.run(go()) == 7


def test_cancelling_the_await_cancels_the_pick_future() -> None:
    async def go() -> concurrent.futures.Future[Any]:
        cf: concurrent.futures.Future[Any] = concurrent.futures.Future()
        task = asyncio.ensure_future(_await(PendingPick(cf)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return cf

    cf = asyncio.run(go())
    assert cf.cancelled()


async def _await(p: PendingPick) -> Any:
    return await p


def test_many_answers_landing_at_once_wake_the_awaiting_loop_a_few_times_not_once_each() -> None:
    """500 picks answered in one go from another thread while the loop is busy: each wake-up of the loop is a
    write to its pipe and a fight for the GIL (what stalled a driver's loop), so the answers come through the
    loop's Inbox, which is woken once for what waits; `asyncio.wrap_future` woke it once per answer."""
    n = 500

    async def go() -> tuple[list[Any], int]:
        loop = asyncio.get_running_loop()
        wakes = [0]
        write = loop._write_to_self  # type: ignore[attr-defined]

        def counted() -> None:
            wakes[0] += 1
            write()
        loop._write_to_self = counted  # type: ignore[attr-defined]
        cfs: list[concurrent.futures.Future[Any]] = [concurrent.futures.Future() for _ in range(n)]
        awaits = [asyncio.ensure_future(_await(PendingPick(cf))) for cf in cfs]
        await asyncio.sleep(0)  # every awaiter is waiting
        before = wakes[0]

        def all_at_once() -> None:
            for i, cf in enumerate(cfs):
                cf.set_result(i)

        t = threading.Thread(target=all_at_once)
        t.start()
        t.join()  # on the loop's thread: the loop is busy while every answer lands
        got = await asyncio.gather(*awaits)
        return got, wakes[0] - before

    got, wakes = asyncio.run(go())
    assert got == list(range(n))
    assert wakes <= 3


def test_an_answered_await_leaves_no_cycle_behind() -> None:
    """Freed by reference counting alone: a driver with 10,000 picks in flight must not leave garbage per pick
    for the cyclic GC (frozen in long runs, `gcfreeze`)."""
    def alive() -> int:
        return sum(type(o) is Awaited for o in gc.get_objects())

    answering: list[threading.Thread] = []

    async def go() -> None:
        cf: concurrent.futures.Future[Any] = concurrent.futures.Future()
        fut = Awaited.on_running_loop(cf)
        assert alive() == before + 1
        answering.append(threading.Thread(target=cf.set_result, args=(1,)))
        answering[0].start()
        assert await fut == 1

    gc.collect()
    gc.disable()
    try:
        before = alive()
        asyncio.run(go())
        answering[0].join()
        answering.clear()  # the thread object held its target's arguments
        assert alive() == before
    finally:
        gc.enable()
