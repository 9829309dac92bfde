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
import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

from . import gcfreeze, wire
from .handover import PARKED, Awaited, Hop, Inbox, copy_outcome, stop_if_cancelled
from .loop_budget import LoopBudget
from .loops import running_loop
from .models import NotHere, PickParked
from .replay import delivery_id_or_new

T = TypeVar("T")

POLL_S = 20.0  # one long poll of the registry lasts up to this
RETRY_S = 1.0  # after the registry did not answer (it is restarting), ask again after this
WATCHER_GONE_S = 600.0  # a wake id that has not asked for its wakes this long is a driver that has gone


class WakeBoard:
    """The registry's side: which callers (wake ids, one per driver process) wait on which parked or queued run,
    and the long poll through which each hears that its runs went live, and on which host.

    Every note and every telling happens under the run's lock in the registry, in the same step as the park or
    the activation, so no wake falls between a caller's look and its note."""

    def __init__(self) -> None:
        self.watchers: dict[str, tuple[str, ...]] = {}  # run id -> wake ids waiting for its next activation
        # wake id -> (run, its host, how it stood once taken or None, its lease epoch or None) woken since it asked
        self.ready: dict[str, list[tuple[str, Any, Any, int | None]]] = {}
        self.ready_ev: dict[str, asyncio.Event] = {}
        self.polled: dict[str, float] = {}  # wake id -> when it last asked

    def note(self, run_id: str, wake_ids: list[str] | tuple[str, ...]) -> None:
        """These callers wait for the run's next activation."""
        if wake_ids:
            self.watchers[run_id] = tuple(sorted({*self.watchers.get(run_id, ()), *wake_ids}))

    def watched(self, run_id: str) -> bool:
        """Does a caller wait for this run's next activation (so how it stands then is worth handing on)?"""
        return run_id in self.watchers

    def tell(self, run_id: str, host: Any, standing: Any = None, epoch: int | None = None) -> None:
        """The run is live on `host`: each caller that waited on it hears so (and where, how the run stood once
        taken when the host said, and which activation: its lease `epoch`) at its next poll."""
        now = time.monotonic()
        for w in self.watchers.pop(run_id, ()):
            if now - self.polled.setdefault(w, now) > WATCHER_GONE_S:  # that driver has gone: drop what it had
                for d in (self.ready, self.ready_ev, self.polled):
                    d.pop(w, None)
                continue
            self.ready.setdefault(w, []).append((run_id, host, standing, epoch))
            ev = self.ready_ev.get(w)
            if ev is not None:
                ev.set()

    async def poll(self, watcher: str, timeout_s: float) -> list[tuple[str, Any, Any, int | None]]:
        """The runs woken for `watcher` since it last asked; waits up to `timeout_s` for one."""
        self.polled[watcher] = time.monotonic()
        ev = self.ready_ev.setdefault(watcher, asyncio.Event())
        if not self.ready.get(watcher):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), timeout_s)
        ev.clear()
        self.polled[watcher] = time.monotonic()
        return self.ready.pop(watcher, [])

    def stats(self) -> dict[str, int]:
        return {"watched_runs": len(self.watchers), "wake_ids": len(self.polled)}


class PendingPick:
    """A pick sent and not yet answered: `await` it, `.result(timeout)` it, or take its `.future()`. Awaiting one
    that is answered already returns at once, without a step of the loop between."""

    __slots__ = ("_future",)

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
        return Awaited.on_running_loop(self._future).__await__()


class Waker:
    """One driver process's loop for one registry: every call a driver's handle makes runs here, on its own thread,
    so no caller's loop ever blocks on Ray; and the one long poll through which the registry tells this driver which
    of the runs it waits on (a parked pick, a watch, a queued start) went live, and on which host."""

    _mine: dict[str, Waker] = {}
    _lock = threading.Lock()

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self.id = uuid.uuid4().hex[:16]  # this driver's wake id
        self.loop = asyncio.new_event_loop()
        # The driver's store reads (a parked run's status, its feed) run on two threads, not the default six:
        # every thread busy in Python takes the GIL from the caller's own loop.
        self.loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="jr2ray-store"))
        self.inbox = Inbox(self.loop)
        # run id -> what waits for its next activation: each gets (its host, how it stood once taken, or None)
        self.waits: dict[str, list[asyncio.Future[tuple[Any, Any]]]] = {}
        # run id -> the picks that wait for its next activation, each a record (handle, call, future of its
        # receipt) and no task: 10,000 runs at a Gate hold 10,000 small tuples here, not 10,000 suspended
        # coroutines, tasks and futures for the cyclic GC to walk at each full pass
        self.parked: dict[str, list[tuple[Any, list[Any], concurrent.futures.Future[Any]]]] = {}
        # run id -> (when, which activation) it woke while nothing here waited: a pick parked next may be sent again
        self.early: dict[str, tuple[float, int | None]] = {}
        self.incarnation: str | None = None
        self.resent = 0  # picks sent again after a wake (for tests and benchmarks)
        self.answered_carried = 0  # parked picks answered by the write that woke their run (`carried`)
        self.hosts: dict[bytes, Any] = {}  # actor id -> the one handle on that host here (see `intern`)
        gcfreeze.count(lambda: len(self.waits) + len(self.parked))
        threading.Thread(target=self.loop.run_forever, name="jr2ray-driver", daemon=True).start()
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

    def run(self, coro: Coroutine[Any, Any, T], stop_on_cancel: bool = False) -> concurrent.futures.Future[T]:
        """Run `coro` on this driver's loop; its result comes with the returned future (for sync callers).
        `stop_on_cancel`: cancelling that future stops the coroutine too (a watch given up on stops watching, and
        stops counting among the runs waited on); without it, a pick or Gate event goes on being delivered."""
        out: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._run_into(coro, out, stop_on_cancel)
        return out

    def _run_into(self, coro: Coroutine[Any, Any, Any], out: concurrent.futures.Future[Any],
                  stop_on_cancel: bool = False) -> None:
        """Run `coro` on this driver's loop, its outcome copied into `out` (a future the caller already holds: a
        parked pick's second leg needs no future of its own)."""
        def start() -> None:
            # Answered already, or a watch given up on before it started: nothing to do. A pick or Gate event whose
            # caller gave up before it started is still delivered, as one that had started would be: whether a
            # given-up pick landed must not depend on which path it took (`LoopBudget`).
            if out.done() and (stop_on_cancel or not out.cancelled()):
                coro.close()
                return
            task = self.loop.create_task(coro)
            if not stop_on_cancel:
                task.add_done_callback(lambda t: copy_outcome(t, out))
                return
            # `out` reaches the task only while it runs: a done future keeps its callbacks, and a finished task
            # kept from it would be one more object per run, or a cycle through a cancelled task's traceback.
            running = [task]

            def ended(t: asyncio.Task[Any]) -> None:
                copy_outcome(t, out)
                running.clear()

            task.add_done_callback(ended)
            out.add_done_callback(functools.partial(stop_if_cancelled, self.inbox, running))

        self.inbox.put(start)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro`, run on this driver's loop, from the caller's own loop. Both hops are batched (`Inbox`);
        cancelling the caller's await cancels the coroutine."""
        here = asyncio.get_running_loop()
        fut: asyncio.Future[T] = here.create_future()
        hop = Hop(self.loop, self.inbox, Inbox.of(here), coro, fut)
        fut.add_done_callback(hop.cancelled)
        self.inbox.put(hop.start)
        return await fut

    def on_loop(self) -> bool:
        """Is the caller running on this driver's loop?"""
        return running_loop() is self.loop

    def pick(self, handle: Any, address: str, name: str, args: dict[str, Any] | None,
             delivery_id: str | None) -> PendingPick:
        """Send a pick. When the handle knows its run's host, it goes there straight from the caller's thread (one
        Ray call, no hop through this loop), unless this step of the caller's loop has spent its share sending
        (`LoopBudget`); what that answer needs next (the run parked, or moved), a pick over that share and any pick
        whose host is not known yet are carried on here."""
        call = [address, name, args or {}, delivery_id_or_new(delivery_id), self.id]  # one id, every send
        host = handle.host
        out: concurrent.futures.Future[Any] = concurrent.futures.Future()
        here = running_loop()  # on this driver's loop, "by this loop" is no way round: no budget
        budget = None if here is None or here is self.loop else LoopBudget.of(here)
        if host is None or (budget is not None and not budget.take()):  # unknown host, or this step of the
            self._run_into(self._deliver(handle, call, out), out)  # caller's loop has sent its share: by this loop
            return PendingPick(out)

        def answered(f: concurrent.futures.Future[Any]) -> None:
            try:
                got = wire.unpack(f.result())
            except BaseException as exc:  # noqa: BLE001 - the caller gets it, as from the slow path
                if not out.done():  # done: its caller cancelled it, and nobody reads the answer
                    out.set_exception(exc)
                return
            if isinstance(got, PickParked):  # kept on this driver's loop until the run wakes
                if handle.host is host:  # it parked: the next write goes to the registry, not a NotHere hop
                    handle.host = None
                self.inbox.put(lambda: self._park(handle, call, out, sent, got.epoch))
            elif isinstance(got, NotHere):
                handle.host = None
                self._run_into(self._deliver(handle, call, out), out)
            else:
                landed = handle.landed(got)
                if not out.done():
                    out.set_result(landed)

        sent = time.monotonic()
        wire.send(host, handle.id, "pick", call, False, handle.watched).future().add_done_callback(answered)
        return PendingPick(out)

    async def _deliver(self, handle: Any, args: list[Any], out: concurrent.futures.Future[Any]) -> Any:
        """Send the pick until a host answers it; a run that parked first keeps it as a record (`_park`). `out`
        leaves this frame however it ends: an error raised here is set on `out`, and its traceback holds this
        frame, so `out` kept in it would be a cycle the GC must find (never, once frozen: `gcfreeze`)."""
        try:
            while True:
                host = await handle._host_for_write()
                sent = time.monotonic()
                got = await wire.call(host, handle.id, "pick", args, False, handle.watched)
                if isinstance(got, NotHere):  # the cached host let the run go: ask the registry again
                    handle.host = None
                    continue
                if not isinstance(got, PickParked):
                    return handle.landed(got)
                if handle.host is host:
                    handle.host = None
                self._park(handle, args, out, sent, got.epoch)
                return PARKED
        finally:
            del out

    def _park(self, handle: Any, args: list[Any], out: concurrent.futures.Future[Any], sent: float,
              epoch: int | None) -> None:
        """On this loop: the pick found its run parked (from activation `epoch`); it is sent again (same delivery
        id) at the run's next wake, or now if a later activation's wake came while nothing here waited (then the
        registry is asked for the host: the wake's may be gone). Not on a wake another waiter took: a watch's own
        wakes would resend it in a loop. Not on the wake of the activation it parked from: the pick's own send may
        have made that one (sent again after a wake that was not its reply, or after a refused reply), and sending
        it again then woke the run and parked it once an idle spell, for ever. A wake whose activation is not known
        counts if it was heard after the pick was `sent`."""
        if out.done():  # its caller cancelled it
            return
        woke = self.early.pop(handle.id, None)
        if woke is not None and (woke[1] > epoch if woke[1] is not None and epoch is not None else woke[0] >= sent):
            handle.host = None
            self._resend(handle, args, out)
            return
        self.parked.setdefault(handle.id, []).append((handle, args, out))

    def take_parked(self, run_id: str) -> list[tuple[Any, list[Any], concurrent.futures.Future[Any]]]:
        """On this loop: the picks parked on `run_id`, taken to ride with a write that wakes it (`RunHost.call`'s
        `carry`). Each must come back through `carried`."""
        return self.parked.pop(run_id, [])

    def put_back(self, run_id: str, picks: list[tuple[Any, list[Any], concurrent.futures.Future[Any]]]) -> None:
        """On this loop: the picks a Gate event took along, when it was refused before its run was taken (nothing
        of the run changed). They wait parked on it as before, for its next wake."""
        if picks:
            self.parked[run_id] = [*picks, *self.parked.get(run_id, [])]

    def carried(self, host: Any, picks: list[tuple[Any, list[Any], concurrent.futures.Future[Any]]],
                receipts: list[Any] | None, sender: Any = None) -> None:
        """On this loop: the picks a write carried, each answered with the receipt its host gave back; one without
        (it waits for Rest, or the write never landed: `receipts` None) is sent again alone, as at a wake. A pick of
        the write's own handle (`sender`) is not `landed`: that handle took the write's standing, from after it;
        another handle on the run did not, so its next waiter must look afresh."""
        for i, (handle, args, out) in enumerate(picks):
            receipt = receipts[i] if receipts is not None and i < len(receipts) else None
            if receipt is None:
                handle.host = host
                self._resend(handle, args, out)
            elif not out.done():
                self.answered_carried += 1
                out.set_result(receipt if handle is sender else handle.landed(receipt))

    def _resend(self, handle: Any, args: list[Any], out: concurrent.futures.Future[Any]) -> None:
        self.resent += 1
        self._run_into(self._deliver(handle, args, out), out)

    def expect(self, run_id: str) -> asyncio.Future[tuple[Any, Any]]:
        """On this loop: the run's next wake, listened for from now. Taken before the caller notes itself with the
        registry (or asks a host that may answer "parked"), so a wake that comes back before the caller awaits it
        is not missed, whoever else waits on the run. Await it with `woken_standing`, or `forget` it."""
        fut: asyncio.Future[tuple[Any, Any]] = self.loop.create_future()
        self.waits.setdefault(run_id, []).append(fut)
        return fut

    def forget(self, run_id: str, fut: asyncio.Future[tuple[Any, Any]]) -> None:
        """Stop listening with `fut` (an `expect` not awaited, or awaited and done)."""
        got = self.waits.get(run_id)
        if got is None:
            return
        left = [f for f in got if f is not fut]
        if left:
            self.waits[run_id] = left
        else:
            self.waits.pop(run_id, None)

    async def woken(self, run_id: str, expected: asyncio.Future[tuple[Any, Any]] | None = None) -> Any:
        """Until the run is live again (the registry was told this driver waits on it): its host then, or None
        (ask the registry for it)."""
        return (await self.woken_standing(run_id, expected))[0]

    async def woken_standing(self, run_id: str,
                             expected: asyncio.Future[tuple[Any, Any]] | None = None) -> tuple[Any, Any]:
        """`woken`, with how the run stood once its host took it (a `Standing` carrying that host's version
        count), or None when the host did not say. `expected`: the `expect` taken before the registry was told
        (else a wake from now on only)."""
        fut = self.expect(run_id) if expected is None else expected
        try:
            return await fut
        finally:
            self.forget(run_id, fut)

    def intern(self, host: Any) -> Any:
        """One handle object per host actor in this driver: a handle a run caches costs ~10 KB (Ray builds its
        method table), and 10,000 runs share the pool's few dozen hosts."""
        if host is None:
            return None
        key = host._actor_id.binary()
        got = self.hosts.get(key)
        if got is None:
            got = self.hosts[key] = host
        return got

    def _wake(self, run_id: str, host: Any = None, standing: Any = None, epoch: int | None = None) -> None:
        futs = self.waits.pop(run_id, None)
        picks = self.parked.pop(run_id, None)
        host = self.intern(host)
        for handle, args, out in picks or ():
            handle.host = host  # None: ask the registry for it
            self._resend(handle, args, out)
        if not futs:
            if not picks:  # a pick whose "parked" answer is still on its way finds this wake here
                now = time.monotonic()
                self.early[run_id] = (now, epoch)
                if len(self.early) > 1024:  # a wake nothing came to wait for: forget old ones
                    self.early = {r: w for r, w in self.early.items() if now - w[0] < WATCHER_GONE_S}
            return
        for f in futs:
            if not f.done():
                f.set_result((host, standing if host is not None else None))

    async def _poll(self) -> None:
        """Ask the registry, one long poll at a time, which of the runs this driver waits on went live. A registry
        that restarted forgot who waited: everything waiting asks again (each parked pick wakes its run once)."""
        while True:
            try:
                got = await self.registry.wakes.remote(self.id, POLL_S)
            except Exception:  # noqa: BLE001 - the registry restarting, or this Ray gone: the poll must go on
                await asyncio.sleep(RETRY_S)
                continue
            if self.incarnation is not None and got["registry"] != self.incarnation:
                for rid in {*self.waits, *self.parked}:
                    self._wake(rid)
            self.incarnation = got["registry"]
            for rid, host, *more in got["runs"]:
                self._wake(rid, host, *more[:2])
