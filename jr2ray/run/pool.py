"""The registry's pool of warm RunHosts: idle hosts, keyed by the env and launcher they were started with.

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

from .host import RunHost
from .placement import Mode, options

# Host process starts under way at once: Ray's default limit on worker processes starting together on a node (the
# CPU count). A Ray jr2ray starts has a higher one (`ray_start.startup_concurrency`, so the raylet does not warn
# about the pool's size); the pool still starts no more than this, so a burst does not crowd the cores.
START_AT_ONCE = max(2, os.cpu_count() or 2)


class HostPool:
    def __init__(self, registry_name: str, store: str, placement: Mode, idle_s: float, queued_idle_s: float,
                 is_live: Callable[[str], bool], pool_idle_s: float = 300.0,
                 pool_idle_keep: int | None = None) -> None:
        self.registry_name, self.store, self.placement = registry_name, store, placement
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
            self.idle_s, self.store, self.registry_name, self.placement, self.queued_idle_s)

    async def _started(self, key: str) -> tuple[str, Any]:
        async with self._starts:
            host = self.new_host()
            hid = (await host.info.remote())["hid"]
        self.keys[hid] = key
        return hid, host

    async def warm(self, n: int, key: str) -> int:
        """Start `n` more hosts for `key`; each joins the pool (or goes to a wake waiting for one) as soon as it
        answers, not when all have. Returns how many wait idle under `key` once these are up."""
        async def one() -> None:
            self.warming[key] += 1
            try:
                hid, host = await self._started(key)
            except Exception:  # noqa: BLE001 - a wake counting on this start must not wait for it forever
                self.warming[key] -= 1
                if self.takers[key] and self.warming[key] < len(self.takers[key]):
                    taker = self.takers[key].popleft()
                    got = await self._started(key)
                    if not taker.done():
                        taker.set_result(got)
                return
            self.warming[key] -= 1
            self.put(key, hid, host)

        await asyncio.gather(*(one() for _ in range(n)))
        return len(self.idle[key])

    async def take(self, key: str) -> tuple[str, Any]:
        """An idle host of `key`, the warmest first; else one that a warm-up is starting now; else a new one (at
        most `START_AT_ONCE` starting at a time), so a run started right after `up` does not start its own."""
        if self.idle[key]:
            hid, host = self.idle[key].pop()
            self.pooled_at.pop(hid, None)
            return hid, host
        if self.warming[key] > len(self.takers[key]):  # a warm-up start is on its way that no wake claimed yet
            fut: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
            self.takers[key].append(fut)
            return await fut
        return await self._started(key)

    def known(self, hid: str, key: str) -> bool:
        """Note a host found running (after a registry restart); False if it was known already."""
        if hid in self.keys:
            return False
        self.keys[hid] = key
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
        """End a host for good (a trimmed or surplus idle one, or a stale copy of a run): it is forgotten here too."""
        self.keys.pop(hid, None)
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
            try:
                quiet = await host.retire.remote()
            except Exception:  # noqa: BLE001 - gone already: nothing to end
                self.keys.pop(hid, None)
                continue
            if not quiet:  # a call still runs in it (a parked run's pick waiting for its wake): later
                self.put(key, hid, host)
                continue
            self.trimmed += 1
            self.end(hid, host)
