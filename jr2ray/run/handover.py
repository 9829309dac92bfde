"""How a call crosses from one event loop's thread to another's in a driver process, and its answer comes back.

A driver has its own loop on its own thread (`wakes.Waker`), and a script has its own; thousands of calls and answers
cross between them at once. Handed over one by one (`call_soon_threadsafe`, `asyncio.wrap_future`), each crossing is
a write to the other loop's pipe and a fight for the GIL, and those stalled the script's loop. Here a burst crosses
as one wake-up, and runs in batches sized by what they set off.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from .loops import PerLoop
from .many import STRETCH_S

DRAIN_BATCH = 200  # calls run in one callback of a loop taking calls from another thread, at most (`Inbox`)
DRAIN_LEAST = 32  # ... and at least, however long what a batch sets off holds the loop (as `many.Pacer`)
PARKED = object()  # what a pick's coroutine returns when it left the pick as a record (`Waker.parked`)


class Inbox:
    """Callables handed to one event loop from other threads, many per wake-up of that loop. A driver making 1,000
    calls at once then wakes the other thread once, not 1,000 times: each wake-up is a write to the loop's pipe
    and a fight for the GIL, and those were what stalled the caller's loop.

    A burst is run in batches with the loop's other work between. What a batch sets off (each answer wakes a task,
    and those run in the loop's next step) is what holds the loop, so the batch is sized by it: halved, down to
    DRAIN_LEAST, when the time from one batch's end to the next batch took more than STRETCH_S, doubled, up to
    DRAIN_BATCH, when it took under half of that. 200 answers a batch held a loaded driver's loop 100-190 ms."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Callable[[], float] = time.perf_counter) -> None:
        self._loop = weakref.ref(loop)  # not the loop itself: the table it is kept in is keyed weakly by it
        self.items: collections.deque[Callable[[], None]] = collections.deque()
        self.armed = False
        self.guard = threading.Lock()
        self.clock = clock
        self.batch = DRAIN_BATCH  # the next batch's size
        self.since: float | None = None  # when the last batch of a burst ended, if more of it waits

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop()

    @staticmethod
    def of(loop: asyncio.AbstractEventLoop) -> Inbox:
        """The one inbox of `loop`."""
        return _INBOXES.of(loop)

    def put(self, fn: Callable[[], None]) -> None:
        """Hand `fn` to the loop. A loop that has closed (a script's `asyncio.run` ended while a watch of its was
        still being let go) has nobody left to answer: `fn` is dropped, not raised in the driver's thread, and so
        is what waited (a drain queued just before the loop closed never runs, and left this inbox armed)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            with self.guard:
                self.items.clear()
                self.armed = False
            return
        with self.guard:
            self.items.append(fn)
            if self.armed:
                return
            self.armed = True
        try:
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop closed meanwhile
            with self.guard:
                self.items.clear()
                self.armed = False

    def _drain(self) -> None:
        """Run one batch of what was handed over; the rest comes after whatever else the loop has ready, and after
        what this batch set off (1,000 answers landing at once on the caller's loop must not hold it for all of
        them, nor for all the tasks they wake)."""
        if self.since is not None:
            took = self.clock() - self.since
            if took > STRETCH_S:
                self.batch = max(DRAIN_LEAST, self.batch // 2)
            elif took < STRETCH_S / 2:
                self.batch = min(DRAIN_BATCH, self.batch * 2)
        with self.guard:
            items = self.items
            more = len(items) > self.batch
            if more:  # still armed: puts meanwhile join the rest
                batch = [items.popleft() for _ in range(self.batch)]
            else:
                batch, self.items, self.armed = list(items), collections.deque(), False
        loop = self.loop
        assert loop is not None  # this runs on it
        ran = 0
        try:
            for fn in batch:
                ran += 1
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 - one failed hand-over must not drop the rest of its batch
                    loop.call_exception_handler({"message": "a call handed to this loop failed", "exception": exc})
        finally:
            if ran < len(batch):  # stopped by a KeyboardInterrupt or the like: the rest go first, next drain
                with self.guard:
                    self.items.extendleft(reversed(batch[ran:]))
                    self.armed = more = True
            if more:
                self.since = self.clock()
                loop.call_soon(self._drain)  # queued after the tasks this batch woke
            else:
                self.since = None


class Awaited:
    """A concurrent future awaited on an event loop, its answer handed over through that loop's `Inbox`: 1,000
    answers landing at once wake the loop once and run in batches (`asyncio.wrap_future` wakes it once for each,
    and runs them all in one step). Cancelling the await cancels the concurrent future, as `wrap_future` does."""

    __slots__ = ("cf", "fut", "inbox")

    def __init__(self, cf: concurrent.futures.Future[Any], fut: asyncio.Future[Any], inbox: Inbox) -> None:
        self.cf: concurrent.futures.Future[Any] | None = cf
        self.fut: asyncio.Future[Any] | None = fut
        self.inbox = inbox

    @classmethod
    def on_running_loop(cls, cf: concurrent.futures.Future[Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if cf.done():
            copy_outcome(cf, fut)
            return fut
        me = cls(cf, fut, Inbox.of(loop))
        fut.add_done_callback(me.gave_up)
        cf.add_done_callback(me.landed)
        return fut

    def landed(self, _cf: concurrent.futures.Future[Any]) -> None:
        """In whichever thread answered."""
        self.inbox.put(self.copy)

    def copy(self) -> None:
        """On the awaiting loop. Then lets go of both: the concurrent future keeps its callbacks (`landed`) once
        done, and this object holding it back would be a cycle the GC must find."""
        cf, fut = self.cf, self.fut
        if cf is None or fut is None:
            return
        self.cf = self.fut = None
        copy_outcome(cf, fut)

    def gave_up(self, fut: asyncio.Future[Any]) -> None:
        cf = self.cf
        if fut.cancelled() and cf is not None:
            cf.cancel()


def copy_outcome(task: asyncio.Future[Any] | concurrent.futures.Future[Any],
                  fut: asyncio.Future[Any] | concurrent.futures.Future[Any]) -> None:
    if fut.done():
        return
    if task.cancelled():
        fut.cancel()
    elif (exc := task.exception()) is not None:
        fut.set_exception(exc)
    elif (got := task.result()) is not PARKED:  # a pick kept as a record: its wake answers it later
        fut.set_result(got)


def stop_if_cancelled(inbox: Inbox, running: list[asyncio.Task[Any]], out: concurrent.futures.Future[Any]) -> None:
    """`out`'s caller gave up: the task that would answer it, if it still runs, stops too (on its own loop)."""
    if out.cancelled() and running:
        inbox.put(functools.partial(_cancel, running[0]))


def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()


class Hop:
    """One `Waker.call` under way, from the caller's loop to the driver's and back: one slotted object, where
    closures and their cells made about ten objects a call (a driver waiting on 10,000 runs has 10,000 of these in
    flight, and each is one more object for every full pass of the cyclic GC)."""

    __slots__ = ("back", "coro", "fut", "inbox", "loop", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop, inbox: Inbox, back: Inbox,
                 coro: Coroutine[Any, Any, Any], fut: asyncio.Future[Any]) -> None:
        self.loop, self.inbox, self.back, self.fut = loop, inbox, back, fut
        self.coro: Coroutine[Any, Any, Any] | None = coro
        self.task: asyncio.Task[Any] | None = None

    def start(self) -> None:
        """On the driver's loop."""
        coro, self.coro = self.coro, None
        assert coro is not None
        if self.fut.done():  # cancelled before it started
            coro.close()
            return
        self.task = self.loop.create_task(coro)
        self.task.add_done_callback(self.finished)

    def finished(self, _task: asyncio.Task[Any]) -> None:
        self.back.put(self.answer)

    def answer(self) -> None:
        """On the caller's loop."""
        assert self.task is not None
        copy_outcome(self.task, self.fut)

    def cancelled(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self.inbox.put(self.stop)

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


_INBOXES: PerLoop[Inbox] = PerLoop(Inbox)
