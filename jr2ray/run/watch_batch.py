"""A driver's registry watches, gathered: every parked or queued run a driver starts watching within a moment is
noted with the registry in one call per `WATCH_BATCH` runs (`VirtualRunHandle` waits through it)."""

from __future__ import annotations

import asyncio
from typing import Any

from .wakes import Waker

WATCH_GATHER_S = 0.01  # how long a driver gathers the runs it starts watching before it notes them all at once
WATCH_BATCH = 1000  # run ids per registry call


class WatchBatch:
    """The registry's `watch` for every parked or queued run a driver starts watching within WATCH_GATHER_S, in one
    call per WATCH_BATCH runs: a driver that waits on 10,000 runs at once sends a few calls, not 10,000 (each Ray
    call in flight costs the driver's Ray worker memory it keeps as its high-water mark). One per driver loop."""

    _of: dict[str, WatchBatch] = {}  # the Waker's id -> its batch (created and used on that Waker's loop only)

    def __init__(self, registry: Any, waker_id: str) -> None:
        self.registry = registry
        self.waker_id = waker_id
        self.pending: dict[str, list[asyncio.Future[list[Any]]]] = {}
        self.armed = False
        # The calls in flight, held here: a task only its awaited Ray future refers to can be collected as a cycle
        # mid-call, and its watchers would wait forever.
        self.sending: set[asyncio.Task[None]] = set()

    @classmethod
    def of(cls, registry: Any, waker: Waker) -> WatchBatch:
        got = cls._of.get(waker.id)
        if got is None:
            got = cls._of[waker.id] = cls(registry, waker.id)
        return got

    def watch(self, run_id: str) -> asyncio.Future[list[Any]]:
        """[host] if the run is live now, else [] and this driver hears of its next activation (as `watch`)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Any]] = loop.create_future()
        self.pending.setdefault(run_id, []).append(fut)
        if not self.armed:
            self.armed = True
            loop.call_later(WATCH_GATHER_S, self._flush)
        return fut

    def _flush(self) -> None:
        self.armed = False
        batch, self.pending = self.pending, {}
        ids = list(batch)
        loop = asyncio.get_running_loop()
        for at in range(0, len(ids), WATCH_BATCH):
            self._keep(loop.create_task(self._send({rid: batch[rid] for rid in ids[at:at + WATCH_BATCH]})))

    def _keep(self, task: asyncio.Task[None]) -> None:
        self.sending.add(task)
        task.add_done_callback(self.sending.discard)

    async def _send(self, futs: dict[str, list[asyncio.Future[list[Any]]]]) -> None:
        try:
            got = await self.registry.watch_many.remote(list(futs), self.waker_id)
        except BaseException as exc:  # noqa: BLE001 - each watcher hears why (a registry restarting: it asks again)
            _settle([f for waiting in futs.values() for f in waiting], exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        loop = asyncio.get_running_loop()
        for rid, waiting in futs.items():
            if rid in got and got[rid] is None:  # a host is adopting it now: asked alone, behind that adoption
                self._keep(loop.create_task(self._alone(rid, waiting)))
                continue
            host = got.get(rid)
            _settle(waiting, [] if host is None else [host])

    async def _alone(self, run_id: str, waiting: list[asyncio.Future[list[Any]]]) -> None:
        try:
            got: list[Any] = await self.registry.watch.remote(run_id, self.waker_id)
        except BaseException as exc:  # noqa: BLE001 - its watchers hear why
            _settle(waiting, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        _settle(waiting, got)


def _settle(waiting: list[asyncio.Future[list[Any]]], outcome: list[Any] | BaseException) -> None:
    """Each watcher still waiting hears the answer, or why there is none."""
    for f in waiting:
        if f.done():
            continue
        if isinstance(outcome, BaseException):
            f.set_exception(outcome)
        else:
            f.set_result(outcome)
