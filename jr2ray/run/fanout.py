"""Watching many runs at once from one script: their events merged, their finishing waited on, a progress bar.

`Client` uses these for `events`, `wait`/`as_finished` and `start_many`'s bar; they live here so the client module
holds the calls and this one the fan-out over thousands of handles (the Ray-free part, tasks made and Gate events
sent in chunks, is `jr2ray.run.many`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import ray

from .handles import WAIT_POLL_S, ActorRunHandle
from .handover import Inbox
from .many import CHUNK, Pacer
from .models import RunEvent, Standing
from .virtual import VirtualRunHandle, Wanted
from .wakes import Waker
from .watching import SharedWatch, Waiter, watch

RunHandle = ActorRunHandle | VirtualRunHandle
T = TypeVar("T")


async def merged_events(handles: list[VirtualRunHandle]) -> AsyncIterator[RunEvent]:
    """The merged events of `handles`, each run watched on the driver's loop and its news put on this loop's queue."""
    if not handles:
        return
    queue: asyncio.Queue[RunEvent | str] = asyncio.Queue()
    inbox = Inbox.of(asyncio.get_running_loop())  # news of many runs crosses over in batches, not one wake-up each

    async def pump(h: VirtualRunHandle) -> None:
        before = None
        try:
            async for st in watch(h):
                for ev in RunEvent.between(before, st):
                    inbox.put(functools.partial(queue.put_nowait, ev))
                before = st
        finally:
            inbox.put(functools.partial(queue.put_nowait, h.id))

    futs: list[concurrent.futures.Future[None]] = []
    open_runs = len(handles)
    try:
        pace = Pacer(CHUNK)  # the caller's loop is served between stretches
        for h in handles:
            futs.append(h._run(pump(h), stop_on_cancel=True))
            await pace.step()
        while open_runs:
            got = await queue.get()
            if isinstance(got, str):
                open_runs -= 1
                continue
            yield got
    finally:
        for f in futs:
            f.cancel()


async def until_each(handles: Sequence[VirtualRunHandle], wanted: Wanted,
                     each: Callable[[VirtualRunHandle, Standing], None] | None = None) -> BaseException | None:
    """On the driver's loop (the handles' `Waker`): until `wanted` holds of every run, each run's waiter joined to
    its shared watch as a bare future (`SharedWatch.enter`) and counted off by a callback, with one task for all.
    `each(handle, standing)` hears each run as it gets there, and nothing keeps that standing after it: 10,000
    finished waits are let go one by one as they answer, not in one step at the end. Returns the first error (a run
    that ended first: RunEnded), or None, once every run has answered; cancelling it gives up every waiter."""
    want, what = wanted
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiting: dict[asyncio.Future[Standing], tuple[SharedWatch, Waiter, VirtualRunHandle]] = {}
    errors: list[BaseException] = []
    closed = False

    def answered(fut: asyncio.Future[Standing]) -> None:
        shared, entry, h = waiting.pop(fut)
        try:
            shared.leave(entry)
            if not fut.cancelled():  # cancelled: given up on, nothing to count
                if (exc := fut.exception()) is not None:
                    errors.append(exc)
                elif each is not None:
                    each(h, fut.result())
        finally:  # whatever `each` does, the last answer ends the wait
            if closed and not waiting and not done.done():
                done.set_result(None)

    try:
        pace = Pacer(CHUNK)  # the driver's loop is served between stretches
        for h in handles:
            shared = h._shared_watch()
            entry = shared.enter(want, what)
            waiting[entry[2]] = (shared, entry, h)
            entry[2].add_done_callback(answered)
            await pace.step()
        closed = True
        if waiting:
            await done
    finally:
        for fut in list(waiting):  # given up (cancelled, or a timeout): each waiter leaves its watch
            fut.cancel()
    return errors[0] if errors else None


def until_each_loop(handles: Sequence[VirtualRunHandle], wanted: Wanted,
                    each: Callable[[VirtualRunHandle, Standing], None] | None = None,
                    ) -> list[Coroutine[Any, Any, BaseException | None]]:
    """One `until_each` per driver's loop the handles use (one per registry), each to be awaited from the caller's."""
    by_loop: dict[str, tuple[Waker, list[VirtualRunHandle]]] = {}
    for h in handles:
        waker = h.waker
        by_loop.setdefault(waker.id, (waker, []))[1].append(h)
    return [waker.call(until_each(hs, wanted, each)) for waker, hs in by_loop.values()]


async def until_all(handles: Sequence[Any], wanted: Wanted, timeout: float | None) -> None:
    """`Client.until_gates` and `until_turns`: once `wanted` has held of every virtual run; its first error (a run
    that ended first) raised once all have answered."""
    others = [h.id for h in handles if not isinstance(h, VirtualRunHandle)]
    if others:
        raise TypeError(f"only virtual runs can be waited on this way; these are Run actors: {others[:5]}")
    waits = [asyncio.ensure_future(w) for w in until_each_loop(handles, wanted)]
    try:
        errors = await asyncio.wait_for(asyncio.gather(*waits), timeout)
    finally:
        for w in waits:
            w.cancel()
    first = next((e for e in errors if e is not None), None)
    del errors, waits
    if first is not None:
        try:
            raise first
        finally:  # the traceback holds this frame: not the error too, a cycle a frozen collector keeps
            first = None


class Finishing:
    """One pass of `Client._finishing`: the virtual runs' watches, the Run actors' waits, the deadline and the bar."""

    def __init__(self, total: int, timeout: float | None, progress: bool | None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.watched: dict[concurrent.futures.Future[Any], RunHandle] = {}
        self.pending: dict[Any, RunHandle] = {}
        self.bar = FinishedBar(total, progress)

    def left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def finished(self, h: RunHandle, final: Any) -> RunHandle:
        h.final = final
        self.bar.add(final)
        return h

    def split(self, handles: Sequence[RunHandle]) -> Iterator[RunHandle]:
        """The handles already finished, at once; the others watched (virtual runs) or waited on (Run actors)."""
        for h in handles:
            if h.final is not None or (isinstance(h, ActorRunHandle) and h.actor is None):
                yield self.finished(h, h.final or h.status())
            elif isinstance(h, VirtualRunHandle):
                self.watched[h._run(h._finished_within(None), stop_on_cancel=True)] = h
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
        self.bar.close()

def progress_bar(total: int, enabled: bool | None, desc: str) -> Any:
    """A progress bar over `total` (see `jr2ray.run.progress`), or None when it is off. A driver's `progress=True`
    (or None) asks for one where it can be seen: only when stderr is a terminal, so a script's log or pipe gets no
    bar drawn into it. False: none."""
    if enabled is False:
        return None
    try:
        from .progress import Progress
    except ImportError:
        return None
    bar = Progress(total, enabled=None, desc=desc)  # to force one (a notebook's stderr is no terminal): Progress
    return bar if bar.enabled else None              # with enabled=True, updated by the script itself


class FinishedBar:
    """The bar of `wait`, `as_finished` and their async twins: the runs finished, counted by their final status,
    beside those still running. Off (every call returns at once) unless `enabled` and stderr is a terminal."""

    def __init__(self, total: int, enabled: bool | None) -> None:
        self.total = total
        self.bar = progress_bar(total, enabled, "finished")
        self.by_status: dict[str, int] = {}

    def add(self, final: Any) -> None:
        """One run finished, with `final` its last status (a RunStatus)."""
        if self.bar is None:
            return
        name = str(getattr(final, "status", "finished"))
        self.by_status[name] = self.by_status.get(name, 0) + 1
        done = sum(self.by_status.values())
        self.bar.update({"running": self.total - done, **self.by_status}, done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
