"""A driver's watch of one virtual run: how the run stands, pushed from its host while it is live and read from the
store while it is parked or queued (the registry tells the driver when it is live again); one such watch per run,
shared by every waiter on that run in the driver (`SharedWatch`); its name across the instance; and how a write's
answer reaches that watch even when its caller stopped waiting. The handle is passed in (`WatchedRun`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

import ray

from . import gcfreeze, wire
from .models import Carried, FirstAnswer, NotHere, Standing, Waiting, lifecycle
from .standing import settle
from .standing_reads import StandingReads
from .store import JournalStore
from .wakes import POLL_S, Waker
from .watch_batch import WatchBatch


class WatchedRun(Protocol):
    """What a watch reads of a driver's handle of one run (`virtual.VirtualRunHandle`)."""

    id: str
    host: Any  # the host that held the run when last asked, or None
    store: JournalStore | None
    registry: Any
    _shared: SharedWatch | None

    @property
    def waker(self) -> Waker: ...

    async def _read(self, method: str, args: list[Any]) -> Any: ...


Waiter = tuple[Callable[[Standing], bool], str, "asyncio.Future[Standing]"]  # (accepts, what an end means, answer)


def watch_name(wake_id: str, pump: asyncio.Task[None]) -> str:
    """A handle's watch, named across the instance: this driver's wake id and its pump task's name (asyncio numbers
    tasks once per process; a later watch of the same handle is another task, so another name)."""
    return f"{wake_id}:{pump.get_name()}"


class WatchState:
    """Where one `watch` of a run is: the host it asked, that host's `version` count (each host counts its own),
    the standing it last yielded, and whether the run is over."""

    def __init__(self) -> None:
        self.version = -1
        self.asked: Any = None
        self.last: Standing | None = None
        self.over = False
        self.told: str | None = None  # the handle's name for this watch, when its writes carry standings to it

    def changed(self, st: Standing) -> bool:
        """`st` is news (not the last one yielded): note it as the last."""
        if st == self.last:
            return False
        self.last = st
        return True


async def answer_of(handle: Any, ref: Any) -> Any:
    """A write's answer. If the caller stops waiting first, a standing the host carried with it is still taken
    (`handle.landed`) when it comes: the host noted it as told to the handle's watch, which would otherwise wait past
    news the driver never had."""
    fut = asyncio.ensure_future(ref)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(lambda f: _land_late(handle, f))
        raise


def _land_late(handle: Any, fut: asyncio.Future[Any]) -> None:
    if fut.cancelled() or fut.exception() is not None:
        return
    got = fut.result()
    if isinstance(got, list) and len(got) > 1 and isinstance(got[1], FirstAnswer):  # an activation's answer
        got = got[1].value
    if isinstance(got, Carried):
        handle.landed(got)


class SharedWatch:
    """The one watch of a run that every waiter on it in this driver shares (one long call to its host, one
    standing kept), however many wait: a writer and an editor on each of 10,000 runs cost one watch a run. A handle
    holds one while someone waits (and, when a write's carried standing answered the last waiter, until the watch's
    long call next answers), and nothing per run otherwise: a driver may hold 10,000 handles."""

    __slots__ = ("handle", "latest", "looking", "pump", "stale", "waiters")

    def __init__(self, handle: WatchedRun) -> None:
        self.handle = handle
        self.waiters: list[Waiter] = []
        self.pump: asyncio.Task[None] | None = None  # the watch's task, feeding `waiters`
        self.latest: Standing | None = None  # what the watch saw last
        self.stale = False  # a write of the handle landed since `latest` came (`VirtualRunHandle.landed`)
        self.looking: asyncio.Task[None] | None = None  # a fresh look under way, for waiters that came after a write

    def took(self, st: Standing) -> None:
        """On the driver's loop: a write's carried standing, for this watch while it is open (once it is not, a new
        one starts from a fresh look anyway)."""
        if self.pump is not None:
            self.take(st)

    def take(self, st: Standing) -> None:
        """A standing from the watch (or a fresh look): kept as the latest, and handed to each waiter it answers."""
        last = self.latest
        if last is not None and last.epoch == st.epoch and st.version < last.version:
            return  # an older answer overtaken by a fresher one from the same activation
        self.latest, self.stale = st, False
        self.waiters = [e for e in self.waiters if not settle(e, st, self.handle.id)]

    async def look(self) -> None:
        """How the live run stands now (a watch that does not wait), for waiters that came after a write."""
        host = self.handle.host
        try:
            out = None if host is None else await wire.call(host, self.handle.id, "watch", [-1, None, 0.0], False)
        except ray.exceptions.RayActorError:
            out = None  # the watch finds the run where it went
        finally:
            self.looking = None
        if isinstance(out, Standing) and self.stale:
            self.take(out)
            if not self.waiters and self.pump is not None:
                self.pump.cancel()

    async def until(self, want: Callable[[Standing], bool], what: str) -> Standing:
        """On the driver's loop: the first standing `want` accepts. RunEnded if the run ends first."""
        entry = self.enter(want, what)
        try:
            return await entry[2]
        finally:
            self.leave(entry)

    def enter(self, want: Callable[[Standing], bool], what: str) -> Waiter:
        """On the driver's loop: a waiter for the first standing `want` accepts, its future answered at once when the
        latest standing does. No task: a wait on 10,000 runs (`fanout.until_each`) is 10,000 of these and one task.
        Whoever gives up on it calls `leave`."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Standing] = loop.create_future()
        entry = (want, what, fut)
        latest = self.latest
        if self.pump is not None and latest is not None and not self.stale and settle(entry, latest, self.handle.id):
            return entry
        self.waiters.append(entry)
        if self.pump is None:
            self.stale = False  # a new watch starts from how the run stands now
            self.pump = loop.create_task(self._pump_watch())
        elif self.stale and self.looking is None:
            self.looking = loop.create_task(self.look())
        return entry

    def leave(self, entry: Waiter) -> None:
        """A waiter given up on (or answered): the watch stops when no one is left waiting on it."""
        if entry in self.waiters:
            self.waiters.remove(entry)
            if not self.waiters and self.pump is not None:
                self.pump.cancel()

    async def _pump_watch(self) -> None:
        """Feed each new standing to the waiters until none is left (or the run ends)."""
        me = asyncio.current_task()
        feed = watch(self.handle, None if me is None else watch_name(self.handle.waker.id, me))
        del me  # a cancelled task's error holds this frame: `me` kept would close a cycle through the task
        gcfreeze.watching(1)
        try:
            async for st in feed:
                self.take(st)
                if not self.waiters:
                    return
            final = self.latest
            if final is None or final.status.status in ("active", "queued"):  # the last word heard was not the end
                final = Standing(status=await self.handle._read("status", []), waiting=Waiting())
            for e in self.waiters:  # the watch ended: the run is over
                settle(e, final, self.handle.id, ended=True)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - each waiter hears why its watch failed
            for _w, _what, fut in self.waiters:
                if not fut.done():
                    fut.set_exception(exc)
        finally:
            gcfreeze.watching(-1)
            try:
                with contextlib.suppress(Exception):
                    await feed.aclose()
            finally:  # a cancel that lands in `aclose` must not leave `pump` set to a finished task
                self._ended()

    def _ended(self) -> None:
        """The pump is over: a waiter that came while it was being let go gets a new one; else the handle lets go
        of this watch."""
        self.waiters = [e for e in self.waiters if not e[2].done()]
        self.latest = None  # a stale standing must not answer a later waiter
        self.pump = asyncio.get_running_loop().create_task(self._pump_watch()) if self.waiters else None
        if self.pump is None and self.handle._shared is self:
            self.handle._shared = None


async def watch(h: WatchedRun, told: str | None = None) -> AsyncGenerator[Standing, None]:
    """How the run stands, now and at each change: from its host while live (a long call that answers on a
    change), from the store while parked or queued (the registry tells this driver when it is live again).
    `told`: this watch's name (`watched`), which the handle's writes give the host when they carry a standing
    to it: the host does not answer the watch again with what such a write already told it."""
    w = WatchState()
    w.told = told
    while not w.over:
        host = h.host
        rounds = _parked_round(h, w) if host is None else _live_round(h, w, host)
        async with contextlib.aclosing(rounds):
            async for st in rounds:
                yield st


async def _store_standing(h: WatchedRun) -> Standing | None:
    return await StandingReads.of(asyncio.get_running_loop()).read(h.store, h.id) if h.store else None


def _ended(st: Standing) -> bool:
    """Nothing more comes for a run that stands so: finished, lost or damaged (no wake will follow)."""
    return lifecycle(st.status.status) != "active" and st.status.status != "queued"


async def _parked_round(h: WatchedRun, w: WatchState) -> AsyncGenerator[Standing, None]:
    """One look while the run has no host: its standing in the store, then the registry's word of its next
    activation (or the driver's one long poll for it)."""
    waker = h.waker
    st = await _store_standing(h)
    if st is not None and w.changed(st):
        yield st
    if st is not None and _ended(st):
        w.over = True  # finished, lost, corrupt: nothing more comes
        return
    wake = waker.expect(h.id)  # before the note: a wake that comes back first is still heard
    try:
        got = await WatchBatch.of(h.registry, waker).watch(h.id)
        if got:
            h.host, w.version = waker.intern(got[0]), -1
            return
        again = await _store_standing(h)
        if again is not None and w.changed(again):  # it changed between the look and the note
            yield again
        async for st in _woken_round(h, w, wake):
            yield st
    finally:
        waker.forget(h.id, wake)


async def _woken_round(h: WatchedRun, w: WatchState, wake: asyncio.Future[Any]) -> AsyncGenerator[Standing, None]:
    """Until the registry says the run is live again (`wake`, listened for before the registry was told):
    its host then, and (when the host said, with the wake) how the run stood once taken, so the next long
    call to that host waits for what changes after that instead of first asking how it stands."""
    host, st = await h.waker.woken_standing(h.id, wake)
    h.host, w.version = host, -1
    if host is None or not isinstance(st, Standing) or st.status.id != h.id:
        return
    w.asked, w.version = host, st.version
    if w.changed(st):
        yield st
    if lifecycle(st.status.status) == "finished":
        w.over = True


async def _live_round(h: WatchedRun, w: WatchState, host: Any) -> AsyncGenerator[Standing, None]:
    """One long call to the run's host: its standing when it changes (or None within the poll)."""
    waker = h.waker
    wake = waker.expect(h.id)  # the host notes this driver if the run parks: its wake may come first
    try:
        async for st in _live_call(h, w, host, wake):
            yield st
    finally:
        waker.forget(h.id, wake)


async def _live_call(h: WatchedRun, w: WatchState, host: Any,
                     wake: asyncio.Future[Any]) -> AsyncGenerator[Standing, None]:
    try:
        if host is not w.asked:  # another call moved the handle to a new host: start its count afresh
            w.version, w.asked = -1, host
        out = await wire.call(host, h.id, "watch", [w.version, h.waker.id, POLL_S, w.told], False)
    except ray.exceptions.RayActorError:
        await h.registry.host_died.remote(h.id, host._actor_id.hex())
        h.host = None
        return
    if out is None:  # nothing changed within the poll
        return
    if isinstance(out, NotHere):
        h.host = None
        return
    assert isinstance(out, Standing)
    if out.parked:  # it parked while watched: the registry tells this driver at its next activation
        if h.host is host:  # a write now goes to the registry, not to a host that would answer NotHere
            h.host = None
        if w.changed(out):
            yield out
        if _ended(out):  # a finished run parks at once, and may do so before the watch hears it finished
            w.over = True
            return
        async for st in _woken_round(h, w, wake):
            yield st
        return
    w.version = out.version
    if w.changed(out):
        yield out
    if lifecycle(out.status.status) == "finished":
        w.over = True
