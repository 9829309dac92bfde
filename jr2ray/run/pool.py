"""The registry's pool of warm RunHosts: idle host slots, keyed by the env and launcher they were started with.

A host process holds `per_host` slots (`runs_per_host`); the pool deals in slots, each named by its `hid` beside
its process's handle, so a process with two free slots is two entries. A process ends when its last slot does.

A wake takes the warmest idle host of its key (no process start); a host whose run parked goes back on top. A
burst that finds the pool empty starts new hosts, at most `START_AT_ONCE` process starts at a time, so a burst of
1,000 starts never asks Ray for more worker processes at once than it starts without complaint. Idle hosts are
trimmed, as Dapr deactivates idle actors, only when `pool_idle_keep` is set.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any, cast

import ray

from .host_process import RunHost
from .placement import Mode, options

# Host process starts under way at once: Ray's default limit on worker processes starting together on a node (the
# CPU count). A Ray jr2ray starts has a higher one (`ray_start.startup_concurrency`, so the raylet does not warn
# about the pool's size); the pool still starts no more than this, so a burst does not crowd the cores.
START_AT_ONCE = max(2, os.cpu_count() or 2)


class HostPool:
    def __init__(self, registry_name: str, store: str, placement: Mode, idle_s: float, queued_idle_s: float,
                 is_live: Callable[[str], bool], pool_idle_s: float = 300.0,
                 pool_idle_keep: int | None = None, per_host: int = 1) -> None:
        self.registry_name, self.store, self.placement = registry_name, store, placement
        self.per_host = per_host  # slots a host process holds
        self.slots_of: dict[str, set[str]] = {}  # a process's actor id -> its slots not ended yet
        self.idle_s, self.queued_idle_s = idle_s, queued_idle_s
        self.is_live = is_live  # does this host id hold a live run (the registry knows)
        self.idle_keep, self.idle_after_s = pool_idle_keep, pool_idle_s
        self.idle: dict[str, list[tuple[str, Any]]] = defaultdict(list)  # pool key -> idle hosts, warmest last
        self.keys: dict[str, str] = {}  # host id -> its pool key
        self.pooled_at: dict[str, float] = {}  # host id -> when it last went back to the pool
        self.trimmed = 0
        self.refused = 0  # hosts not pooled twice (see `put`)
        self.started = 0  # host processes this pool started
        self._starts = asyncio.Semaphore(START_AT_ONCE)
        self.warming: dict[str, int] = defaultdict(int)  # pool key -> warm-up starts under way (bound for the pool)
        self.takers: dict[str, deque[asyncio.Future[tuple[str, Any]]]] = defaultdict(deque)  # waiting for those
        self._starting: set[asyncio.Task[None]] = set()  # process starts under way (kept from the collector)
        self.spare: dict[str, int] = defaultdict(int)  # pool key -> slots warmed beyond what `warm` was asked for
        self._trimmer: asyncio.Task[None] | None = None

    def count(self) -> int:
        return sum(len(v) for v in self.idle.values())

    def key_of(self, hid: str) -> str:
        return self.keys.get(hid, "")

    def new_host(self) -> Any:
        """Start one host process (named, so a restarted registry finds its hosts)."""
        host_class = cast(Any, RunHost)  # mypy ignores @ray.remote; at run time it is an ActorClass
        name = f"{self.registry_name}:host:{uuid.uuid4().hex[:12]}"
        self.started += 1
        return host_class.options(lifetime="detached", name=name, **options(self.placement)).remote(
            self.idle_s, self.store, self.registry_name, self.placement, self.queued_idle_s, self.per_host)

    async def _started(self, key: str) -> tuple[str, Any]:
        """A new host process; its first slot is returned, the others join the pool of `key` now."""
        async with self._starts:
            host = self.new_host()
            hids = [i["hid"] for i in await host.infos.remote()]
        for hid in hids:
            self.note(hid, key, host)
        for hid in hids[1:]:
            self.put(key, hid, host)
        return hids[0], host

    def note(self, hid: str, key: str, host: Any) -> None:
        self.keys[hid] = key
        self.slots_of.setdefault(host._actor_id.hex(), set()).add(hid)

    async def warm(self, n: int, key: str) -> int:
        """Start hosts for `n` more slots of `key`; each joins the pool (or goes to a wake waiting for one) as soon
        as it answers, not when all have. A process brings `per_host` slots: those beyond `n` count towards the
        next call's (`up` warms a few at a time). Returns how many slots wait idle under `key` once these are up."""
        spare = min(n, self.spare[key])
        self.spare[key] -= spare
        starts = -(-(n - spare) // self.per_host)
        self.spare[key] += starts * self.per_host - (n - spare)
        await asyncio.gather(*(self._start(key) for _ in range(starts)))
        return len(self.idle[key])

    def _start(self, key: str) -> asyncio.Task[None]:
        """One host process start for `key`, counted at once (a wake that comes meanwhile waits for its slots)."""
        self.warming[key] += 1
        task = asyncio.get_running_loop().create_task(self._one(key))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)
        return task

    async def _one(self, key: str) -> None:
        try:
            hid, host = await self._started(key)
        except BaseException as exc:  # the wakes this start was to serve are told, not left waiting
            self.warming[key] -= 1
            told = exc if isinstance(exc, Exception) else RuntimeError("a host process start was cancelled")
            while self.takers[key] and self.warming[key] * self.per_host < len(self.takers[key]):
                taker = self.takers[key].pop()  # the newest, beyond what the starts still under way will serve
                if not taker.done():
                    taker.set_exception(told)
            if not isinstance(exc, Exception):
                raise
            return
        self.warming[key] -= 1
        self.put(key, hid, host)

    async def take(self, key: str) -> tuple[str, Any]:
        """An idle slot of `key`, the warmest first; else one that a start under way brings (a warm-up's, or
        another wake's: a process brings `per_host` slots); else a new process (at most `START_AT_ONCE` starting
        at a time). So a burst of wakes starts a process per `per_host` of them, and none right after `up`."""
        if self.idle[key]:
            hid, host = self.idle[key].pop()
            self.pooled_at.pop(hid, None)
            return hid, host
        if self.warming[key] * self.per_host <= len(self.takers[key]):  # no start under way has a slot for it
            self._start(key)
        fut: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
        self.takers[key].append(fut)
        return await fut

    def known(self, hid: str, key: str, host: Any) -> bool:
        """Note a host's slot found running (after a registry restart); False if it was known already."""
        if hid in self.keys:
            return False
        self.note(hid, key, host)
        return True

    def put(self, key: str, hid: str, host: Any) -> None:
        """An idle host goes on top of its pool (the next wake takes the most recently used, the warmest). A host
        that is pooled already, or hosts a live run (an adopt that failed on it because it does), is not added: a
        second entry would hand it two runs, and each failed adopt would add another (a loaded runs_scale ended
        with 55 pool entries for 31 host processes). One pooled under another key moves here: `warm` knows its key,
        while a first call's host scan that met it mid-warm could only guess (the host had run nothing)."""
        if any(h == hid for h, _ in self.idle[key]) or self.is_live(hid):
            self.refused += 1
            return
        while self.takers[key]:  # a wake waits for a host of this key: it takes this one at once
            taker = self.takers[key].popleft()
            if not taker.done():
                taker.set_result((hid, host))
                return
        for other, hosts in self.idle.items():
            if other != key and any(h == hid for h, _ in hosts):
                self.idle[other] = [(h, x) for h, x in hosts if h != hid]
        self.idle[key].append((hid, host))
        self.pooled_at[hid] = time.monotonic()
        if self.idle_keep is not None and (self._trimmer is None or self._trimmer.done()):
            self._trimmer = asyncio.get_running_loop().create_task(self._trim_idle())

    def end(self, hid: str, host: Any) -> None:
        """End a host's slot for good (a trimmed or surplus idle one, or a stale copy of a run): it is forgotten
        here too. Its process ends with its last slot; until then a stale copy the slot holds is dropped."""
        self.keys.pop(hid, None)
        left = self.slots_of.get(host._actor_id.hex())
        if left is not None:
            left.discard(hid)
            if left:
                host.abandon.remote(hid)
                return
            self.slots_of.pop(host._actor_id.hex(), None)
        ray.kill(host, no_restart=True)

    async def _trim_idle(self) -> None:
        """While more than `idle_keep` hosts wait in the pool, end those left unused for `idle_after_s`, the longest
        unused first (the bottom of each pool). Each costs a process start when a later burst of wakes needs it
        again, so it runs only after a long quiet spell."""
        keep = self.idle_keep or 0
        while self.count() > keep:
            now = time.monotonic()
            oldest = min(((self.pooled_at.get(hosts[0][0], now), key) for key, hosts in self.idle.items() if hosts),
                         default=None)
            if oldest is None:
                return
            at, key = oldest
            if now - at < self.idle_after_s:
                await asyncio.sleep(max(self.idle_after_s - (now - at), 0.05))
                continue
            hid, host = self.idle[key].pop(0)  # out of the pool first: no wake takes it while it is asked
            self.pooled_at.pop(hid, None)
            last = self.slots_of.get(host._actor_id.hex(), {hid}) <= {hid}  # its process ends with it
            try:
                quiet = await host.retire.remote(None if last else hid)
            except Exception:  # noqa: BLE001 - gone already: nothing to end
                self.keys.pop(hid, None)
                continue
            if not quiet:  # a call still runs in it (a parked run's pick waiting for its wake): later
                self.put(key, hid, host)
                continue
            self.trimmed += 1
            self.end(hid, host)
