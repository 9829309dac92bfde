"""A driver's picks that wait on a parked run, kept in the driver, not in any actor.

A pick that opens a Gate waits for Rest, and the run parks meanwhile (a person may answer in hours). Kept as an open
Ray call, each such pick cost tens of KB in the host that served it and again in the registry, for as long as the
run stayed parked: 10,000 runs at a Gate held about 1.4 GB that way. Here the host answers `PickParked` instead, the
registry notes this driver's wake id beside the parked run, and one long poll per driver process (`wakes`) hears
when the run is live again; the pick is then sent again with the same delivery id, and its receipt comes from the
run's journal (a delivery is never applied twice).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import uuid
from collections.abc import Generator
from typing import Any

from .models import PickParked

POLL_S = 20.0  # one long poll of the registry lasts up to this
RETRY_S = 1.0  # after the registry did not answer (it is restarting), ask again after this


class PendingPick:
    """A pick sent and not yet answered: `await` it, `.result(timeout)` it, or take its `.future()`."""

    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self._future = future

    @classmethod
    def of_ref(cls, ref: Any) -> PendingPick:
        """One actor call's answer (a run with its own RunActor: its pick never parks)."""
        return cls(ref.future())

    def result(self, timeout: float | None = None) -> Any:
        """The receipt; raises TimeoutError after `timeout` seconds."""
        return self._future.result(timeout)

    def future(self) -> concurrent.futures.Future[Any]:
        return self._future

    def done(self) -> bool:
        return self._future.done()

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self._future).__await__()


class Waker:
    """The parked picks of one driver process for one registry, and the long poll that resends them.

    Its own thread runs an asyncio loop, so a pick's whole life (send, hear it parked, wait for the wake, send again)
    blocks no caller: `pick_async` returns at once, from sync and async code alike."""

    _mine: dict[str, Waker] = {}
    _lock = threading.Lock()

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self.id = uuid.uuid4().hex[:16]  # this driver's wake id
        self.loop = asyncio.new_event_loop()
        self.waits: dict[str, list[asyncio.Future[Any]]] = {}  # run id -> its parked picks, until it wakes
        self.early: set[str] = set()  # woken before the parked answer came back (then it is sent again at once)
        self.incarnation: str | None = None
        self.resent = 0  # picks sent again after a wake (for tests and benchmarks)
        threading.Thread(target=self.loop.run_forever, name="jr2ray-wakes", daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._poll(), self.loop)

    @classmethod
    def of(cls, registry: Any) -> Waker:
        """One per registry actor in this process."""
        key = registry._actor_id.hex()
        with cls._lock:
            got = cls._mine.get(key)
            if got is None:
                got = cls._mine[key] = cls(registry)
            return got

    def pick(self, handle: Any, address: str, name: str, args: dict[str, Any] | None,
             delivery_id: str | None) -> PendingPick:
        delivery_id = delivery_id or uuid.uuid4().hex[:16]  # the same one each time it is sent
        return PendingPick(asyncio.run_coroutine_threadsafe(
            self._deliver(handle, [address, name, args or {}, delivery_id, self.id]), self.loop))

    async def _deliver(self, handle: Any, args: list[Any]) -> Any:
        host = await self._host(handle)
        while True:
            got = await host.call.remote(handle.id, "pick", args)
            if not isinstance(got, PickParked):
                return got
            host = await self._woken(handle.id)
            self.resent += 1
            if host is None:  # woken before the parked answer came back, or the registry restarted: ask it
                (host,) = await self.registry.activate.remote(handle.id)
                if host is None:  # it was cancelled while queued: its journal answers
                    (host,) = await self.registry.activate.remote(handle.id)
            handle.host = host  # the handle's later calls go straight there too

    async def _host(self, handle: Any) -> Any:
        """The handle's host, or the one its start (or a fresh activation) gives."""
        if handle.host is not None:
            return handle.host
        start = handle.starting
        (host,) = await (start if start is not None else self.registry.activate.remote(handle.id))
        if host is None:
            (host,) = await self.registry.activate.remote(handle.id)
        handle.host, handle.starting = host, None
        return host

    async def _woken(self, run_id: str) -> Any:
        """Until the run wakes: its host then (None: ask the registry for it)."""
        if run_id in self.early:
            self.early.discard(run_id)
            return None
        fut: asyncio.Future[Any] = self.loop.create_future()
        self.waits.setdefault(run_id, []).append(fut)
        return await fut

    def _wake(self, run_id: str, host: Any = None) -> None:
        futs = self.waits.pop(run_id, None)
        if futs is None:
            self.early.add(run_id)
            return
        for f in futs:
            if not f.done():
                f.set_result(host)

    async def _poll(self) -> None:
        """Ask the registry, one long poll at a time, which of the runs this driver waits on woke. A registry that
        restarted forgot who waited: every parked pick is sent again (each wakes its run once)."""
        while True:
            try:
                got = await self.registry.wakes.remote(self.id, POLL_S)
            except Exception:  # noqa: BLE001 - the registry restarting, or this Ray gone: the poll must go on
                await asyncio.sleep(RETRY_S)
                continue
            if self.incarnation is not None and got["registry"] != self.incarnation:
                for rid in list(self.waits):
                    self._wake(rid)
            self.incarnation = got["registry"]
            for rid, host in got["runs"]:
                self._wake(rid, host)
