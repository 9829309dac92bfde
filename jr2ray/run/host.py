"""HostSlot: one place for a live run in a warm, pooled host process (`RunHost`, jr2ray.run.host_process), which
holds `runs_per_host` of them. The registry counts, pools and names each slot on its own (its `hid`).

The registry hands an idle slot a run id; the slot loads the run's journal (milliseconds, no process start), takes
the run's write lease (a new epoch in the journal) and serves its calls. When the run is finished, or rests with
nothing running for `idle_deactivate_s`, the slot asks the registry to deactivate it, drops the engine and goes back
to the pool. A call for a run this host no longer holds is forwarded through the registry, which activates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import ray

from jr2ray.menu import Receipt
from jr2ray.settings import Settings, load_settings

from . import telemetry, tracing, versions, wire
from .actor import journaled_env, load_launcher
from .calls import RUN_CALLS, check_call
from .engine import RunEngine
from .give_back import Trimmer
from .host_calls import ENGINE_CALLS, ready_receipts
from .models import Carried, Detached, FirstAnswer, NotHere, PickParked, Standing, lifecycle
from .names import REGISTRY_NAME
from .parking import mark_waiting, parkable
from .placement import Mode, set_here
from .replay import delivery_id_or_new
from .run_spec import pool_key, spec_and_journal
from .standing import standing_of
from .store import Journal, JournalStore, TimerIndex, open_store
from .timers import earliest_due_ms
from .turns import ParkingLauncher, Turn

_PARKED = object()  # a pick whose run parked before it reached Rest
TRIM_AFTER_S = 2.0  # a host that stays this long in the pool after its run parked gives freed memory back
TOLD_KEPT = 64  # watches' names a host remembers what it told (`_told`); an older one is answered as before
FORWARD_GRACE_S = 0.25  # a run woken without a call waits this long for the forwarded call before parking finished


def _finished(eng: RunEngine) -> bool:
    """Has the run finished as its journal says? A finished run parks at once and is not woken for watchers; a
    broken one (its journal lost or damaged) does neither, so its callers still read why it stopped."""
    return eng.broken is None and lifecycle(eng.status_name()) == "finished"


class HostSlot:
    """One live run's place in a host process; plain Python (the process's `RunHost` actor routes to it by run id),
    so the unit tier drives it without Ray. `quiet`: is the whole process idle (a trim is process-wide)."""

    def __init__(self, idle_s: float = 5.0, store: str | None = None, registry: str = REGISTRY_NAME,
                 placement: Mode = "head", queued_idle_s: float = 0.25,
                 quiet: Callable[[], bool] | None = None, hid: str | None = None) -> None:
        self.hid = hid or uuid.uuid4().hex[:10]  # `RunHost` names its slots so that a restart keeps their names
        self.quiet = quiet or (lambda: True)
        self.registry_name = registry
        self.key: str | None = None  # the pool it belongs to: the env and launcher of its first run
        self.idle_s = idle_s
        self.early_s = min(idle_s, queued_idle_s)  # idle enough to park early when runs are queued for a slot
        self.settings = load_settings()  # this process's, read once: the stores it opens are sized by them
        self.run_settings: Settings | None = None  # read at its first adoption, once that run's env is applied
        self.store: JournalStore | None = open_store(store, self.settings) if store else None
        set_here(placement)  # the Harnesses of the runs it hosts go where it may go
        self.run_id: str | None = None
        self.engine: RunEngine | None = None
        self.epoch: int | None = None
        self.inflight = 0  # calls being served; a pick waiting for Rest is not one (its state is in the journal)
        self.open_calls = 0  # every call in this process, a parked run's waiting pick and forwarded ones included
        self.served = 0  # calls served in this activation: a run woken for a call is not parked early before it
        self.adoptions = 0  # runs taken so far: a trim waits for a quiet spell with none taken
        self.owed: set[str] = set()  # addresses whose driver holds a fresh receipt and owes its next call
        self.last = time.monotonic()
        self._gone = asyncio.Event()  # set when the hosted run is deactivated: waiting picks are re-sent
        self._watch: asyncio.Task[None] | None = None
        self._index: TimerIndex | None = None
        self.actor_id = ray.get_runtime_context().get_actor_id() or ""
        self._registry: Any = None
        self._poke = asyncio.Event()
        self._busy = False  # the idle watch naps until an event: its run is past every mark and still not parkable
        self._offered = -1.0  # the `last` at which this host last offered its idle run to the registry
        self._watchers: dict[str, int] = {}  # wake id -> picks of that caller waiting for Rest here (see `_pick`)
        self._trimmer = Trimmer(every_s=5.0, after=20)  # a host idle in the pool gives a burst's memory back
        self.version = 0  # bumped by every event of the hosted run: what `watch` callers wait on
        self._changed = asyncio.Event()
        self._parked_standing: Standing | None = None  # how the last run stood when it parked (watchers' answer)
        self._stood: dict[int, tuple[int, Standing]] = {}  # version -> (feed position, standing): `_standing`
        self._told: dict[str, int] = {}  # a driver's watch -> the version a write of its carried it (`call`)
        telemetry.setup("host", self.settings.home_dir(create=False), on=self.settings.telemetry)
        self.frozen = 0  # objects the process froze at its start (`RunHost` sets it; counted once per process)

    def registry(self) -> Any:
        """The registry's handle, looked up once (a named lookup is a GCS round trip; Ray restarts the registry
        under the same actor id, so the handle stays good)."""
        if self._registry is None:
            self._registry = ray.get_actor(self.registry_name)
        return self._registry

    def _standing(self, eng: RunEngine) -> Standing:
        """How the hosted run stands at this version, made once per version: a write's carried answer and the
        watches it wakes answer with the same one (building it was a tenth of a host's time in a burst of wakes).
        The last few are kept, so a watch can tell that nothing its caller sees changed since its version."""
        got = self._stood.get(self.version)
        if got is None:
            got = self._stood[self.version] = (eng.writer.feed_next, standing_of(eng, version=self.version))
            if len(self._stood) > 4:
                del self._stood[min(self._stood)]
        return got[1]

    def _unchanged(self, since: int, st: Standing) -> bool:
        """`st` says nothing new to a caller that was told version `since` (a duplicate delivery, or the bump a
        call makes after its events were already told): its watch waits on instead of answering again. Only if
        every standing made since then looks the same: its caller may have been told one of them another way (a
        write's carried answer), and a run that went there and back must be told it is back; and only if its feed
        did not move (a refused pick changes no standing, but the API's event stream follows the feed by watching)."""
        if since not in self._stood or st.version not in self._stood:
            return False
        feed = self._stood[st.version][0]
        return all(was.status == st.status and was.waiting == st.waiting and fed == feed
                   for v, (fed, was) in self._stood.items() if v >= since)

    async def info(self) -> dict[str, Any]:
        return {"hid": self.hid, "run_id": self.run_id, "epoch": self.epoch, "pid": os.getpid(), "key": self.key,
                "node": ray.get_runtime_context().get_node_id(), "open_calls": self.open_calls,
                "gc_frozen": self.frozen}

    async def adopt(self, run_id: str, store: str, spec: dict[str, Any] | None = None,
                    env: dict[str, str] | None = None, under: dict[str, str] | None = None,
                    watched: bool = False, first: list[Any] | None = None) -> dict[str, Any]:
        """Host `run_id`: rebuild it from its journal (or create it, for a start) under a fresh lease. `env` goes
        over the journaled env, `under` below it: the registry passes the instance's env over it for a run it did
        not start, and under it, with the start's secrets (which the journal does not keep) over, for one it did.

        `watched`: a driver waits on the run's next activation. The answer then carries how the run stands once
        taken (`standing`, with this host's version count), which the registry hands on with the wake: the
        driver's watch goes on from that version instead of first asking this host how the run stands (one Ray
        call less per activation, on both sides).

        `first`: the write of a driver that woke the run (`[method, args, standing, carry]`, as `call` takes them;
        a Gate event only, which never waits), done once the run is taken; its answer comes as `first`, an error
        of its own included (`FirstAnswer`). The reply that wakes a run is then not a second call on this host.
        A Gate event the run refuses as its journal left it is raised before the run is taken (no lease written)."""
        if self.run_id is not None and self.run_id != run_id:
            raise RuntimeError(f"host {self.hid} already hosts run {self.run_id}")
        if self.run_id == run_id:
            return await self.info()
        if self.store is None or self.store.location != store:
            self.store = open_store(store, self.settings)
        since = time.perf_counter()
        spec, opened = self._adopt_spec(self.store, run_id, spec, env, under)
        self.key = pool_key(spec) if self.key is None else self.key
        for k, v in (spec.get("env") or {}).items():
            os.environ[k] = v
        if self.run_settings is None:  # a host serves one pool key (one env), so its runs share these settings
            self.run_settings = load_settings()
            # the pool key's env may switch it off
            telemetry.setup("host", self.run_settings.home_dir(create=False), on=self.run_settings.telemetry)
            tracing.configure_from_env()  # and traces: on or off as the pool's env says
        engine = self._adopt_engine(self.store, run_id, spec, opened)
        try:
            refused = engine.refuses_at_rest(first)  # a refused Gate event takes no lease: the run stays as it was
        except BaseException:
            self._drop(engine)
            raise
        if refused is not None:
            self._drop(engine)
            raise refused
        fresh = engine.writer.feed_next == 0  # it never ran: its first activation, not a wake
        try:
            if engine.journal is not None:
                self.epoch = engine.journal.claim(self.hid)
                self.store.set_parked(run_id, False)
            self.run_id, self.engine, self.served, self._stood, self._told = run_id, engine, 0, {}, {}
            self.adoptions += 1
            self.owed = set()
            self._gone = asyncio.Event()
            engine.start()
        except BaseException:
            self._drop(engine)  # all or nothing: a host whose adopt failed holds no run, so it may be pooled again
            raise
        telemetry.run_activated(engine, since, fresh)
        self._touch()
        if self._watch is None or self._watch.done():
            self._watch = asyncio.get_running_loop().create_task(self._watch_idle())
        info = await self.info()
        if watched:
            info["standing"] = self._standing(engine)
        if first is not None:
            info["first"] = await self._first(run_id, *first)
        return info

    async def _first(self, run_id: str, method: str, args: list[Any], standing: bool | str,
                     carry: list[list[Any]] | None) -> FirstAnswer:
        if method != "send":  # anything else may wait, and the registry holds the run's lock meanwhile
            return FirstAnswer(error=ValueError(f"only a Gate event rides with an activation, not {method!r}"))
        try:
            return FirstAnswer(value=await self.call(run_id, method, args, False, standing, carry))
        except Exception as exc:  # noqa: BLE001 - the driver raises it as the write's own
            return FirstAnswer(error=exc)

    @staticmethod
    def _adopt_spec(store: JournalStore, run_id: str, spec: dict[str, Any] | None, env: dict[str, str] | None,
                    under: dict[str, str] | None) -> tuple[dict[str, Any], Journal | None]:
        """What `adopt` builds the run from (the caller's spec, or its journal's, still open) with the env layered
        as `adopt` says."""
        opened: Journal | None = None
        if not spec:
            spec, opened = spec_and_journal(store, run_id)
        if env or under:
            spec = {**spec, "env": {**(under or {}), **(spec.get("env") or {}), **(env or {})}}
        return spec, opened

    def _adopt_engine(self, store: JournalStore, run_id: str, spec: dict[str, Any],
                      opened: Journal | None) -> RunEngine:
        """The run's engine on its journal (`opened`, or opened now), not started yet, on the run's own version
        from the store, never the file as it is now (jr2ray.run.versions)."""
        workflow = spec["workflow"]
        try:
            machine = versions.machine_for(store, workflow, spec.get("version") or "", run_id)
        except BaseException:
            if opened is not None:
                opened.close()
            raise
        return RunEngine.from_store(machine, run_id, spec.get("input"), store,
                                    create=bool(spec.get("create")),
                                    launcher=load_launcher(spec.get("launcher"), run_id),
                                    workflow_name=workflow if isinstance(workflow, str) else machine.id,
                                    origin={"env": journaled_env(spec.get("env")), "launcher": spec.get("launcher"),
                                            **({"version": spec["version"]} if spec.get("version") else {})},
                                    on_event=lambda _ev: self._after_event(), opened=opened,
                                    settings=self.run_settings)

    def _drop(self, engine: RunEngine) -> None:
        """Let go of a run whose adopt failed part way: nothing of it stays here (its journal is its truth)."""
        self.run_id, self.engine, self.epoch, self._stood, self._told = None, None, None, {}, {}
        engine.broken = engine.broken or "adopt failed"
        with contextlib.suppress(Exception):
            if engine.interp is not None:
                engine.interp.stop()
        with contextlib.suppress(Exception):
            if engine.journal is not None:
                engine.journal.close()

    def _touch(self) -> None:
        self.last = time.monotonic()

    def may_detach(self, run_id: str, idle_s: float | None = None) -> bool:
        """Can `run_id` be deactivated now, after `idle_s` (default the setting) idle? Checked and done by the
        registry under the run's lock."""
        eng = self.engine
        if self.run_id != run_id or eng is None or self.inflight:
            return False
        if idle_s is not None and idle_s < self.idle_s and (not self.served or self.driver_owes(eng)):
            idle_s = None  # early parking only after a call: the caller that woke it is about to send one
        # A finished run parks at once; a broken one (its journal lost or damaged) after the idle time like any
        # other, so its callers still read why it stopped (that reason cannot be journaled).
        finished = _finished(eng)
        idle = self.idle_s if idle_s is None else idle_s
        quiet = time.monotonic() - self.last
        if finished:  # at once after a call; woken for one (a forwarded call on its way), only after a moment
            return bool(self.served) or quiet >= min(self.idle_s, FORWARD_GRACE_S)
        return parkable(eng) and quiet >= idle

    def driver_owes(self, eng: RunEngine) -> bool:
        """Has a driver outside (a script, an external Agent) been handed a receipt for a Turn that is still open,
        and not called on it since? It acts on that receipt next (the Gate it asked through was answered, its
        writer sends `done`): parking the run early would only make that call wake it again, a third activation
        for ask, Gate, reply, done."""
        return any(t.active and (t.iid in self.owed or t.slot in self.owed)
                   and (t.spec.driver != "harness" or eng.launcher is None) for t in eng.turns.values())

    async def detach(self, run_id: str, early: bool = False) -> Detached | None:
        """Drop the run (its journal holds everything) and become idle. No await between the check and the drop.
        `early`: the registry needs the slot for a queued run, so a shorter idle (`queued_idle_s`) is enough.
        None: it may not go yet. Else the wake ids of the callers whose picks or watches waited on it (see `_pick`),
        none for a finished run."""
        if not self.may_detach(run_id, self.early_s if early else None):
            return None
        held = self.engine
        # A finished run is not woken for its watchers (their watches end on its finished standing): noted, they
        # would stay in the registry's board for as long as it lives.
        watchers = [] if held is not None and _finished(held) else sorted(self._watchers)
        eng, self.engine, self.run_id, self.epoch, self._stood = self.engine, None, None, None, {}
        assert eng is not None and self.store is not None
        snap = eng.interp.snapshot if eng.interp is not None and eng.broken is None else None
        due = earliest_due_ms(snap) if snap is not None and snap.status == "active" else None
        waiting = mark_waiting(eng)
        if self._index is None:
            self._index = self.store.timer_index()
        self._index.set(run_id, due)  # before it parks: its reminder is durable
        telemetry.run_parked(eng, early, due)
        self._parked_standing = standing_of(eng, due, parked=True, version=self.version) \
            if eng.broken is None else None
        self.store.set_parked(run_id, True, None if self._parked_standing is None
                              else self._parked_standing.model_dump(mode="json"))
        if eng.broken is None and eng.status_name() == "active":  # the timeline's parked period starts here
            eng.note_parked()
        self._let_go(eng, waiting)
        self._gone.set()
        self._trimmer.note()
        asyncio.get_running_loop().call_later(TRIM_AFTER_S, self._trim_if_idle, self.adoptions)
        return Detached(watchers=watchers)

    def _let_go(self, eng: RunEngine, waiting: list[Turn]) -> None:
        """The parked run's engine stops: nothing more is staged or written by it. Its Turns that wait for Turn
        admission are handed to the KV budget, which wakes the run when let in; their Harnesses end."""
        eng.broken = eng.broken or "deactivated"
        for t in eng.turns.values():  # parked, not ended: no receipt is made up for a waiting pick
            t.active = False
        if eng.interp is not None:
            eng.interp.stop()
        if eng.journal is not None:
            eng.journal.close()
        for t in waiting:
            assert isinstance(eng.launcher, ParkingLauncher) and t.waits_for is not None
            eng.launcher.park(t.iid, t.waits_for, self.registry())

    def _trim_if_idle(self, adoptions: int) -> None:
        """Still in the pool `TRIM_AFTER_S` after its run parked, with no run taken since: give back what the
        activations freed. A host in a burst of wakes takes its next run within milliseconds and never trims mid-burst
        (a trim there cost a third of a full wake's CPU: the collection, the heap walk, and the pages faulted back
        in by the next run)."""
        if adoptions != self.adoptions or self.run_id is not None or self.open_calls or not self.quiet():
            return
        if self._trimmer.due():
            self._trimmer.trim()
        elif (left := self._trimmer.too_soon()) is not None:  # the quiet spell goes on: trim when one is due
            asyncio.get_running_loop().call_later(left, self._trim_if_idle, adoptions)

    async def _watch_idle(self) -> None:
        """While hosting: ask the registry to deactivate the run once it may be (at once when finished). Idle for
        `queued_idle_s`, the run is offered once (per quiet spell) to the registry, which parks it early only if a
        queued run waits for a slot. It sleeps until the next such moment, not on a fixed tick."""
        registry = self.registry()
        early = self.early_s
        while self.run_id is not None:
            rid = self.run_id
            if self.may_detach(rid):
                if not await registry.deactivate.remote(rid, self.hid):
                    await self._nap(0.25)
                continue
            if self._offered != self.last and self.may_detach(rid, early):
                self._offered = self.last
                registry.idle_now.remote(rid, self.hid)  # no answer needed
            quiet = time.monotonic() - self.last
            marks = [m - quiet for m in ((early,) if self._offered != self.last else ()) + (self.idle_s,) if m > quiet]
            # Past every mark and still not parkable (a long Effect, a Turn waiting on the model, a timer about due):
            # only an event changes that, and while `_busy` each one pokes the nap. It polled at 50 Hz before.
            self._busy = not marks
            await self._nap(min(marks) if marks else 1.0)
            self._busy = False

    async def _nap(self, seconds: float) -> None:
        """Sleep up to `seconds` (at least 20 ms, at most 1 s), or until poked (the run finished, or, while `_busy`,
        anything happened)."""
        if not self._poke.is_set():  # a poke since the last nap is not lost
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), min(max(seconds, 0.02), 1.0))
        self._poke.clear()

    def _after_event(self) -> None:
        """Something happened (a call, or a feed event such as a timer firing): reset the idle clock, and wake the
        callers watching how the run stands."""
        self._touch()
        self._changed_now()
        eng = self.engine
        if self._busy or (eng is not None and (eng.broken is not None or lifecycle(eng.status_name()) == "finished")):
            self._poke.set()  # a finished run deactivates at once, not at the watcher's next look

    def _changed_now(self) -> None:
        """The run's standing may have changed: its watchers get it at once."""
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def retire(self) -> bool:
        """May the registry end this pooled host now? Only when it hosts no run and no call runs in it (a parked
        run's pick waiting for the run's wake, a forwarded call), so nothing in flight is lost with it."""
        return self.run_id is None and not self.open_calls

    async def call(self, run_id: str, method: str, args: list[Any], forward: bool = True,
                   standing: bool | str = False, carry: list[list[Any]] | None = None) -> Any:
        """One call on the hosted run. A run this host does not hold (it parked, or another host has it) is
        reached through the registry; or, with `forward=False` (a caller that caches hosts), answered `NotHere`,
        so that the caller asks the registry itself, once. `standing`: a write's answer comes `Carried` with how
        the run stands once it landed (what the caller's waiters would otherwise ask for in a call of its own);
        given as the name of the caller's open watch, that watch is not answered with it again (`_watch_run`).
        `carry`: picks of the caller's that parked on this run, sent again with the write that wakes it; the
        answer carries the receipt of each that has one once the write landed (`ready_receipts`), and the caller
        sends the others again itself. A Gate's reply and the parked pick's receipt are then one call, not two."""
        check_call(method)
        self.open_calls += 1
        try:
            if not forward and (self.run_id != run_id or self.engine is None):
                return NotHere(run_id=run_id)
            got = await self._call(run_id, method, args)
            eng = self.engine
            if ((standing or carry) and eng is not None and self.run_id == run_id and not self._gone.is_set()
                    and not isinstance(got, NotHere | PickParked)):
                picks = await self._carried(eng, carry) if carry else []
                st = self._standing(eng) if standing else None
                if isinstance(standing, str) and st is not None:
                    self._told.pop(standing, None)  # newest last: the cap below lets go of the longest unused
                    self._told[standing] = st.version
                    if len(self._told) > TOLD_KEPT:  # a name per watch a driver opened on this activation
                        del self._told[next(iter(self._told))]
                return Carried(value=got, standing=st, picks=picks)
            return got
        finally:
            self.open_calls -= 1

    async def wire(self, blob: bytes) -> bytes:
        """`call`, its arguments and its answer each one pickled `bytes` (`jr2ray.run.wire`): Ray's own serializing
        of five arguments and of a pydantic answer cost a pick on a live run a third of a millisecond more."""
        return wire.pack(await self.call(*wire.unpack(blob)))

    async def _carried(self, eng: RunEngine, carry: list[list[Any]]) -> list[Receipt | None]:
        """The receipts a write carries back (see `call`); a receipt handed back leaves its driver owing a call."""
        picks = await ready_receipts(eng, carry)
        for (address, *_), receipt in zip(carry, picks, strict=True):
            if receipt is not None:
                self.owed.add(address)
        self._touch()  # a pick read again changes nothing a watcher is told
        return picks

    async def _call(self, run_id: str, method: str, args: list[Any]) -> Any:
        if self.run_id != run_id or self.engine is None:
            registry = self.registry()  # not_on: if the registry thinks this host has it, it is stale
            (host,) = await registry.activate.remote(run_id, None, None, self.actor_id)
            if host is None:  # it was cancelled while it waited for a slot: its journal answers now
                (host,) = await registry.activate.remote(run_id)
            return await wire.call(host, run_id, method, args)
        if method != "watch":  # a driver waiting to hear how the run stands has not made its call yet
            self.served += 1  # the call that woke it has come: from now on it may be parked early
        if method in ("pick", "surface", "transcript") and args:
            self.owed.discard(args[0])  # its driver has acted on that Turn
        if method == "pick":
            got = await self._pick(run_id, args)
            if isinstance(got, Receipt) and self.run_id == run_id:
                self.owed.add(args[0])  # handed back now (perhaps after a Gate): the driver's next call is coming
            return got
        if method == "watch":
            return await self._watch_run(*args)
        # A read is not activity: a client (a Console page, a driver's status poll) reading a live run must not
        # keep restarting its idle clock, or the run never parks. Only a write changes the run; a surface read may
        # take a restarted Turn's notices, so its watchers hear of it, but it keeps the run no longer either.
        write = RUN_CALLS[method].write
        self.inflight += 1
        if write:
            self._touch()
        try:
            return await self._dispatch(self.engine, method, args)
        finally:
            self.inflight -= 1
            if write:
                self._after_event()
            elif method == "surface":
                self._changed_now()

    async def _pick(self, run_id: str, args: list[Any]) -> Any:
        """Deliver a pick; if it must wait for Rest and the run parks meanwhile, it is sent again (same delivery id)
        to the run's next activation, which has the pick and its receipt from the journal.

        A fifth argument, the caller's wake id (a driver's handle gives one), says who sends it again: that caller
        gets `PickParked` now, and the registry tells it when the run wakes, so the waiting pick holds no call open
        here or in the registry (each open Ray call costs tens of KB in the process that serves it, and 10,000 runs
        parked at a Gate each had one in a host and one in the registry). Without it (a Harness, the API), this
        host waits for the run's next activation and sends it there."""
        address, name, pargs, delivery_id, *rest = args
        watcher: str | None = rest[0] if rest else None
        delivery_id = delivery_id_or_new(delivery_id)
        if watcher is not None:
            self._watchers[watcher] = self._watchers.get(watcher, 0) + 1
        epoch = self.epoch
        try:
            got = await self._pick_here(address, name, pargs, delivery_id)
        finally:
            if watcher is not None:
                left = self._watchers.pop(watcher) - 1
                if left:
                    self._watchers[watcher] = left
        if got is not _PARKED:
            return got
        if watcher is not None:
            return PickParked(run_id=run_id, epoch=epoch)
        # The run parked: wait, parked, for whatever wakes it next. This frame holds only the pick's arguments, not
        # the engine it was sent to: a host keeps every parked run's waiting pick (one per run parked at a Gate),
        # and each of those holding its dropped engine was what made a pooled host grow with every activation.
        (host,) = await self.registry().next_activation.remote(run_id)
        return await wire.call(host, run_id, "pick", [address, name, pargs, delivery_id])

    async def _pick_here(self, address: str, name: str, pargs: dict[str, Any] | None, delivery_id: str) -> Any:
        """The pick on the hosted engine: its receipt, or `_PARKED` if the run parked before Rest (the cancelled
        delivery and the engine are dropped with this frame when it returns)."""
        eng, gone = self.engine, self._gone
        assert eng is not None
        self._touch()
        # Counted as a call being served until the engine has the pick: a `detach` queued on this loop before the
        # task's first step let a finished run go under it, and the pick met the let-go engine ("deactivated")
        # instead of its receipt. A pick waiting for Rest is not counted (its state is in the journal).
        counted = [True]
        self.inflight += 1
        task = asyncio.ensure_future(self._deliver(counted, eng, address, name, pargs, delivery_id))
        task.add_done_callback(lambda _t: self._arrived(counted))  # cancelled before its first step too
        waiter = asyncio.ensure_future(gone.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        self._after_event()
        if task.done():
            return task.result()
        task.cancel()
        return _PARKED

    def _arrived(self, counted: list[bool]) -> None:
        if counted[0]:
            counted[0] = False
            self.inflight -= 1

    async def _deliver(self, counted: list[bool], eng: RunEngine, address: str, name: str,
                       pargs: dict[str, Any] | None, delivery_id: str) -> Receipt:
        self._arrived(counted)  # no await between this and the engine taking the pick
        got: Receipt = await telemetry.picked(eng, address, name, eng.pick(address, name, pargs or {}, delivery_id))
        return got

    async def _dispatch(self, eng: RunEngine, method: str, args: list[Any]) -> Any:
        got = ENGINE_CALLS[method](eng, *args)
        return await got if asyncio.iscoroutine(got) else got

    async def _watch_run(self, since: int, watcher: str | None = None, timeout_s: float = 20.0,
                         told: str | None = None) -> Standing | NotHere | None:
        """How the run stands, once it has changed since `since` (a version this activation gave; -1: now), or
        None after `timeout_s`. If the run parks meanwhile, the answer is how it stood then (`parked`), and the
        caller's wake id (`watcher`) is told at its next activation, as a parked pick's is. `told`: the watch's
        name; a write that carried its caller a later standing for it (`call`) counts as an answer already given,
        so this one waits for what changes after that (a reply's answer and the watch each told the driver the
        same news, one Ray call of the watch for nothing at every wake)."""
        run_id, gone = self.run_id, self._gone
        assert self.engine is not None
        if watcher is not None:
            self._watchers[watcher] = self._watchers.get(watcher, 0) + 1
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                while self.version <= since and not gone.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    waits = [asyncio.ensure_future(self._changed.wait()), asyncio.ensure_future(gone.wait())]
                    await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                    for w in waits:
                        w.cancel()
                if not gone.is_set():
                    await asyncio.sleep(0)  # the rest of this step's events first: one answer a step, not an event
                if gone.is_set() or self.engine is None or self.run_id != run_id:
                    last = self._parked_standing  # how it stood when it parked, if it was this run
                    return last if last is not None and last.status.id == run_id else NotHere(run_id=run_id or "")
                if told is not None and self._told.get(told, since) > since:
                    since = self._told[told]
                    continue
                st = self._standing(self.engine)
                if not self._unchanged(since, st):
                    return st
                since = st.version
        finally:
            if watcher is not None:
                left_n = self._watchers.pop(watcher) - 1
                if left_n:
                    self._watchers[watcher] = left_n

    async def record_telemetry(self, row: Any) -> None:
        if self.engine is not None:
            self.engine.record_telemetry(row.model_dump(mode="json") if hasattr(row, "model_dump") else dict(row))
