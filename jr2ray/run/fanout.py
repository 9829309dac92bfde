"""Driving many runs at once from one script: work on every run handed over in chunks, so the caller's loop keeps
serving its other tasks (a heartbeat included) between them, and many answers come back as one.

`Client` uses these for `start_many`'s bar, `wait`/`as_finished`, `events` and `send_many`; they live here so the
client module holds the calls and this one the fan-out over thousands of handles.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import ray

from . import gcfreeze
from .handles import WAIT_POLL_S, ActorRunHandle
from .models import RunEvent
from .virtual import VirtualRunHandle
from .wakes import Inbox

RunHandle = ActorRunHandle | VirtualRunHandle
CHUNK = 500  # per-run steps taken on the caller's loop before it serves its other tasks (`create_tasks`, events)
SEND_CHUNK = 200  # Gate events handed over by `send_many` before the caller's loop serves its other tasks
# Gate events of one `send_many` on their way at once: each to a parked run is a call on the registry, and 10,000 at
# once made Ray warn "More than 5000 tasks are pending submission to actor RunRegistry" (they wait in line anyway).
IN_FLIGHT = 2000
T = TypeVar("T")


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


def all_of(futs: Sequence[concurrent.futures.Future[Any]]) -> concurrent.futures.Future[list[Any]]:
    """One future for many: set by whichever thread answers last, with each one's outcome (its result, or the
    exception it raised) in order. A caller's loop then hears once for 10,000 sends, not 10,000 times."""
    out: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
    left = [len(futs)]
    lock = threading.Lock()

    def one(_: concurrent.futures.Future[Any]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last and not out.done():  # done: its waiter was cancelled, and nobody reads these any more
            out.set_result([_outcome(f) for f in futs])

    if not futs:
        out.set_result([])
    for f in futs:
        f.add_done_callback(one)
    return out


def outcomes(got: list[Any], return_exceptions: bool) -> list[Any]:
    """`got` as it is, with `return_exceptions`; else the first exception in it (in the order sent) raised."""
    if not return_exceptions:
        for x in got:
            if isinstance(x, BaseException):
                raise x
    return got


def send_one(s: GateSend | tuple[Any, ...]) -> concurrent.futures.Future[Any]:
    """Send one Gate event now; the future of its SendResult, or of the error that stopped it being sent (a bad
    item, a run whose actor is gone), so one cannot keep the others from being sent."""
    try:
        g = s if isinstance(s, GateSend) else GateSend(*s)
        fut: concurrent.futures.Future[Any] = g.run.send_async(g.gate_id, g.name, g.args, g.delivery_id).future()
    except Exception as exc:  # noqa: BLE001 - it stands in its place among the answers
        fut = concurrent.futures.Future()
        fut.set_exception(exc)
    return fut


async def send_many(sends: Iterable[GateSend | tuple[Any, ...]], return_exceptions: bool = False) -> list[Any]:
    """Every Gate event sent, SEND_CHUNK at a time with the caller's loop served between (a script's own loop of
    10,000 `send_async` calls held its loop 0.5-0.7 s); then their SendResults, in order, heard as one answer."""
    futs: list[concurrent.futures.Future[Any]] = []
    for i, s in enumerate(sends, 1):
        futs.append(send_one(s))
        if i % SEND_CHUNK == 0:
            if i > IN_FLIGHT:  # the one sent IN_FLIGHT before (answers come about in order) has its answer first
                await asyncio.wait([asyncio.wrap_future(futs[i - IN_FLIGHT])])
            await asyncio.sleep(0)
    return outcomes(await asyncio.wrap_future(all_of(futs)), return_exceptions)


async def create_tasks(coros: Iterable[Coroutine[Any, Any, T]]) -> list[asyncio.Task[T]]:
    """A task for each coroutine, CHUNK at a time with the caller's loop served between: `jr2ray.create_tasks`.
    Making 10,000 at once (`asyncio.gather` of 10,000 coroutines does) runs all their first steps in one step of the
    loop, which held its other tasks, a heartbeat included, for 0.6-0.8 s on a loaded 2-core box."""
    out: list[asyncio.Task[T]] = []
    for c in coros:
        out.append(asyncio.ensure_future(c))
        if len(out) % CHUNK == 0:
            await asyncio.sleep(0)
    gcfreeze.made_many(len(out))
    return out


async def merged_events(handles: list[VirtualRunHandle]) -> AsyncIterator[RunEvent]:
    """The merged events of `handles`, each run watched on the driver's loop and its news put on this loop's queue."""
    if not handles:
        return
    queue: asyncio.Queue[RunEvent | str] = asyncio.Queue()
    inbox = Inbox.of(asyncio.get_running_loop())  # news of many runs crosses over in batches, not one wake-up each

    async def pump(h: VirtualRunHandle) -> None:
        before = None
        try:
            async for st in h._watch():
                for ev in RunEvent.between(before, st):
                    inbox.put(functools.partial(queue.put_nowait, ev))
                before = st
        finally:
            inbox.put(functools.partial(queue.put_nowait, h.id))

    futs: list[concurrent.futures.Future[None]] = []
    open_runs = len(handles)
    try:
        for i, h in enumerate(handles, 1):
            futs.append(h._run(pump(h)))
            if i % CHUNK == 0:  # the caller's loop is served between chunks
                await asyncio.sleep(0)
        while open_runs:
            got = await queue.get()
            if isinstance(got, str):
                open_runs -= 1
                continue
            yield got
    finally:
        for f in futs:
            f.cancel()



class Finishing:
    """One pass of `Client._finishing`: the virtual runs' watches, the Run actors' waits, the deadline and the bar."""

    def __init__(self, total: int, timeout: float | None, progress: bool | None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.watched: dict[concurrent.futures.Future[Any], RunHandle] = {}
        self.pending: dict[Any, RunHandle] = {}
        self.bar = progress_bar(total, progress, "finished")
        self.count = 0

    def left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def finished(self, h: RunHandle, final: Any) -> RunHandle:
        h.final = final
        self.count += 1
        if self.bar is not None:
            self.bar.update({"finished": self.count}, self.count)
        return h

    def split(self, handles: Sequence[RunHandle]) -> Iterator[RunHandle]:
        """The handles already finished, at once; the others watched (virtual runs) or waited on (Run actors)."""
        for h in handles:
            if h.final is not None or (isinstance(h, ActorRunHandle) and h.actor is None):
                yield self.finished(h, h.final or h.status())
            elif isinstance(h, VirtualRunHandle):
                self.watched[h._run(h._finished_within(None))] = h
            else:
                self.pending[h.actor.wait.remote(None)] = h

    def virtual_only(self) -> Iterator[RunHandle]:
        """Each watched run as it finishes; concurrent.futures.TimeoutError at the deadline."""
        for fut in concurrent.futures.as_completed(list(self.watched), timeout=self.left()):
            h = self.watched.pop(fut)
            yield self.finished(h, fut.result())

    def poll_watched(self, left: float | None) -> Iterator[RunHandle]:
        """The watched runs that finish within one poll (no longer than WAIT_POLL_S while Run actors wait too)."""
        if not self.watched:
            return
        step = left if not self.pending else min(WAIT_POLL_S, left if left is not None else WAIT_POLL_S)
        got, _ = concurrent.futures.wait(self.watched, timeout=step, return_when=concurrent.futures.FIRST_COMPLETED)
        for fut in got:
            h = self.watched.pop(fut)
            yield self.finished(h, fut.result())

    def poll_pending(self, left: float | None) -> Iterator[RunHandle]:
        """The Run actors whose wait has answered (a look only, while virtual runs are watched too)."""
        if not self.pending:
            return
        ready = ray.wait(list(self.pending), num_returns=1, timeout=0 if self.watched else left)[0]
        for ref in ready:
            h = self.pending.pop(ref)
            try:
                final = ray.get(ref)
            except ray.exceptions.RayActorError:
                final = h.status()  # the actor exited at the end: the journal answers
            yield self.finished(h, final)

    def close(self) -> None:
        """The watches of the runs not waited for end here."""
        for fut in self.watched:
            fut.cancel()
        if self.bar is not None:
            self.bar.close()

def progress_bar(total: int, enabled: bool | None, desc: str) -> Any:
    """A progress bar over `total` (see `jr2ray.run.progress`), or None when it is off."""
    if enabled is False:
        return None
    try:
        from .progress import Progress
    except ImportError:
        return None
    return Progress(total, enabled=enabled, desc=desc)
