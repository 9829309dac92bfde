"""`send_many` without Ray: every Gate event is sent whatever the others do (one whose send raises at once stands in
its place), the answers come back in the order sent, and the first error is raised only after all have answered."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from jr2ray.run.many import SEND_CHUNK, AllOf, GateSend, create_tasks, send_many, send_many_blocking


class _Sent:
    def __init__(self, fut: concurrent.futures.Future[Any]) -> None:
        self._fut = fut

    def future(self) -> concurrent.futures.Future[Any]:
        return self._fut


class _Run:
    """A handle whose Gate events are answered later, from another thread, as a driver's are."""

    def __init__(self, name: str, fail: BaseException | None = None, gone: bool = False, delay: float = 0.01) -> None:
        self.name, self.fail, self.gone, self.delay = name, fail, gone, delay
        self.sent: list[tuple[Any, ...]] = []

    def send_async(self, gate_id: str, name: str, args: Any, delivery_id: Any) -> _Sent:
        if self.gone:
            raise LookupError(f"{self.name}: its actor is gone")
        self.sent.append((gate_id, name, args, delivery_id))
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        answer = (lambda: fut.set_exception(self.fail)) if self.fail else (lambda: fut.set_result(self.name))
        threading.Timer(self.delay, answer).start()
        return _Sent(fut)


def test_every_event_is_sent_and_answered_in_order_with_each_error_in_its_place() -> None:
    runs = [_Run("a"), _Run("gone", gone=True), _Run("refused", fail=ValueError("no such Gate")), _Run("d")]
    sends: list[Any] = [(r, "g", "reply", {"i": i}, f"d-{i}") for i, r in enumerate(runs)]
    sends.insert(2, ("not", "enough"))  # a bad item
    sends.append(GateSend(_Run("e"), "g", "reply"))
    got = asyncio.run(send_many(sends, return_exceptions=True))
    assert got[0] == "a" and got[4] == "d" and got[5] == "e"
    assert isinstance(got[1], LookupError) and isinstance(got[2], TypeError) and isinstance(got[3], ValueError)
    assert [len(r.sent) for r in runs] == [1, 0, 1, 1]  # the ones after a failure were still sent
    with pytest.raises(LookupError):  # without return_exceptions: the first in the order sent, once all answered
        asyncio.run(send_many(sends))
    assert runs[3].sent[-1] == ("g", "reply", {"i": 3}, "d-3")


def test_the_callers_loop_is_served_between_chunks_and_a_cancelled_wait_leaves_no_error_behind() -> None:
    runs = [_Run(str(i)) for i in range(SEND_CHUNK * 3)]
    beats: list[int] = []

    async def go() -> list[Any]:
        async def beat() -> None:
            for _ in range(10):
                beats.append(sum(len(r.sent) for r in runs))
                await asyncio.sleep(0)

        b = asyncio.ensure_future(beat())
        got = await send_many([(r, "g", "reply", None, None) for r in runs])
        await b
        return got

    got = asyncio.run(go())
    assert got == [str(i) for i in range(SEND_CHUNK * 3)]
    assert any(0 < n < len(runs) for n in beats), beats  # it beat while the sends were being handed over
    futs: list[concurrent.futures.Future[Any]] = [concurrent.futures.Future() for _ in range(3)]
    gather = AllOf()
    for f in futs:
        gather.add(f)
    out = gather.close()
    out.cancel()  # its waiter gave up
    for f in futs:
        f.set_result(1)  # the last answer finds it done: nothing is set on it, nothing raised
    assert out.cancelled() and AllOf().close().result() == []


def test_at_most_in_flight_events_are_on_their_way_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """10,000 at once made Ray warn of more than 5,000 calls pending on the registry: a `send_many` keeps at most
    IN_FLIGHT unanswered, in whatever order they answer, and still sends every one."""
    from jr2ray.run import many

    monkeypatch.setattr(many, "IN_FLIGHT", 300)
    monkeypatch.setattr(many, "SEND_CHUNK", 100)
    lock = threading.Lock()
    out, most = [0], [0]

    class _Counted(_Run):
        def send_async(self, gate_id: str, name: str, args: Any, delivery_id: Any) -> _Sent:
            with lock:
                out[0] += 1
                most[0] = max(most[0], out[0])
            sent = super().send_async(gate_id, name, args, delivery_id)

            def done(_: Any) -> None:
                with lock:
                    out[0] -= 1
            sent.future().add_done_callback(done)
            return sent

    # answers out of order: one in three slow (waiting on one earlier answer let 1,485 out at once)
    runs = [_Counted(str(i), delay=0.02 if i % 3 else 0.3) for i in range(1500)]
    got = asyncio.run(send_many([(r, "g", "reply") for r in runs]))
    assert got == [str(i) for i in range(1500)] and 100 < most[0] <= 300, most[0]
    most[0] = 0
    got = send_many_blocking([(r, "g", "reply") for r in runs[:900]])  # `Client.send_many`, the same bound
    assert got == [str(i) for i in range(900)] and 100 < most[0] <= 300, most[0]


async def _count_steps(beats: list[int], each: Callable[[], None] | None = None) -> None:
    """A task that only yields: `beats[0]` counts the steps of the loop in which it ran (calling `each` in each)."""
    while True:
        beats[0] += 1
        if each is not None:
            each()
        await asyncio.sleep(0)


def test_a_pacer_sizes_its_stretches_to_how_long_they_hold_the_loop() -> None:
    """A stretch that held the loop past STRETCH_S halves the next (never below `least`); one under half of it
    doubles the next, up to `most`; one in between keeps it. Each stretch ends with one step of the loop."""
    from jr2ray.run import many

    clock = [0.0]

    async def go() -> tuple[list[int], list[int]]:
        pace, sizes, served = many.Pacer(most=100, least=8, clock=lambda: clock[0]), [], []
        beats, owed = [0], [0.0]

        def first_steps() -> None:  # what the stretch set off runs in the loop's step after it, and costs there
            clock[0] += owed[0]
            owed[0] = 0.0

        b = asyncio.ensure_future(_count_steps(beats, first_steps))
        await asyncio.sleep(0)
        for cost in (0.05, 0.05, 0.05, 0.05, 0.05, 0.0075, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0):
            sizes.append(pace.size)
            before = beats[0]
            owed[0] = cost
            for _ in range(pace.size):
                await pace.step()
            served.append(beats[0] - before)
        sizes.append(pace.size)
        b.cancel()
        return sizes, served

    sizes, served = asyncio.run(go())
    assert sizes == [64, 32, 16, 8, 8, 8, 8, 16, 32, 64, 100, 100, 100]
    assert served == [1] * 12, "the loop was served once per stretch, and only at its end"
    assert many.Pacer(most=4).least == 4 and many.Pacer(most=500).least == 32


def test_a_stretch_whose_own_steps_grow_dear_ends_once_it_has_held_the_loop_its_time() -> None:
    """Steps that cost in themselves (a Gate event handed to Ray, under load) end their stretch once it has held
    the loop STRETCH_S, however many steps the stretch was sized for; the next stretch is then halved."""
    from jr2ray.run import many

    clock = [0.0]
    step_s = many.STRETCH_S * 0.3

    async def go() -> tuple[list[int], int]:
        pace = many.Pacer(most=100, least=8, clock=lambda: clock[0])
        assert pace.size == 64
        beats, served_after = [0], []
        b = asyncio.ensure_future(_count_steps(beats))
        await asyncio.sleep(0)
        for i in range(1, 13):
            before = beats[0]
            clock[0] += step_s
            await pace.step()
            if beats[0] != before:
                served_after.append(i)
        b.cancel()
        return served_after, pace.size

    served_after, size = asyncio.run(go())
    assert served_after == [4, 8, 12], "the loop is served once a stretch's steps passed STRETCH_S, not after 64"
    assert size == 8, "each stretch that held the loop too long halved the next, down to `least`"


def test_create_tasks_serves_the_loop_between_stretches() -> None:
    made, seen = [0], []

    async def one() -> None:
        seen.append(made[0])  # how many coroutines had been handed over when this one took its first step

    def coros() -> Iterator[Coroutine[Any, Any, None]]:
        for _ in range(1000):
            made[0] += 1
            yield one()

    async def go() -> int:
        out = await create_tasks(coros())
        await asyncio.gather(*out)
        return len(out)

    assert asyncio.run(go()) == 1000
    assert seen[0] < 1000, "the first tasks ran before the last was made"


def test_create_tasks_cancelled_between_stretches_leaves_no_task_behind() -> None:
    """A caller cancelled while its tasks are being made (a `wait_for` around `wait_async` of many runs) leaves
    none of them waiting: the ones made so far are cancelled with it."""
    started: list[int] = []

    async def forever(i: int) -> None:
        started.append(i)
        await asyncio.sleep(3600)

    async def go() -> tuple[int, list[asyncio.Task[Any]]]:
        maker = asyncio.ensure_future(create_tasks(forever(i) for i in range(5000)))
        while not started:  # the first stretch is made and has run its first steps
            await asyncio.sleep(0)
        maker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await maker
        await asyncio.sleep(0)  # the cancelled tasks take their last step
        return len(started), [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    made, left = asyncio.run(go())
    assert 0 < made < 5000 and left == []


def test_answers_heard_as_one_are_taken_as_they_come_and_set_once_no_more_are_added() -> None:
    """`AllOf`: each future is hooked as it is added (not all at once at the end, which held a script's loop 96 ms
    at 10,000 sends); the outcomes come in the order added, errors in their places; the one future is set only
    once `close` said no more come, by the last answer or by `close` itself when all had answered."""
    from jr2ray.run.many import AllOf

    hooked = [0]

    class _Counted(concurrent.futures.Future[Any]):
        def add_done_callback(self, fn: Any) -> None:
            hooked[0] += 1
            super().add_done_callback(fn)

    gather = AllOf()
    futs = [_Counted() for _ in range(4)]
    for f in futs[:3]:
        gather.add(f)
    assert hooked[0] == 3
    futs[1].set_exception(LookupError("gone"))
    futs[0].set_result("a")
    futs[2].set_result("c")
    assert not gather.out.done(), "all added so far answered, but more may come"
    gather.add(futs[3])
    out = gather.close()
    assert hooked[0] == 4, "close hooks nothing: each was hooked when it was added"
    assert not out.done()
    futs[3].set_result("d")
    got = out.result(timeout=1)
    assert got[0] == "a" and isinstance(got[1], LookupError) and got[2:] == ["c", "d"]
    early = AllOf()
    done_already: concurrent.futures.Future[Any] = concurrent.futures.Future()
    done_already.set_result(1)
    early.add(done_already)
    assert early.close().result(timeout=1) == [1], "all answered before close: close sets it"


def test_an_event_that_could_not_be_sent_is_freed_without_the_collector() -> None:
    """A bad item's failed future stands in its place among the answers; its exception's traceback must not lead
    back to it (the frame that caught the error held it), or it and what it answers to would form a cycle that a
    frozen collector never frees."""
    import gc
    import weakref

    from jr2ray.run.many import send_one

    gc.disable()
    try:
        fut = send_one(("not a run",))  # too few fields for a GateSend: it fails before any send
        assert isinstance(fut.exception(), TypeError)
        ref = weakref.ref(fut)
        del fut
        assert ref() is None, "freed by its reference count alone"
    finally:
        gc.enable()
