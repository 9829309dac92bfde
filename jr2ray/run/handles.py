"""Run handles: a run seen from a driver, synchronously and with an awaitable form of every call.

`RunHandle` talks to a run's own RunActor; `VirtualRunHandle` to whichever pooled host holds a virtual run now.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

from jr2ray.menu import Receipt, Surface

from .errors import RunError, UnknownRun
from .models import GateView, RunStatus, SendResult, lifecycle
from .store import JournalStore
from .wakes import PendingPick, Waker


def journal_status(store: JournalStore, run_id: str) -> RunStatus | None:
    """A run's status as its journal tells it, for a run with no live actor (finished, or between lives)."""
    try:
        j = store.open(run_id)
    except RunError:
        return None
    try:
        row, latest = j.run(), j.latest_snapshot()
    except RunError:
        return None
    finally:
        j.close()
    if row is None:
        return None
    snap = latest[1] if latest else {}
    return RunStatus(id=row.id, workflow=row.workflow, digest=row.digest, status=row.status,  # type: ignore[arg-type]
                     value=snap.get("value"), context=snap.get("context") or {}, output=snap.get("output"),
                     error=snap.get("error"))


WAIT_POLL_S = 0.2  # how often `wait` looks at the journals of virtual runs


class RunHandle:
    """A run seen from a driver. Mirrors LocalRun: each call is one actor round trip.

    Every call `x` also has `x_async`, an awaitable for asyncio drivers. `pick_async` returns at once (a
    `PendingPick`: await it, or `.result()` it): a pick that opens a Gate waits for Rest without blocking the caller,
    who can answer the Gate meanwhile. `send_async` returns an ObjectRef. A finished run's actor has exited: its
    reads (status, wait, telemetry) come from the journal.
    """

    def __init__(self, run_id: str, actor: Any, store: JournalStore | None = None) -> None:
        self.id = run_id
        self.actor = actor
        self.store = store
        self.final: RunStatus | None = None  # the finished status, once `wait` saw it

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r})"

    def _finished(self) -> RunStatus | None:
        st = journal_status(self.store, self.id) if self.store is not None else None
        return st if st is not None and lifecycle(st.status) == "finished" else None

    def _call(self, method: str, *args: Any) -> Any:
        if self.actor is None:
            raise UnknownRun(f"run {self.id!r} has no live actor")
        return getattr(self.actor, method).remote(*args)

    def _read(self, method: str, *args: Any) -> Any:
        if self.actor is None:
            if (st := self._finished()) is not None:
                return st
            raise UnknownRun(f"run {self.id!r} has no live actor")
        try:
            return ray.get(self._call(method, *args))
        except ray.exceptions.RayActorError:
            if (st := self._finished()) is None:
                raise
            return st

    async def _read_async(self, method: str, *args: Any) -> Any:
        if self.actor is None:
            return await asyncio.to_thread(self._read, method, *args)
        try:
            return await self._call(method, *args)
        except ray.exceptions.RayActorError:
            if (st := await asyncio.to_thread(self._finished)) is None:
                raise
            return st

    # ---- synchronous ---------------------------------------------------------------------------------------
    def ready(self) -> RunStatus:
        return ray.get(self._call("ready"))

    def surface(self, address: str) -> Surface:
        return ray.get(self._call("surface", address))

    def pick(self, address: str, name: str, args: dict[str, Any] | None = None,
             delivery_id: str | None = None, timeout: float | None = None) -> Receipt:
        """Deliver a pick and wait for its receipt (a pick that opens a Gate waits until Rest: use `pick_async`)."""
        return self.pick_async(address, name, args, delivery_id).result(timeout)

    def gates(self) -> list[GateView]:
        return ray.get(self._call("gates"))

    def send(self, gate_id: str, name: str, args: dict[str, Any] | None = None,
             delivery_id: str | None = None) -> SendResult:
        return ray.get(self.send_async(gate_id, name, args, delivery_id))

    def status(self) -> RunStatus:
        return self._read("status")

    def cancel(self) -> RunStatus:
        return ray.get(self._call("cancel"))

    def stop(self) -> RunStatus:
        return ray.get(self._call("stop"))

    def wait(self, timeout: float | None = None) -> RunStatus:
        return self._read("wait", timeout)

    def record_telemetry(self, row: dict[str, Any]) -> None:
        """Push one model-request row into the run, as its Harness does (tests and external Harnesses)."""
        ray.get(self._call("record_telemetry", row))

    def pid(self) -> int:
        """The process id of the actor that holds the run now (diagnostics, and the kill tests)."""
        return int(self._read("pid"))

    def history(self, since: int = 0) -> list[dict[str, Any]]:
        """The run's feed from event number `since` (its journal's, once the run finished)."""
        if self.actor is None or (self.final is not None and self.store is not None):
            return self._journal_feed(since)
        return list(ray.get(self._call("history", since)))

    def _journal_feed(self, since: int) -> list[dict[str, Any]]:
        assert self.store is not None
        j = self.store.open(self.id)
        try:
            return j.feed(since)
        finally:
            j.close()

    def telemetry(self) -> list[dict[str, Any]]:
        out = self._read("telemetry")
        return self._journal_telemetry() if isinstance(out, RunStatus) else out

    def _journal_telemetry(self) -> list[dict[str, Any]]:
        assert self.store is not None  # finished: the rows are in the journal
        j = self.store.open(self.id)
        try:
            return [e.data for e in j.ledger("telemetry")]
        finally:
            j.close()

    # ---- asyncio -------------------------------------------------------------------------------------------
    def pick_async(self, address: str, name: str, args: dict[str, Any] | None = None,
                   delivery_id: str | None = None) -> PendingPick:
        """The pick, sent now; its receipt comes with the returned PendingPick (await it, or `.result()` it)."""
        return PendingPick.of_ref(self._call("pick", address, name, args or {}, delivery_id))

    def send_async(self, gate_id: str, name: str, args: dict[str, Any] | None = None,
                   delivery_id: str | None = None) -> Any:
        """The Gate event, sent now; its SendResult is the returned ObjectRef."""
        return self._call("send", gate_id, name, args or {}, delivery_id)

    async def ready_async(self) -> RunStatus:
        return await self._call("ready")

    async def surface_async(self, address: str) -> Surface:
        return await self._call("surface", address)

    async def gates_async(self) -> list[GateView]:
        return await self._call("gates")

    async def status_async(self) -> RunStatus:
        return await self._read_async("status")

    async def cancel_async(self) -> RunStatus:
        return await self._call("cancel")

    async def stop_async(self) -> RunStatus:
        return await self._call("stop")

    async def wait_async(self, timeout: float | None = None) -> RunStatus:
        return await self._read_async("wait", timeout)

    async def telemetry_async(self) -> list[dict[str, Any]]:
        out = await self._read_async("telemetry")
        return await asyncio.to_thread(self._journal_telemetry) if isinstance(out, RunStatus) else out


class VirtualRunHandle(RunHandle):
    """A virtual run: every call goes to the pooled host that holds it now, which the registry activates from the
    journal when the run is parked. The host is cached; a host that has since parked the run forwards the call."""

    def __init__(self, run_id: str, registry: Any, store: JournalStore | None = None) -> None:
        super().__init__(run_id, registry, store)
        self.host: Any = None
        self.starting: Any = None  # the start's activation, when this handle started the run
        self.admitted = True  # False: `submit` found no free slot, and the run waits `queued`

    def host_now(self) -> Any:
        """The pooled host that holds the run now, or None when it is parked (a lookup: nothing is woken)."""
        got = ray.get(self.actor.lookup.remote(self.id))
        return got[0] if got else None

    def __repr__(self) -> str:
        return f"VirtualRunHandle({self.id!r})"

    def _call(self, method: str, *args: Any) -> Any:
        if self.host is None:
            start = self.starting
            (self.host,) = ray.get(start if start is not None else self.actor.activate.remote(self.id))
            self.starting = None
            if self.host is None:  # cancelled while queued: activate what its journal now says
                (self.host,) = ray.get(self.actor.activate.remote(self.id))
        return self.host.call.remote(self.id, method, list(args))

    def pick_async(self, address: str, name: str, args: dict[str, Any] | None = None,
                   delivery_id: str | None = None) -> PendingPick:
        """The pick, sent now from this process's Waker: if the run parks before Rest, the pick waits here, not in
        an actor, and is sent again (same delivery id) when the run wakes."""
        return Waker.of(self.actor).pick(self, address, name, args, delivery_id)

    def cancel(self) -> RunStatus:
        """A queued run is cancelled in its journal; a parked one is woken to cancel."""
        return ray.get(self.actor.cancel.remote(self.id))

    async def cancel_async(self) -> RunStatus:
        return await self.actor.cancel.remote(self.id)

    def _read(self, method: str, *args: Any) -> Any:
        """A read whose host died (its process ended for good) is asked again, of the run's next host."""
        try:
            return super()._read(method, *args)
        except ray.exceptions.RayActorError:
            if self.host is not None:
                ray.get(self.actor.host_died.remote(self.id, self.host._actor_id.hex()))
            self.host = None
            return super()._read(method, *args)

    def status(self) -> RunStatus:
        """A finished run answers from its journal, without waking."""
        return self._finished() or self._read("status")

    async def status_async(self) -> RunStatus:
        return await asyncio.to_thread(self._finished) or await self._read_async("status")

    def history(self, since: int = 0) -> list[dict[str, Any]]:
        if self._finished() is not None:
            return self._journal_feed(since)
        return list(ray.get(self._call("history", since)))

    def presence(self) -> str:
        """live, parked or queued."""
        return ray.get(self.actor.presence.remote([self.id]))[self.id]

    def wait(self, timeout: float | None = None) -> RunStatus:
        """Watched in the journal: waiting keeps a parked run parked."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (st := self._finished()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.id} did not finish within {timeout}s")
            time.sleep(WAIT_POLL_S)
        self.final = st
        return st

    async def wait_async(self, timeout: float | None = None) -> RunStatus:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (st := await asyncio.to_thread(self._finished)) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.id} did not finish within {timeout}s")
            await asyncio.sleep(WAIT_POLL_S)
        self.final = st
        return st


READS = frozenset({"status", "gates", "history", "telemetry", "ready", "pid"})  # safe to send again


class _HostMethod:
    def __init__(self, ref: VirtualActorRef, method: str) -> None:
        self.ref, self.method = ref, method

    def remote(self, *args: Any) -> Any:
        return self.ref.invoke(self.method, list(args))


class VirtualActorRef:
    """An actor-like face on a virtual run for asyncio callers (the API): `ref.status.remote()` is an awaitable, as
    a RunActor's call is. The first call finds the run's host through the registry, waking a parked run; a host
    that has since parked it forwards the call to its next activation."""

    def __init__(self, run_id: str, registry: Any) -> None:
        self.run_id = run_id
        self.registry = registry
        self.host: Any = None

    def __getattr__(self, method: str) -> _HostMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _HostMethod(self, method)

    async def invoke(self, method: str, args: list[Any]) -> Any:
        if method == "cancel":  # a queued run is cancelled in its journal, without waking
            return await self.registry.cancel.remote(self.run_id)
        for attempt in range(2):
            if self.host is None:
                (host,) = await self.registry.activate.remote(self.run_id)
                if host is None:  # cancelled while it waited for a slot: activate what its journal now says
                    (host,) = await self.registry.activate.remote(self.run_id)
                self.host = host
            try:
                return await self.host.call.remote(self.run_id, method, args)
            except ray.exceptions.RayActorError:
                await self.registry.host_died.remote(self.run_id, self.host._actor_id.hex())
                self.host = None  # the next call is adopted by another host
                if attempt or method not in READS:  # a write may have landed: never sent twice (D12)
                    raise
        raise AssertionError("unreachable")
