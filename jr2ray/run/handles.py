"""Run handles: a run seen from a driver, synchronously and with an awaitable form of every call.

`ActorRunHandle` talks to a run's own RunActor; `jr2ray.run.virtual.VirtualRunHandle` reaches a virtual run (both
are `DriverHandle`s; `jr2ray.run.client.RunHandle` names either), and `VirtualActorRef` is the API's face on one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from jr2ray.menu import Receipt, Surface

from . import wire
from .calls import READS, RUN_CALLS
from .errors import RunError, UnknownRun, first_outcome, raise_refusal
from .models import GateView, NotHere, RunStatus, SendResult, lifecycle
from .replay import delivery_id_or_new
from .store import JournalStore
from .wakes import PendingPick


def journal_status(store: JournalStore, run_id: str) -> RunStatus | None:
    """A run's status as its journal tells it, for a run with no live actor (finished, or between lives)."""
    try:
        j = store.open(run_id)
    except RunError:
        return None
    try:
        row, latest = j.run(), j.latest_snapshot()
        start = [*j.ledger("start"), *j.ledger("migration")] if row is not None else []
        said = [e.data for e in j.ledger("status")] if row is not None and row.status == "drifted" else []
    except RunError:
        return None
    finally:
        j.close()
    if row is None:
        return None
    snap = latest[1] if latest else {}
    error = snap.get("error")
    if row.status == "drifted":  # its last value and context, and why its code cannot be loaded
        error = next((d.get("error") for d in reversed(said) if d.get("status") == "drifted"), error)
    last = start[-1] if start else None
    version = "" if last is None else str(last.data.get("to" if last.kind == "migration" else "version") or "")
    return RunStatus(id=row.id, workflow=row.workflow, digest=row.digest, status=row.status,  # type: ignore[arg-type]
                     value=snap.get("value"), context=snap.get("context") or {}, output=snap.get("output"),
                     error=error, version=version)


WAIT_POLL_S = 0.2  # how often `Client.wait` looks at Run actors' waits while it also watches virtual runs


class DriverHandle:
    """What every driver handle of a run has: its id, the store that answers its reads once it finished (or while
    parked), and its last status once a wait saw it. Slotted: a driver holding 10,000 runs holds 10,000 of these."""

    __slots__ = ("__weakref__", "final", "id", "store")

    def __init__(self, run_id: str, store: JournalStore | None = None) -> None:
        self.id = run_id
        self.store = store
        self.final: RunStatus | None = None  # the finished status, once `wait` saw it

    def _journal_feed(self, since: int) -> list[dict[str, Any]]:
        assert self.store is not None
        j = self.store.open(self.id)
        try:
            return j.feed(since)
        finally:
            j.close()

    def _journal_telemetry(self) -> list[dict[str, Any]]:
        assert self.store is not None  # finished (or parked): the rows are in the journal
        j = self.store.open(self.id)
        try:
            return [e.data for e in j.ledger("telemetry")]
        finally:
            j.close()


class ActorRunHandle(DriverHandle):
    """A run with its own RunActor, seen from a driver. Mirrors LocalRun: each call is one actor round trip.

    Every call `x` also has `x_async`, an awaitable for asyncio drivers. `pick_async` returns at once (a
    `PendingPick`: await it, or `.result()` it): a pick that opens a Gate waits for Rest without blocking the caller,
    who can answer the Gate meanwhile. `send_async` returns an ObjectRef. A finished run's actor has exited: its
    reads (status, wait, telemetry) come from the journal.
    """

    __slots__ = ("actor",)

    def __init__(self, run_id: str, actor: Any, store: JournalStore | None = None) -> None:
        super().__init__(run_id, store)
        self.actor = actor

    def __repr__(self) -> str:
        return f"ActorRunHandle({self.id!r})"

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

    def telemetry(self) -> list[dict[str, Any]]:
        out = self._read("telemetry")
        return self._journal_telemetry() if isinstance(out, RunStatus) else out

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

    async def history_async(self, since: int = 0) -> list[dict[str, Any]]:
        if self.actor is None or (self.final is not None and self.store is not None):
            return await asyncio.to_thread(self._journal_feed, since)
        return list(await self._call("history", since))

    async def pid_async(self) -> int:
        return int(await self._read_async("pid"))

    async def record_telemetry_async(self, row: dict[str, Any]) -> None:
        await self._call("record_telemetry", row)


class _HostMethod:
    def __init__(self, ref: VirtualActorRef, method: str) -> None:
        self.ref, self.method = ref, method

    def remote(self, *args: Any) -> Any:
        return self.ref.invoke(self.method, list(args))


class StaleHost(RunError):
    """A call through a remembered host found that host no longer holds the run: the caller resolves the run anew
    (it may have parked, or finished), rather than this call waking it."""

    status_code = 503


class VirtualActorRef:
    """An actor-like face on a virtual run for asyncio callers (the API): `ref.status.remote()` is an awaitable, as
    a RunActor's call is, and only the declared run calls exist on it. `hosts` is the caller's cache of which host
    holds which run (shared across requests): a call on a live run is then one Ray call and reads no store. A host
    that has let the run go answers NotHere, and the registry is asked once (waking a parked run)."""

    def __init__(self, run_id: str, registry: Any, hosts: dict[str, Any] | None = None,
                 remembered: bool = False) -> None:
        self.run_id = run_id
        self.registry = registry
        self.hosts = {} if hosts is None else hosts
        self.remembered = remembered  # made from the cache alone: a miss is StaleHost, not a wake

    def __getattr__(self, method: str) -> _HostMethod:
        if method.startswith("_") or method not in RUN_CALLS:
            raise AttributeError(method)
        return _HostMethod(self, method)

    @property
    def host(self) -> Any:
        return self.hosts.get(self.run_id)

    async def invoke(self, method: str, args: list[Any]) -> Any:
        if method == "cancel":  # a queued run is cancelled in its journal, without waking
            self.hosts.pop(self.run_id, None)
            return await self.registry.cancel.remote(self.run_id)
        for attempt in range(4):
            host = self.hosts.get(self.run_id)
            if host is None:
                # A Gate event rides with the activation it makes (one call, and one refused writes nothing: the
                # run is not taken); its delivery id applies it once if Ray runs that call again after a restart.
                if method == "send":
                    args = [*args[:3], delivery_id_or_new(args[3] if len(args) > 3 else None)]
                first = ["send", args, False, None] if method == "send" else None
                try:
                    got = await self.registry.activate.remote(self.run_id, None, None, None, None, first)
                except ray.exceptions.RayTaskError as exc:
                    raise_refusal(exc)
                host = got[0]
                if host is None:  # cancelled while it waited for a slot: activate what its journal now says
                    (host,) = await self.registry.activate.remote(self.run_id)
                self.hosts[self.run_id] = host
                if len(got) > 1:
                    return first_outcome(got[1], args[3])
            try:
                got = await wire.call(host, self.run_id, method, args, False)
            except ray.exceptions.RayActorError:
                await self.registry.host_died.remote(self.run_id, host._actor_id.hex())
                self.hosts.pop(self.run_id, None)  # the next call is adopted by another host
                if attempt or method not in READS:  # a write may have landed: never sent twice (D12)
                    raise
                if self.remembered:  # made from the cache alone: the caller reads the store, or asks anew
                    raise StaleHost(f"run {self.run_id!r}: the host that held it is gone") from None
                continue
            if isinstance(got, NotHere):
                self.hosts.pop(self.run_id, None)
                if self.remembered:
                    raise StaleHost(f"run {self.run_id!r} is no longer on the host that held it")
                continue
            return got
        raise UnknownRun(f"run {self.run_id!r} kept moving between hosts")
