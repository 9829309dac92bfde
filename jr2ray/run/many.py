"""Driving many runs from one script without holding its event loop: tasks made and Gate events handed over in
chunks, with the caller's loop served between, and many answers heard as one. Ray-free (it only calls the handles it
is given), so `jr2ray.create_tasks` and `jr2ray.GateSend` load no Ray.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, NamedTuple, TypeVar

# Per-run steps taken on the caller's loop before it serves its other tasks, at most (`Pacer`). A task's first step
# runs after its stretch, where no clock of the stretch can stop it: 500 first steps held the loop 51.6 ms at N=10,000.
CHUNK = 128
SEND_CHUNK = 200  # Gate events handed over by `send_many` before the caller's loop serves its other tasks, at most
STRETCH_S = 0.01  # how long one stretch of such steps and what they set off may hold the caller's loop (`Pacer`)
# Gate events of one `send_many` unanswered at once, at most: each to a parked run is a call on the registry, and
# 10,000 at once made Ray warn "More than 5000 tasks are pending submission to actor RunRegistry" (they would
# have waited for slots anyway).
IN_FLIGHT = 2000
T = TypeVar("T")

__all__ = ["CHUNK", "IN_FLIGHT", "SEND_CHUNK", "STRETCH_S", "AllOf", "GateSend", "InFlight", "Pacer",
           "create_tasks", "outcomes", "send_many", "send_one"]


class Pacer:
    """Hands the caller's loop back between stretches of per-run steps, each stretch sized to hold the loop about
    STRETCH_S with what it sets off (a task's first step runs in the loop's next step, after the stretch that made
    it). A fixed 500 tasks a stretch held the loop 0.18-0.31 s on the loaded 2-core box, where a run's first
    step costs ten times what it does on a quiet one; the size halves after a stretch that took too long and
    doubles, up to `most`, after one that took under half. It never falls below `least`: what a stretch is timed
    by includes the loop's other work, and a loop busy with its own tasks would otherwise shrink it to a few steps
    a stretch (5,000 tasks made in 30 s instead of 1 s with 200 other tasks taking 12 ms a step of the loop).
    A stretch also ends once its own steps have held the loop STRETCH_S, however many it was sized for (`step`)."""

    def __init__(self, most: int, least: int = 32, clock: Callable[[], float] = time.perf_counter) -> None:
        self.most = most
        self.least = min(least, most)
        self.size = min(64, most)
        self.clock = clock
        self.done = 0
        self.since = clock()

    async def step(self) -> None:
        """One per-run step taken: the caller's loop is served when this stretch is full, or sooner once the
        stretch's own steps have held it STRETCH_S (a step that costs in itself, as a Gate event handed to Ray
        does, grew dear under load: one stretch of them, at most 200, held the loop 46 ms)."""
        self.done += 1
        if self.done < self.size and self.clock() - self.since < STRETCH_S:
            return
        await asyncio.sleep(0)  # the steps this stretch set off run now, before the next stretch starts
        took = self.clock() - self.since
        if took > STRETCH_S:
            self.size = max(self.least, self.size // 2)
        elif took < STRETCH_S / 2:
            self.size = min(self.most, self.size * 2)
        self.rest()

    def rest(self) -> None:
        """A new stretch starts now (after a wait that is not the stretch's own doing)."""
        self.done, self.since = 0, self.clock()


class GateSend(NamedTuple):
    """One Gate event of a `Client.send_many`: the run's handle, the Gate, the event and its args, and the delivery
    id that applies it once (one is made when it is None)."""

    run: Any
    gate_id: str
    name: str
    args: dict[str, Any] | None = None
    delivery_id: str | None = None


def _outcome(f: concurrent.futures.Future[Any]) -> Any:
    if f.cancelled():
        return concurrent.futures.CancelledError()
    exc = f.exception()
    return exc if exc is not None else f.result()


class AllOf:
    """One future for many, each `add`ed as it is made: set once `close` said no more come, by whichever thread
    answers last (or by `close`, when all had answered), with each one's outcome (its result, or the exception it
    raised) in the order added. A caller's loop then hears once for 10,000 sends, not 10,000 times. Each outcome
    is taken as its answer comes: taking 10,000 at the end, and hooking 10,000 futures at once, held the caller's
    loop 96 ms in one step at N=10,000."""

    def __init__(self) -> None:
        self.out: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
        self._got: list[Any] = []
        self._left = 0
        self._closed = False
        self._lock = threading.Lock()

    def add(self, fut: concurrent.futures.Future[Any]) -> concurrent.futures.Future[Any]:
        """Hear `fut` among the others; it is handed back, so a sender can go on with it."""
        # The future keeps this callback once done, and through it this object, but nothing here keeps the
        # future: no cycle for the cyclic GC to find (never, once frozen: `gcfreeze`).
        with self._lock:
            if self._closed:
                raise RuntimeError("AllOf: a future added after close")
            i, self._left = len(self._got), self._left + 1
            self._got.append(None)
        fut.add_done_callback(functools.partial(self._one, i))  # at once, on this thread, if it is done already
        return fut

    def _one(self, i: int, fut: concurrent.futures.Future[Any]) -> None:
        self._got[i] = _outcome(fut)
        with self._lock:
            self._left -= 1
            last = self._closed and self._left == 0
        if last:
            self._finish()

    def close(self) -> concurrent.futures.Future[list[Any]]:
        """No more are added: the future of all their outcomes."""
        with self._lock:
            self._closed = True
            last = self._left == 0
        if last:
            self._finish()
        return self.out

    def _finish(self) -> None:
        got, self._got = self._got, []
        # Cancelled by its waiter (here or meanwhile, from the waiter's thread): nobody reads these any more.
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            self.out.set_result(got)


def outcomes(got: list[Any], return_exceptions: bool) -> list[Any]:
    """`got` as it is, with `return_exceptions`; else the first exception in it (in the order sent) raised."""
    if not return_exceptions:
        for x in got:
            if isinstance(x, BaseException):
                raise x
    return got


class InFlight:
    """The events of one `send_many` sent and not yet answered. The sender waits for room while IN_FLIGHT are out,
    until a chunk's worth have answered, in whatever order they answer."""

    def __init__(self, limit: int) -> None:
        self.limit, self.out = limit, 0
        self.lock = threading.Lock()
        self.room = threading.Event()
        self.room.set()

    def sent(self, fut: concurrent.futures.Future[Any]) -> None:
        with self.lock:
            self.out += 1
            if self.out >= self.limit:
                self.room.clear()
        fut.add_done_callback(self._answered)  # at once, on this thread, if it is done already

    def _answered(self, _: concurrent.futures.Future[Any]) -> None:
        with self.lock:
            self.out -= 1
            if self.out <= max(0, self.limit - SEND_CHUNK):
                self.room.set()


def send_one(s: GateSend | tuple[Any, ...]) -> concurrent.futures.Future[Any]:
    """Send one Gate event now; the future of its SendResult, or of the error that stopped it being sent (a bad
    item, a run whose actor is gone), so one cannot keep the others from being sent."""
    try:
        g = s if isinstance(s, GateSend) else GateSend(*s)
        return g.run.send_async(g.gate_id, g.name, g.args, g.delivery_id).future()
    except Exception as exc:  # noqa: BLE001 - it stands in its place among the answers
        return _failed(exc)


def _failed(exc: BaseException) -> concurrent.futures.Future[Any]:
    """A future of `exc`, made outside the frame that caught it: that frame, kept by the exception's traceback,
    would otherwise keep the future, and the future its callbacks (a cycle never freed once frozen: `gcfreeze`)."""
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
    fut.set_exception(exc)
    return fut


def send_many_blocking(sends: Iterable[GateSend | tuple[Any, ...]], return_exceptions: bool = False) -> list[Any]:
    """`Client.send_many`: every Gate event sent, at most IN_FLIGHT unanswered at once, this thread blocked."""
    window, gather = InFlight(IN_FLIGHT), AllOf()
    for s in sends:
        window.room.wait()
        window.sent(gather.add(send_one(s)))
    return outcomes(gather.close().result(), return_exceptions)


async def send_many(sends: Iterable[GateSend | tuple[Any, ...]], return_exceptions: bool = False) -> list[Any]:
    """Every Gate event sent, up to SEND_CHUNK at a time with the caller's loop served between (`Pacer`; a script's
    own loop of 10,000 `send_async` calls held its loop 0.5-0.7 s), at most IN_FLIGHT unanswered at once; then
    their SendResults, in order, heard as one answer."""
    window, gather, pace = InFlight(IN_FLIGHT), AllOf(), Pacer(SEND_CHUNK)
    for s in sends:
        if not window.room.is_set():
            await asyncio.to_thread(window.room.wait)
            pace.rest()
        window.sent(gather.add(send_one(s)))
        await pace.step()
    return outcomes(await asyncio.wrap_future(gather.close()), return_exceptions)


async def create_tasks(coros: Iterable[Coroutine[Any, Any, T]]) -> list[asyncio.Task[T]]:
    """A task for each coroutine, up to CHUNK at a time with the caller's loop served between (`Pacer`):
    `jr2ray.create_tasks`. Making 10,000 at once (`asyncio.gather` of 10,000 coroutines does) runs all their first
    steps in one step of the loop, which held its other tasks, a heartbeat included, for 0.6-0.8 s on a loaded
    2-core box."""
    out: list[asyncio.Task[T]] = []
    pace = Pacer(CHUNK)
    try:
        for c in coros:
            out.append(asyncio.ensure_future(c))
            await pace.step()
    except BaseException:  # cancelled between stretches: the tasks made so far are nobody's, so they end here
        for t in out:
            t.cancel()
        raise
    return out
