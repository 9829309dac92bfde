"""The run registry: the one place that maps a run id to the actor hosting it, activating it from its journal.

One detached Ray actor (`jr2ray:registry`, restarted by Ray). Every activation and deactivation of a run goes
through here under that run's lock, so two callers racing to wake one run get the same host. The journal's lease
(an epoch) is the second guard: a host that lost its run (a registry restart, a partition) can no longer write.
Idle hosts wait in a pool, warm, for the next run, so a wake costs a journal load, not a process start."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import ray

from jr2ray.settings import load_settings

from . import admission, give_back, telemetry, versions, wire
from .actor import journaled_env
from .batcher import holding
from .errors import RunError, gate_refusal
from .host_ref import shared, shared_first
from .models import Detached, FirstAnswer, Standing
from .names import registry_name
from .placement import Mode, service_options
from .pool import HostPool
from .registry_gauges import keep_gauges
from .run_locks import RunLocks
from .run_spec import pool_key, run_spec
from .store import is_shared, open_store
from .wakes import WakeBoard

POOL_KEEP = 64  # idle hosts kept warm; more are ended
HOST_ANSWER_S = 10.0  # a host that does not answer `info` within this is taken for gone
JOURNAL_WRITERS = 16  # threads creating start journals: each waits mostly on the disk, so many overlap
JOURNALING_FIRST_S = 2.0  # the longest a start's activation waits while start batches are written


class _Dropped(Exception):
    """A queued activation whose run was cancelled before a slot freed."""


# What the registry keeps of each run it has seen, parked ones included: its pool key, and for a run started here its
# start's env the journal does not keep (its secrets, sorted pairs), else None. Equal notes are one shared tuple.
Note = tuple[str, tuple[tuple[str, str], ...] | None]


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=100000)  # type: ignore[call-overload]
class RunRegistry:
    def __init__(self, store: str, idle_s: float = 5.0, max_live: int = 40, placement: Mode = "head",
                 queued_idle_s: float = 0.25, pool_idle_s: float = 300.0, pool_idle_keep: int | None = None,
                 runs_per_host: int = 1) -> None:
        settings = load_settings()
        self.store = open_store(store, settings)
        self.queued_idle_s = queued_idle_s
        self.placement = placement  # where its hosts go: the head (SQLite) or any node with CPU
        self.slots = admission.Slots(max_live, lambda: len(self.live), lambda: self.early.evict())
        self.early = admission.EarlyParks(lambda: len(self.slots.queue),
                                          lambda rid, hid: self.deactivate(rid, hid, early=True))
        self.queued = self.slots.queued  # run ids waiting in line for a slot
        self.idle_s = idle_s
        self.live: dict[str, tuple[str, Any]] = {}  # run id -> (host id, host handle)
        self.locks = RunLocks()
        self.waiters: dict[str, list[asyncio.Future[Any]]] = defaultdict(list)  # run id -> next activation
        self.activating: dict[str, asyncio.Future[Any]] = {}  # run id -> its host, once the one under way ends
        self.asked = 0  # calls that asked where a run is (activate, lookup, watch): what a cached host saves
        self.activations = self.peak_live = 0
        self.with_write = 0  # activations that carried the driver's write that woke the run (`activate`'s `first`)
        self.name = registry_name(store)
        self.pool = HostPool(self.name, self.store.location, placement, idle_s, queued_idle_s,
                             lambda hid: any(h == hid for h, _ in self.live.values()), pool_idle_s, pool_idle_keep,
                             runs_per_host)
        self.env: dict[str, str] = {}  # the instance's env over each run's journaled one (`resume` sets it)
        self._background: set[asyncio.Task[Any]] = set()
        self._requeued = False
        self._recovery: asyncio.Future[None] | None = None
        self._woken: list[str] = []  # the runs the first call after a (re)start woke
        self.writers = ThreadPoolExecutor(JOURNAL_WRITERS, thread_name_prefix="jr2ray-start")
        self._journaling = 0  # start batches being journaled now
        self._journaled = asyncio.Event()  # set while none is
        self._journaled.set()
        self._interned: dict[Note, Note] = {}  # 10,000 runs share a few notes
        self.notes: dict[str, Note] = {}  # run id -> its Note, so a wake reads no journal here (the host does)
        self.instance: tuple[dict[str, str], str | None] | None = None  # `up`'s run env and launcher (see `warm`)
        self.incarnation = uuid.uuid4().hex[:12]  # new after a restart: wake ids then send their parked picks again
        self.board = WakeBoard()  # callers waiting for a parked or queued run to go live (their picks, watches)
        telemetry.setup("registry", settings.home_dir(create=False), on=settings.telemetry)
        give_back.freeze_setup()

    async def _requeue(self) -> None:
        """Before the first call after a (re)start is served: `_recover`, once; concurrent first calls all wait for
        it (an awaited finished task does not yield, so later calls keep their order)."""
        if self._requeued:
            return
        if self._recovery is None:
            self._recovery = asyncio.ensure_future(self._recover())
        try:
            await asyncio.shield(self._recovery)
        except Exception:
            self._recovery = None  # the next call tries again
            raise

    async def _recover(self) -> None:
        """The hosts still up are found again; the active runs that were hosted when it went down and have no host
        now (Ray went down too) are woken, and get their slots back first; then every `queued` run in the journal
        takes its place in line again, oldest start first (its start time is its ticket), in the background."""
        await self._find_hosts()
        await asyncio.to_thread(versions.revive_drifted, self.store)  # drifted runs whose version is back
        self._spawn(keep_gauges(self.store, self.live, self.slots))
        awake = await asyncio.to_thread(self.store.awake_runs)
        queued = await asyncio.to_thread(self.store.list_runs, None, None, "queued")
        self._requeued = True  # from here on, calls (these activations first) go straight on
        self._woken = [r for r in awake if r not in self.live and r not in self.queued]
        for rid in self._woken:
            self._spawn(self._activate(rid, None, 0.0))
        for r in sorted(queued, key=lambda r: (r.created_at, r.id)):
            if r.id not in self.queued and r.id not in self.live:
                self._spawn(self._activate(r.id, None, r.created_at))
        await asyncio.sleep(0)  # each takes its slot or its place in line before the waiting calls go on

    async def _find_hosts(self) -> None:
        """After a restart: the hosts this registry started are still up (detached, named). Each that holds a run
        is that run's host again, the others go back to the pool; so no run is hosted twice and slots stay counted."""
        prefix = f"{self.name}:host:"
        found = [a for a in await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
                 if a["name"].startswith(prefix)]
        for a in found:
            try:
                host = ray.get_actor(a["name"], namespace=a["namespace"])
                infos: list[dict[str, Any]] = await asyncio.wait_for(host.infos.remote(), timeout=10)
            except Exception:  # noqa: BLE001 - gone, or not answering: not ours any more
                continue
            key = next((i["key"] for i in infos if i.get("key")), "")  # one a process; a slot never used has none
            for info in infos:  # one per slot of the process
                if not self.pool.known(info["hid"], key, host):  # one already known (warmed before its call)
                    continue
                rid = info.get("run_id")
                if rid and rid not in self.live:
                    self.live[rid] = (info["hid"], host)
                elif not rid:
                    self.pool.put(key, info["hid"], host)
        self.peak_live = max(self.peak_live, len(self.live))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def start(self, run_id: str, spec: dict[str, Any], ticket: float | None = None) -> str:
        """One start through the one door (`_starts`): `live` when it took a free slot (it is being adopted), else
        `queued` (it goes live when a slot frees, first come first served)."""
        took = await self._starts([(run_id, spec)], ticket, settle=True)
        return "live" if took else "queued"

    async def start_many(self, starts: list[tuple[str, dict[str, Any]]], ticket: float | None = None) -> int:
        """Many starts in one call: journaled in one batch (`JournalStore.create_runs`), then each takes a free
        slot or its place in line, in the order given. Returns how many were journaled, once every one is journaled
        and listed; their activations begin right after the answer has gone (run before it, a few hundred host
        calls held the answer back by as long as the journal writes took)."""
        return await self._starts(starts, ticket, settle=False)

    async def _starts(self, starts: list[tuple[str, dict[str, Any]]], ticket: float | None, settle: bool) -> int:
        """The one door for starts. `settle`: the activations take their slots before the answer, which then
        counts those that took one at once; else the answer counts the starts journaled."""
        await self._requeue()
        starts = [(rid, admission.on_instance(spec, self.instance)) for rid, spec in starts]
        ticket = time.time() if ticket is None else ticket
        self._journaling += 1
        self._journaled.clear()
        try:
            with holding():  # this process's telemetry waits: its batches slowed the journal writes as much again
                await asyncio.get_running_loop().run_in_executor(self.writers, admission.enqueue_many, self.store,
                                                                 starts)
        finally:
            self._journaling -= 1
            if not self._journaling:
                self._journaled.set()
        telemetry.runs_started(starts)
        for rid, spec in starts:  # before the answer: any activation from now on finds the start's env
            self._remember(rid, pool_key(spec), spec.get("env") or {})

        def activate_all() -> None:  # the given order is the line's order; a single start tries its slot at once,
            for i, (rid, _spec) in enumerate(starts):  # even while a batch is written: its answer says if it took one
                at = ticket + i * 1e-6
                self._spawn(self._activate(rid, None, at) if settle else self._after_journaling(rid, at))

        if not settle:  # after this call's answer is sent (its task's callbacks are scheduled after this one)
            asyncio.get_running_loop().call_soon(activate_all)
            return len(starts)
        activate_all()
        await asyncio.sleep(0)
        return sum(1 for rid, _ in starts if rid not in self.queued)

    async def _after_journaling(self, run_id: str, ticket: float) -> None:
        """A start's activation, once no start batch is being journaled (at most `JOURNALING_FIRST_S` later). Why:
        every sqlite and file call of a batch's writes gives up the GIL, and while this loop ran the batch before's
        activations, measured, the next batch took 4 to 8 times its CPU time to write. The activations follow at
        once, in their order (an Event wakes its waiters first come, first served)."""
        if not self._journaled.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._journaled.wait(), JOURNALING_FIRST_S)
        await self._activate(run_id, None, ticket)

    async def resume(self, env: dict[str, str] | None = None) -> list[str]:
        """After `down` and `up`: the active runs that were not parked when the instance went down (an open Turn,
        an Effect, a live pick) are woken; parked ones stay parked (their timers are in the timer index). `env`
        (the instance's, with secrets) goes over each run's journaled env from now on. Returns the ids woken."""
        self.env = dict(env or {})
        await self._requeue()
        return list(self._woken)

    async def warm(self, n: int, env: dict[str, str] | None = None, launcher: str | None = None,
                   instance: bool = False) -> int:
        """Start hosts for `n` slots for runs of this env and launcher (`instance`: `up`'s own, which runs started
        with no env of their own get: `admission.on_instance`). Returns how many slots wait idle under that key."""
        await self._requeue()
        if instance:
            self.instance = (dict(env or {}), launcher)
        return await self.pool.warm(n, pool_key({"env": env or {}, "launcher": launcher}))

    async def activate(self, run_id: str, spec: dict[str, Any] | None = None, ticket: float | None = None,
                       not_on: str | None = None, watcher: str | None = None,
                       first: list[Any] | None = None) -> list[Any]:
        """The host of `run_id`, activating it if it has none. Returned in a list (a handle, not a call on it:
        `host_ref.shared`, so a caller named that host before gets the same handle). A start (`spec["create"]`)
        is first one journal write (the run, `queued`). Every activation then waits for a slot: at most `max_live`
        runs are live, and slots go first come, first served, by `ticket` (the caller's clock when it asked; Ray
        may deliver concurrent calls out of order), else by arrival.

        `not_on`: the actor id of a host that was asked for this run and does not hold it (Ray restarted it, empty,
        after its process or node died): that mapping is stale, and the run activates afresh from its journal.

        `watcher`: a driver's wake id. If the run waits in line, the answer is [] at once and that driver hears
        on its long poll when the run goes live (a driver holds no call here for each of its queued runs).

        `first`: the driver's write that wakes the run, done by the host that adopts it (`RunHost.adopt`; a Gate
        event it refuses at rest is raised, the run not taken); its answer comes second in the list. Only on an
        adoption made for this call: otherwise the caller sends it."""
        return shared_first(await self._activate(run_id, spec, ticket, not_on, watcher, first))

    async def _activate(self, run_id: str, spec: dict[str, Any] | None = None, ticket: float | None = None,
                        not_on: str | None = None, watcher: str | None = None,
                        first: list[Any] | None = None) -> list[Any]:
        """`activate`, its host this registry's own handle (for its own calls on it)."""
        self.asked += 1
        await self._requeue()
        if not_on is not None:
            await self._check_stale(run_id, not_on)
        got = self.live.get(run_id)
        if got is not None and self.locks.busy(run_id):
            # Its lock is held: a park may be letting the run go this moment (`deactivate` holds it until the host
            # has). Named now, that host would answer a caller that only wakes the run (a timer, the KV budget's
            # grant) as if woken, and the wake was lost; after the lock, the mapping is what the park left.
            async with self.locks(run_id):
                got = self.live.get(run_id)
        if got is not None:
            return [got[1]]
        if watcher is not None and run_id in self.queued:
            self.board.note(run_id, [watcher])
            return []
        if run_id in self.queued:  # already in line: wait for that activation, never queue one run twice
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.waiters[run_id].append(fut)
            return [await fut]
        pending = self.activating.get(run_id)
        if pending is not None:  # being adopted now (it holds a slot): share that host, never take a second slot
            try:
                return [await asyncio.shield(pending)]
            except RunError as exc:
                if gate_refusal(exc) is None:
                    raise
                return await self._activate(run_id, spec, ticket, None, watcher, first)  # not refused: alone
        mine: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.activating[run_id] = mine
        noted = self.board.watchers.get(run_id, ())  # who waited on the run before (a parked pick's driver)
        try:
            got_host = await self._activate_once(run_id, spec, ticket, first)
            mine.set_result(got_host[0])
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                mine.cancel()
            else:
                mine.set_exception(exc)
                mine.exception()  # retrieved: a failure with nobody sharing it is not logged as lost
                if gate_refusal(exc) is not None and (self.waiters.get(run_id) or
                                                      set(self.board.watchers.get(run_id, ())) - set(noted)):
                    self._spawn(self._activate_for_joined(run_id))  # they joined it in line: they get theirs
            raise
        finally:
            if self.activating.get(run_id) is mine:
                del self.activating[run_id]
        return got_host

    async def _activate_for_joined(self, run_id: str) -> None:
        """Callers joined (in line) an activation refused for its Gate event: the run goes live for them."""
        with contextlib.suppress(Exception):
            await self._activate(run_id)

    async def _check_stale(self, run_id: str, not_on: str) -> None:
        """A host said it does not hold `run_id`: if the registry still maps the run to it, and it still does not
        hold it (it may have adopted the run since it asked), the mapping is stale and is dropped."""
        async with self.locks(run_id):
            got = self.live.get(run_id)
            if got is None or _actor_id(got[1]) != not_on:
                return
            info = await self._probe(got[1], got[0])
            if info is None or info.get("run_id") != run_id:
                self._forget(run_id)

    async def _probe(self, host: Any, hid: str) -> dict[str, Any] | None:
        """A host slot's `info` now (what run it holds), or None when it is gone or does not answer."""
        try:
            info: dict[str, Any] = await asyncio.wait_for(host.info.remote(hid), timeout=HOST_ANSWER_S)
        except Exception:  # noqa: BLE001 - gone, or not answering
            return None
        return info

    async def _activate_once(self, run_id: str, spec: dict[str, Any] | None, ticket: float | None,
                             first: list[Any] | None = None) -> list[Any]:
        """One activation: a slot (or a place in line), the start's journal write, then a host adopts the run."""
        line = self.slots.take(run_id, time.time() if ticket is None else ticket)  # before any await
        try:
            if spec is not None and spec.get("create"):
                spec = admission.on_instance(spec, self.instance)
                async with self.locks(run_id):
                    await asyncio.get_running_loop().run_in_executor(self.writers, admission.enqueue, self.store,
                                                                     run_id, spec)
                telemetry.runs_started([(run_id, spec)])
                self._remember(run_id, pool_key(spec), spec.get("env") or {})
            if line is not None:
                try:
                    await line
                finally:
                    self.queued.discard(run_id)
        except _Dropped:  # cancelled while it waited for a slot: it never goes live for this start
            return [None]
        except BaseException:
            self.slots.leave(run_id, line)
            raise
        try:
            async with self.locks(run_id):
                got = self.live.get(run_id)
                if got is not None:
                    self.slots.release()
                    return [got[1]]
                note = self.notes.get(run_id)  # known: a wake reads no journal here (the host does)
                if note is None:
                    run = await asyncio.to_thread(run_spec, self.store, run_id)
                    run["env"] = {**(run.get("env") or {}), **self.env}
                    taken = await self._adopt(run_id, run, first=first)
                elif note[1] is None:  # not started here: the instance's env over the journaled one
                    taken = await self._adopt(run_id, None, note[0], self.env, first=first)
                else:  # started here: its start's env (the journaled part and its secrets) over the instance's
                    taken = await self._adopt(run_id, None, note[0], dict(note[1]), self.env, first)
        except BaseException:
            self.slots.release()
            raise
        self.slots.went_live()
        return taken

    async def idle_now(self, run_id: str, hid: str) -> None:
        """A host's run has been idle `queued_idle_s` and may park: it is parked now if a run waits for a slot, else
        remembered for when one does (the host re-checks under the run's lock, so a stale offer parks nothing)."""
        got = self.live.get(run_id)
        if got is not None and got[0] == hid:
            self.early.offer(run_id, hid)

    def _remember(self, run_id: str, key: str, start_env: dict[str, str] | None = None) -> None:
        """Note the run's pool key; `start_env`: it was started here with this env, whose secrets (what the journal
        does not keep) every later activation by this registry gets back. A wake keeps what the start noted."""
        old = self.notes.get(run_id)
        if start_env is None:
            secrets = None if old is None else old[1]
        else:
            kept = journaled_env(start_env)
            secrets = tuple(sorted((k, v) for k, v in start_env.items() if k not in kept))
        note: Note = (key, secrets)
        self.notes[run_id] = self._interned.setdefault(note, note)

    async def _adopt(self, run_id: str, spec: dict[str, Any] | None, key: str | None = None,
                     env: dict[str, str] | None = None, under: dict[str, str] | None = None,
                     first: list[Any] | None = None) -> list[Any]:
        """Hand the run to an idle host of its pool (the host loads the journal; `spec` None: it reads it too, and
        puts `env` over the journaled env and `under` below it). [host], and the answer to `first` after it."""
        key = pool_key(spec) if key is None else key
        self._remember(run_id, key)
        standing: Standing | None = None
        answer: FirstAnswer | None = None
        epoch: int | None = None
        while True:
            hid, host = await self.pool.take(key)
            try:
                got = await host.adopt.remote(run_id, self.store.location, spec, env or None, under or None,
                                              self.board.watched(run_id), first, hid)
                info = got if isinstance(got, dict) else {}
                standing, answer, epoch = info.get("standing"), info.get("first"), info.get("epoch")
                if info.get("hid", hid) != hid:  # another slot of that process held the run already: its slot
                    self.pool.put(key, hid, host)
                    hid = info["hid"]
                break
            except asyncio.CancelledError:
                self._spawn(self._settle(key, hid, host))
                raise
            except Exception:
                holds = await self._settle(key, hid, host)
                if holds == run_id and self.live.get(run_id, ("",))[0] == hid:
                    answer = FirstAnswer(lost=True) if first is not None else None  # it may have landed
                    break  # it did adopt the run (only the answer failed): it is the run's host
                if holds is None:  # a clean host that could not adopt it (its journal is lost or damaged...)
                    raise
                # it held another run (now mapped to it): the next idle host takes this one
        self.live[run_id] = (hid, host)
        for fut in self.waiters.pop(run_id, []):
            if not fut.done():
                fut.set_result(host)
        self.board.tell(run_id, host, standing, epoch)
        self.activations += 1
        self.with_write += answer is not None and not answer.lost
        self.peak_live = max(self.peak_live, len(self.live) + self.slots.reserved - 1)
        return [host] if answer is None else [host, answer]

    async def _settle(self, key: str, hid: str, host: Any) -> str | None:
        """After an adopt failed: what does the host hold? Nothing: it goes back to the pool. Another run
        that no host is mapped to (this one too, if the adopt landed and only its answer was lost): it is that run's
        host now, and its idle watch parks it. A run another host is mapped to: this stale copy is ended (the run's
        lease fences its writes). A host that does not answer is dropped."""
        info = await self._probe(host, hid)
        holds = None if info is None else info.get("run_id")
        if holds is None:
            if info is not None:
                self.pool.put(key, hid, host)
            return None
        if holds not in self.live:
            self.live[holds] = (hid, host)
            self.board.tell(holds, host)
        elif self.live[holds][0] != hid:
            self.pool.end(hid, host)
        return holds

    def _forget(self, run_id: str) -> None:
        """The run's host lost it (the process died and Ray restarted it empty): the run is parked again."""
        self.early.withdraw(run_id)  # its idle offer went with it
        if self.live.pop(run_id, None) is not None:
            self.slots.hand_out()

    async def host_died(self, run_id: str, actor_id: str) -> None:
        """A caller found the run's host dead (its process ended, Ray will not restart it): the run is parked."""
        got = self.live.get(run_id)
        if got is not None and _actor_id(got[1]) == actor_id:
            self._forget(run_id)

    async def host_restarted(self, actor_id: str) -> list[str]:
        """A host Ray restarted tells us (from its constructor): its runs are re-activated from their journals, so
        work in flight (an Effect, a timer, an open Turn) goes on as it did with one actor per run."""
        await self._requeue()
        runs = [(r, hid, host) for r, (hid, host) in self.live.items() if _actor_id(host) == actor_id]
        for rid, hid, host in runs:
            self._forget(rid)
            self.pool.put(self.pool.key_of(hid), hid, host)  # the slot, empty again, keeps its name: pooled
            self._spawn(self._activate(rid))
        return [rid for rid, _h, _x in runs]

    async def cancel(self, run_id: str) -> Any:
        """Cancel a run: a queued one in its journal, without taking a slot; a parked one is woken to cancel."""
        await self._requeue()
        async with self.locks(run_id):
            if run_id not in self.live and run_id in self.queued:
                for fut in self.slots.drop(run_id):
                    fut.set_exception(_Dropped())
                for fut in self.waiters.pop(run_id, []):  # those waiting to join it: the journal answers now
                    if not fut.done():
                        fut.set_result(None)
                ended = await asyncio.to_thread(admission.cancel_queued, self.store, run_id)
                self.board.tell(run_id, None)  # those watching it: it will not go live, its journal answers
                return ended
            if run_id not in self.live:  # a drifted run whose version is gone: cancelled in its journal
                gone = await asyncio.to_thread(versions.cancel_drifted, self.store, run_id)
                if gone is not None:
                    self.board.tell(run_id, None)
                    return gone
        (host,) = await self._activate(run_id)
        return await wire.call(host, run_id, "cancel", [])

    async def presence(self, run_ids: list[str]) -> dict[str, str]:
        """live (hosted, or being adopted), queued (waiting for a slot) or parked (its journal only), per run id."""
        await self._requeue()
        return {r: "queued" if r in self.queued else "live" if r in self.live or r in self.activating else "parked"
                for r in run_ids}

    async def deactivate(self, run_id: str, hid: str, early: bool = False) -> bool:
        """Park `run_id` if its host (`hid`) still hosts it and it may go; the host returns to the pool. `early`:
        for a queued run, after the short idle (`queued_idle_s`) rather than the setting."""
        await self._requeue()
        async with self.locks(run_id):
            got = self.live.get(run_id)
            if got is None or got[0] != hid:
                return False
            host = got[1]
            parked: Detached | None = await host.detach.remote(run_id, early)
            if parked is None:
                return False
            self.board.note(run_id, parked.watchers)  # under the lock: its next activation (also under it) tells
            self.live.pop(run_id, None)  # (a forwarded not_on waits for this lock, so it is still ours here)
            self.slots.hand_out()  # the slot it frees goes to the longest waiting activation
            self.early.withdraw(run_id)
            key = self.pool.key_of(hid)
            if len(self.pool.idle[key]) < POOL_KEEP:
                self.pool.put(key, hid, host)
            else:
                self.pool.end(hid, host)
            return True

    async def next_activation(self, run_id: str) -> list[Any]:
        """The run's host as soon as it is live: now, or when something next wakes it (a parked pick waits here)."""
        async with self.locks(run_id):
            got = self.live.get(run_id)
            if got is not None:
                return [shared(got[1])]
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.waiters[run_id].append(fut)
        return [shared(await fut)]

    async def wakes(self, watcher: str, timeout_s: float = 20.0) -> dict[str, Any]:
        """Long poll of one wake id (one per driver process): the runs woken since it last asked, among those it
        waits on (a pick that found it parked, a `watch`), each with its host; waits up to `timeout_s` for one.
        `registry` changes after a restart, which forgets who waited: the caller then asks again for each."""
        await self._requeue()
        runs = [(run_id, shared(host), *rest) for run_id, host, *rest in await self.board.poll(watcher, timeout_s)]
        return {"registry": self.incarnation, "runs": runs}

    async def watch(self, run_id: str, watcher: str) -> list[Any]:
        """The run's host if it is live now ([host]); else [] and `watcher` hears at the run's next activation.
        Nothing is woken: a driver waiting for a queued run's slot, or for a parked run's Gate to be answered
        elsewhere, holds no call here."""
        self.asked += 1
        await self._requeue()
        async with self.locks(run_id):
            got = self.live.get(run_id)
            if got is not None:
                return [shared(got[1])]
            self.board.note(run_id, [watcher])
            return []

    async def watch_many(self, run_ids: list[str], watcher: str) -> dict[str, Any]:
        """`watch` for a batch of runs in one call: {run id: its host} for those live now, None for those whose lock
        is held (being adopted: ask `watch` alone, so one slow adoption holds up no other run's answer; 20 runs on a
        cold pool heard nothing until the last was adopted, 23 s); `watcher` hears of each other's next activation."""
        await self._requeue()  # once, first: after a restart, each `watch` would wait for it with this batch
        out: dict[str, Any] = {}
        for run_id in run_ids:
            if self.locks.busy(run_id):
                out[run_id] = None
            elif got := await self.watch(run_id, watcher):
                out[run_id] = got[0]
        return out

    async def places(self, run_ids: list[str]) -> dict[str, int]:
        """Each queued run's place in line (1 is next), for those of `run_ids` that wait for a slot."""
        return self.slots.places(run_ids)

    async def lookup(self, run_id: str) -> list[Any]:
        """The live host of a run, without activating it ([] when parked)."""
        self.asked += 1
        got = self.live.get(run_id)
        return [shared(got[1])] if got else []

    async def ping(self) -> bool:
        """The timer service's heartbeat: the first call after a restart rebuilds the line and finds the hosts."""
        await self._requeue()
        return True

    async def stats(self) -> dict[str, Any]:
        await self._requeue()
        return {"live": sorted(self.live), "queued": self.slots.waiting(), "max_live": self.slots.max_live,
                "idle_hosts": self.pool.count(), "trimmed_hosts": self.pool.trimmed, "pool_refused": self.pool.refused,
                "started_hosts": self.pool.started, "tracked_runs": len(self.notes), **self.board.stats(),
                "next_activation_calls": sum(len(v) for v in self.waiters.values()), "trims": self.slots.trimmer.trims,
                "activations": self.activations, "asked": self.asked, "peak_live": self.peak_live,
                "early_parks": self.early.parked, "activations_with_write": self.with_write}


def _actor_id(handle: Any) -> str:
    return str(handle._actor_id.hex())


def get_registry(store: str, namespace: str, idle_s: float = 5.0, max_live: int = 40,
                 placement: Mode = "head", queued_idle_s: float = 0.25, pool_idle_s: float = 300.0,
                 pool_idle_keep: int | None = None, runs_per_host: int = 1) -> Any:
    """The registry of this store in this namespace, started (detached) by the first caller that needs it. `store`
    names the journal store (a directory or a database URL); with SQLite the registry runs on the head, beside the
    files. The caller passes its settings' values (`Client.registry` does); the defaults are theirs."""
    actor_class = cast(Any, RunRegistry)  # mypy ignores @ray.remote; at run time it is an ActorClass
    return actor_class.options(name=registry_name(store), namespace=namespace, lifetime="detached",
                               get_if_exists=True, **service_options(is_shared(store))).remote(
                                   store, idle_s, max_live, placement, queued_idle_s, pool_idle_s, pool_idle_keep,
                                   runs_per_host)
