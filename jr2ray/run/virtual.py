"""A virtual run seen from a driver: `VirtualRunHandle`.

Every call is a coroutine on the driver's own loop (the `Waker`'s thread), so `*_async` returns at once on any run,
a queued one included, and the sync form just waits for that coroutine. The handle caches the host that holds its
run, as Orleans caches a grain's place: a call on a live run is one Ray call. A host that no longer holds the run
answers `NotHere` and the handle asks the registry once. Reads of a parked run (status, Gates, a seat's surface,
history, telemetry) come from the store, where the host left how the run stood when it parked: they wake nothing.
Waiting is pushed, not polled: `until_turn`, `until_gate` and `finished` watch the run's host (a long call that
answers when the run changes), and while the run is parked or queued the registry tells the driver when it is live.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import ray

from jr2ray.menu import MenuItem, Receipt, Surface

from . import wire
from .calls import READS, check_call
from .errors import UnknownRun, UnknownTurn, Untaken, first_outcome, gate_refusal, raise_refusal
from .handles import DriverHandle
from .handover import Inbox
from .models import Carried, FirstAnswer, GateView, NotHere, RunStatus, Standing
from .replay import delivery_id_or_new
from .standing import journal_standing, surface_at
from .store import JournalStore
from .wakes import PendingPick, Waker
from .watching import SharedWatch, answer_of, watch, watch_name

T = TypeVar("T")
_LIVE = object()  # the store cannot answer: the run is hosted (or its journal says nothing to read from)
_AGAIN = object()  # a try of a call that must be made again: the run moved, or its host died on a read

Wanted = tuple[Callable[[Standing], bool], str]  # what a waiter waits for, and what its run's end means to it


def gate_open(gate: str) -> Wanted:
    """Waiting for Gate `gate` (its id) to be open."""
    return (lambda st: gate in st.waiting.gates), f"Gate {gate!r} will not open"


def turn_at_rest(seat: str) -> Wanted:
    """Waiting for the seat's Turn to be open and at Rest (it has Allowed picks)."""
    return (lambda st: bool(st.waiting.turns.get(seat))), f"no Turn of seat {seat!r} will be at Rest"


FINISHED: Wanted = (lambda st: st.status.status not in ("active", "queued")), "it has finished"
MenuOf = Callable[[str, str, str], list[MenuItem]]  # (workflow, seat, version) -> that seat's fixed Menu


class VirtualRunHandle(DriverHandle):
    """A virtual run: parked in its journal, or held by a pooled host while it has work (see the module doc).
    Slotted, and it holds nothing per run while nobody waits on it: a driver may hold 10,000 of them."""

    __slots__ = ("_menu_of", "_shared", "_waker", "admitted", "host", "registry")

    def __init__(self, run_id: str, registry: Any, store: JournalStore | None = None,
                 menu_of: MenuOf | None = None) -> None:
        super().__init__(run_id, store)
        self.registry = registry
        self.host: Any = None  # the host that held the run when last asked (fenced by NotHere)
        self.admitted = True  # False: `submit` found no free slot, and the run waits `queued`
        self._menu_of = menu_of
        self._waker: Waker | None = None
        self._shared: SharedWatch | None = None  # the one watch its waiters share, while any wait (`_until`)

    def __repr__(self) -> str:
        return f"VirtualRunHandle({self.id!r})"

    @property
    def waker(self) -> Waker:
        """This driver's loop for the run's registry (looked up once per handle: every call goes through it)."""
        got = self._waker
        if got is None:
            got = self._waker = Waker.of(self.registry)
        return got

    # ---- the driver's loop ---------------------------------------------------------------------------------
    def _run(self, coro: Coroutine[Any, Any, T], stop_on_cancel: bool = False) -> concurrent.futures.Future[T]:
        return self.waker.run(coro, stop_on_cancel)

    def _sync(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self._run(coro).result(timeout)

    async def _async(self, coro: Coroutine[Any, Any, T]) -> T:
        return await self.waker.call(coro)

    async def _host_for_write(self) -> Any:
        """The run's host, activating a parked run; a queued one is waited for on the wake board (no call held)."""
        return (await self._host_and_first(None))[0]

    async def _host_and_first(self, first: list[Any] | None,
                              watched: bool = False) -> tuple[Any, FirstAnswer | None]:
        """`_host_for_write`; `first`, a write that wakes the run, rides with the activation when one is made for
        it (`RunHost.adopt`), and its answer comes back with the host; else None, and the caller sends it."""
        if self.host is not None:
            return self.host, None
        waker = self.waker
        while True:
            wake = waker.expect(self.id)  # before the registry notes this driver: its word cannot come too soon
            try:
                ref = self.registry.activate.remote(self.id, None, None, None, waker.id, first)
                got = await (answer_of(self, ref) if first is not None and watched else ref)
                host = got[0] if got else await waker.woken(self.id, wake)  # queued: told when its slot comes
            except ray.exceptions.RayTaskError as exc:
                refused = gate_refusal(exc)  # the write it carried was refused: the run was not taken
                if refused is None:
                    raise_refusal(exc)
                raise Untaken(refused, wake.done()) from None
            finally:
                waker.forget(self.id, wake)
            if not got and host is None:
                continue
            if host is None:  # cancelled while it waited for a slot: activate what its journal now says
                (host,) = await self.registry.activate.remote(self.id)
            self.host = host = waker.intern(host)
            return host, (got[1] if len(got) > 1 else None)

    async def _invoke(self, method: str, args: list[Any]) -> Any:
        """One call on the live run (waking it if parked): one Ray call when the host is cached. A Gate event takes
        along this driver's picks parked on the run (their receipts come back with it: `Waker.carried`)."""
        write = check_call(method).write
        waker = self.waker
        carry = waker.take_parked(self.id) if method == "send" else []
        receipts: list[Any] | None = None
        host = None
        try:
            for attempt in range(4):
                host, got = await self._try(method, args, write, [c[1] for c in carry] or None, attempt)
                if got is _AGAIN:
                    continue
                if isinstance(got, Carried):
                    receipts = got.picks
                return self.landed(got) if write else got
            raise UnknownRun(f"run {self.id!r} kept moving between hosts")
        except Untaken as exc:  # nothing of the run changed: the picks it took along wait as they did
            if not exc.woke:  # no await since the wake listener was let go: no wake can come in between
                waker.put_back(self.id, carry)
                carry = []
            raise exc.refusal from None
        finally:
            if carry:
                waker.carried(host if receipts is not None else None, carry, receipts, self)

    async def _try(self, method: str, args: list[Any], write: bool, carried: list[list[Any]] | None,
                   attempt: int) -> tuple[Any, Any]:
        """One try of `_invoke`: the host and its answer, or `_AGAIN` when the run moved or its host died on a read.
        A Gate event (never a wait) rides with the activation that wakes its run: one host call, not two.
        A Gate event's answer carries how the run stands once it landed even when no watch of this handle was open
        as it left: a script that answers Gates and then waits on the runs opens their watches while the answers
        are on their way, and an answer with no standing made each such watch stale, so the next waiter asked
        the host afresh (a `watch` call of its own in 963 of 1,000 wakes of `runs_scale.py`, N=1,000). A reply
        nobody waits on then pays for a standing it did not need; that is small beside the host call it saves."""
        watched = self.watched  # a write's answer then carries a standing this handle's watch is told of
        standing: bool | str = watched or method == "send"
        first = [method, args, standing, carried] if method == "send" else None
        host, answered = await self._host_and_first(first, bool(watched))
        if answered is not None:
            return host, first_outcome(answered, args[3] if method == "send" else None)
        try:
            ref = wire.send(host, self.id, method, args, False, write and standing, carried)
            got = await (answer_of(self, wire.answer(ref)) if write and watched else wire.answer(ref))
        except ray.exceptions.RayActorError:
            await self.registry.host_died.remote(self.id, host._actor_id.hex())
            self.host = None  # the next call is adopted by another host
            if attempt or method not in READS:  # a write may have landed: never sent twice (D12)
                raise
            return None, _AGAIN
        except ray.exceptions.RayTaskError as exc:
            raise_refusal(exc)
        if isinstance(got, NotHere):  # it parked or moved: nothing was done there
            self.host = None
            return None, _AGAIN
        return host, got

    async def _read(self, method: str, args: list[Any]) -> Any:
        """A read: from the cached host, else from the store when the run is parked (nothing wakes), else from
        the host the registry names without waking it."""
        check_call(method)
        for _ in range(4):
            host = self.host
            if host is None:
                local = await asyncio.to_thread(self._from_store, method, args)
                if local is not _LIVE:
                    return local
                got = await self.registry.lookup.remote(self.id)
                if not got:
                    continue  # it parked meanwhile: the store again
                host = self.host = self.waker.intern(got[0])
            try:
                out = await wire.call(host, self.id, method, args, False)
            except ray.exceptions.RayActorError:
                await self.registry.host_died.remote(self.id, host._actor_id.hex())
                self.host = None
                continue
            except ray.exceptions.RayTaskError as exc:
                raise_refusal(exc)
            if isinstance(out, NotHere):
                self.host = None
                continue
            return out
        return await self._invoke(method, args)

    def _from_store(self, method: str, args: list[Any]) -> Any:
        if self.store is None:
            return _LIVE
        st = journal_standing(self.store, self.id)
        if st is None:
            return _LIVE
        return self._answer(st, method, args)

    def _answer(self, st: Standing, method: str, args: list[Any]) -> Any:
        """A read answered from how the run stands in the store."""
        assert self.store is not None
        if method == "status":
            return st.status
        if method == "gates":
            return st.status.gates
        if method == "history":
            return self._journal_feed(args[0] if args else 0)
        if method == "telemetry":
            return self._journal_telemetry()
        got = surface_at(st, args[0], self._menu_of, self.id) if method == "surface" else None
        return _LIVE if got is None else got

    def parked_surface(self, address: str) -> Surface | None:
        """The surface at `address` if the run is parked and the store can answer it; else None (ask its host)."""
        got = None if self.store is None else self.store.standing(self.id)
        try:
            return None if got is None else surface_at(Standing.model_validate(got), address, self._menu_of, self.id)
        except UnknownTurn:
            return None

    async def parked_surface_async(self, address: str) -> Surface | None:
        return await asyncio.to_thread(self.parked_surface, address)

    @property
    def watched(self) -> str | bool:
        """A watch of the run is open here: a write's answer is worth carrying how the run then stands (else
        nobody waits to be answered from it, and a hot run's picks need not pay for it). That watch's name, which
        the host notes with the standing it carried (`watching.watch`); False when none is open."""
        shared = self._shared
        pump = None if shared is None else shared.pump
        return False if pump is None else watch_name(self.waker.id, pump)

    def landed(self, got: Any) -> Any:
        """A send or pick of this handle landed; returns its answer. That answer reaches the driver before the
        watch's news of what it changed, so the standing the watch holds may be from before it: a script that
        answers a Gate and waits for it again must not be told it is open. So no waiter is answered from that
        standing until a fresher one: the one the host carried with the answer (`Carried`), taken on the driver's
        loop ahead of whatever the caller does next there, else a fresh look when a waiter comes.
        Called on any thread (a pick's answer arrives on Ray's)."""
        shared = self._shared
        if shared is not None:  # none: a watch that starts later looks afresh anyway
            shared.stale = True
        if not isinstance(got, Carried):
            return got
        st = got.standing
        if st is None or shared is None:  # it carried receipts only, or no watch here waits for it
            return got.value
        waker = self.waker
        if waker.on_loop():
            shared.took(st)
        else:
            waker.inbox.put(lambda: shared.took(st))
        return got.value

    async def _until(self, want: Callable[[Standing], bool], what: str) -> Standing:
        """On the driver's loop: the first standing `want` accepts, through the one watch of the run that every
        waiter here shares (`SharedWatch`, kept while someone waits). RunEnded if the run ends first."""
        return await self._shared_watch().until(want, what)

    def _shared_watch(self) -> SharedWatch:
        """On the driver's loop: the one watch of the run its waiters here share, made when the first comes."""
        shared = self._shared
        if shared is None:
            shared = self._shared = SharedWatch(self)
        return shared

    # ---- awaitables and events -----------------------------------------------------------------------------
    async def standings(self) -> AsyncIterator[Standing]:
        """How the run stands, now and after each change, until it finishes (pushed, not polled)."""
        queue: asyncio.Queue[Standing | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        back = Inbox.of(loop)  # tolerates the caller's loop closed before this watch stops

        async def pump() -> None:
            try:
                async for st in watch(self):
                    back.put(functools.partial(queue.put_nowait, st))
            finally:
                back.put(functools.partial(queue.put_nowait, None))

        fut = self._run(pump(), stop_on_cancel=True)
        try:
            while (st := await queue.get()) is not None:
                yield st
        finally:
            fut.cancel()

    async def until_turn(self, seat: str, timeout: float | None = None, counted_from_open: bool = False) -> Standing:
        """Once the seat's Turn is open and at Rest (it has Allowed picks). RunEnded if the run finishes first.
        `counted_from_open`: the timeout starts when the seat's Turn opens, not now (a run may wait long in line
        or parked before that); TimeoutError if it is not at Rest by then."""
        at_rest, what = turn_at_rest(seat)
        if counted_from_open and timeout is not None:
            opened = await self._async(self._until(
                lambda st: at_rest(st) or any(t.slot == seat and t.active for t in st.status.turns), what))
            if at_rest(opened):  # at Rest already: no second watch of the run
                return opened
        return await asyncio.wait_for(self._async(self._until(at_rest, what)), timeout)

    async def until_gate(self, gate: str, timeout: float | None = None) -> Standing:
        """Once Gate `gate` (its id, e.g. "notes.writing.asking") is open. RunEnded if the run finishes first."""
        return await asyncio.wait_for(self._async(self._until(*gate_open(gate))), timeout)

    async def finished(self, timeout: float | None = None) -> RunStatus:
        """The run's last status, once it is done, failed or cancelled (or lost, corrupt)."""
        st = await asyncio.wait_for(self._async(self._until(*FINISHED)), timeout)
        self.final = st.status
        return st.status

    # ---- calls -------------------------------------------------------------------------------------------------
    def ready(self) -> RunStatus:
        return self._sync(self._invoke("ready", []))

    async def ready_async(self) -> RunStatus:
        return await self._async(self._invoke("ready", []))

    def status(self) -> RunStatus:
        return self._sync(self._read("status", []))

    async def status_async(self) -> RunStatus:
        return await self._async(self._read("status", []))

    def gates(self) -> list[GateView]:
        return self._sync(self._read("gates", []))

    async def gates_async(self) -> list[GateView]:
        return await self._async(self._read("gates", []))

    def surface(self, address: str) -> Surface:
        return self._sync(self._read("surface", [address]))

    async def surface_async(self, address: str) -> Surface:
        return await self._async(self._read("surface", [address]))

    def history(self, since: int = 0) -> list[dict[str, Any]]:
        return list(self._sync(self._read("history", [since])))

    async def history_async(self, since: int = 0) -> list[dict[str, Any]]:
        return list(await self._async(self._read("history", [since])))

    def telemetry(self) -> list[dict[str, Any]]:
        return list(self._sync(self._read("telemetry", [])))

    async def telemetry_async(self) -> list[dict[str, Any]]:
        return list(await self._async(self._read("telemetry", [])))

    def pid(self) -> int:
        return int(self._sync(self._invoke("pid", [])))

    async def pid_async(self) -> int:
        return int(await self._async(self._invoke("pid", [])))

    def pick(self, address: str, name: str, args: dict[str, Any] | None = None,
             delivery_id: str | None = None, timeout: float | None = None) -> Receipt:
        """Deliver a pick and wait for its receipt (a pick that opens a Gate waits until Rest: use `pick_async`)."""
        got: Receipt = self.pick_async(address, name, args, delivery_id).result(timeout)
        return got

    def pick_async(self, address: str, name: str, args: dict[str, Any] | None = None,
                   delivery_id: str | None = None) -> PendingPick:
        """The pick, sent now straight to the run's host from the caller's thread when this handle knows it (and
        this step of the caller's loop has not spent its share, `LoopBudget`), else handed now to the driver's
        loop, which sends it (also if the caller gives up on it meanwhile). If the run parks before Rest, the pick
        waits here, not in an actor, and is sent again (same delivery id) when the run wakes."""
        return self.waker.pick(self, address, name, args, delivery_id)  # its answer `landed` before it is handed on

    def send(self, gate_id: str, name: str, args: dict[str, Any] | None = None,
             delivery_id: str | None = None) -> Any:
        return self.send_async(gate_id, name, args, delivery_id).result()

    def send_async(self, gate_id: str, name: str, args: dict[str, Any] | None = None,
                   delivery_id: str | None = None) -> PendingPick:
        """The Gate event, sent now; its SendResult comes with the returned PendingPick (await it, or `.result()`).
        It always has a delivery id (one is made when none is given): Ray may run the registry's call that carries
        it again after a restart, and the Gate takes one delivery id once."""
        did = delivery_id_or_new(delivery_id)
        return PendingPick(self._run(self._invoke("send", [gate_id, name, args or {}, did])))

    def cancel(self) -> RunStatus:
        """A queued run is cancelled in its journal; a parked one is woken to cancel."""
        return self._sync(self._cancel())

    async def cancel_async(self) -> RunStatus:
        return await self._async(self._cancel())

    async def _cancel(self) -> RunStatus:
        self.host = None
        got: RunStatus = await self.registry.cancel.remote(self.id)
        return got

    def stop(self) -> RunStatus:
        return self._sync(self._invoke("stop", []))

    async def stop_async(self) -> RunStatus:
        return await self._async(self._invoke("stop", []))

    def record_telemetry(self, row: dict[str, Any]) -> None:
        self._sync(self._invoke("record_telemetry", [row]))

    async def record_telemetry_async(self, row: dict[str, Any]) -> None:
        await self._async(self._invoke("record_telemetry", [row]))

    def presence(self) -> str:
        """live, parked or queued."""
        return str(self._sync(self._presence()))

    async def presence_async(self) -> str:
        return str(await self._async(self._presence()))

    async def _presence(self) -> str:
        got: dict[str, str] = await self.registry.presence.remote([self.id])
        return got[self.id]

    def host_now(self) -> Any:
        """The pooled host that holds the run now, or None when it is parked (a lookup: nothing is woken)."""
        return self._sync(self._lookup())

    async def host_now_async(self) -> Any:
        return await self._async(self._lookup())

    async def _lookup(self) -> Any:
        got = await self.registry.lookup.remote(self.id)
        return got[0] if got else None

    def wait(self, timeout: float | None = None) -> RunStatus:
        """The run's last status once it finished; TimeoutError after `timeout` (nothing is polled or woken)."""
        try:
            return self._sync(self._finished_within(timeout))
        except (TimeoutError, concurrent.futures.TimeoutError):
            raise TimeoutError(f"run {self.id} did not finish within {timeout}s") from None

    async def wait_async(self, timeout: float | None = None) -> RunStatus:
        try:
            return await self._async(self._finished_within(timeout))
        except TimeoutError:
            raise TimeoutError(f"run {self.id} did not finish within {timeout}s") from None

    async def _finished_within(self, timeout: float | None) -> RunStatus:
        st = await asyncio.wait_for(self._until(*FINISHED), timeout)
        self.final = st.status
        return st.status
