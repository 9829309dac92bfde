"""RunHost: a warm, pooled Ray actor holding up to `runs_per_host` live runs at once, one a `HostSlot`.

Why several: each host is a process, and on a small node a Ray call costs far more CPU spread over many idle
processes than over a few busy ones (`benchmarks/wake_cpu.py`'s two control arms). So the live-run slots the node
allows can sit in fewer processes. The registry still counts, pools and names each slot on its own (its `hid`);
this actor only routes: a call names its run, and goes to the slot that holds it. A driver caches this actor's
handle, so a pick on a live run is still one Ray call.
"""

from __future__ import annotations

import gc
import uuid
from typing import Any

import ray

from . import hosted_ref, wire
from .give_back import freeze_setup
from .host import HostSlot
from .models import Detached
from .names import REGISTRY_NAME
from .placement import Mode


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0, max_concurrency=10000)  # type: ignore[call-overload]
class RunHost:
    def __init__(self, idle_s: float = 5.0, store: str | None = None, registry: str = REGISTRY_NAME,
                 placement: Mode = "head", queued_idle_s: float = 0.25, slots: int = 1) -> None:
        hosted_ref.IN_HOST = True  # a Harness started here reaches its run through a `RunOnHost`
        ctx = ray.get_runtime_context()
        aid = ctx.get_actor_id() or uuid.uuid4().hex
        # Slot names from the actor id: a process Ray restarts has the same slots, which the registry still pools.
        self.slots = [HostSlot(idle_s, store, registry, placement, queued_idle_s, self._quiet, f"{aid[:10]}.{i}")
                      for i in range(max(1, slots))]
        frozen = gc.get_freeze_count() if freeze_setup() else 0  # counted once: the count walks the list
        for s in self.slots:
            s.frozen = frozen
        if ctx.was_current_actor_reconstructed:  # Ray restarted this host: its runs go on from their journals
            try:
                ray.get_actor(registry).host_restarted.remote(aid)
            except ValueError:  # no registry (the instance is going down): nothing to tell
                pass

    def _quiet(self) -> bool:
        """No slot holds a run or serves a call: a trim (process-wide) may run."""
        return all(s.run_id is None and not s.open_calls for s in self.slots)

    def _holding(self, run_id: str) -> HostSlot | None:
        for s in self.slots:
            if s.run_id == run_id:
                return s
        return None

    def _slot(self, hid: str | None) -> HostSlot:
        """The slot named `hid`; None: the first (a host of one slot, as callers that predate slots name it)."""
        if hid is None:
            return self.slots[0]
        for s in self.slots:
            if s.hid == hid:
                return s
        raise ValueError(f"this host has no slot {hid!r}")

    async def info(self, hid: str | None = None) -> dict[str, Any]:
        return await self._slot(hid).info()

    async def infos(self) -> list[dict[str, Any]]:
        """Every slot's `info`: what the pool and a restarted registry learn of this process."""
        return [await s.info() for s in self.slots]

    async def adopt(self, run_id: str, store: str, spec: dict[str, Any] | None = None,
                    env: dict[str, str] | None = None, under: dict[str, str] | None = None,
                    watched: bool = False, first: list[Any] | None = None, hid: str | None = None) -> dict[str, Any]:
        """`HostSlot.adopt` in slot `hid` (the one the registry took from its pool), or in the slot that holds the
        run already (the answer to an earlier adopt was lost: it answers as before)."""
        slot = self._holding(run_id) or self._slot(hid)
        return await slot.adopt(run_id, store, spec, env, under, watched, first)

    async def detach(self, run_id: str, early: bool = False) -> Detached | None:
        slot = self._holding(run_id)
        return None if slot is None else await slot.detach(run_id, early)

    async def retire(self, hid: str | None = None) -> bool:
        """May the registry end slot `hid` (None: the whole process) now: it holds no run and serves no call."""
        return self._quiet() if hid is None else await self._slot(hid).retire()

    async def abandon(self, hid: str) -> None:
        """The registry ends slot `hid` while other slots of this process live: a stale copy of a run it may hold
        (another host holds that run under a newer lease, which fences this copy's writes) is dropped."""
        slot = self._slot(hid)
        if slot.engine is not None:
            slot._drop(slot.engine)
            slot._gone.set()  # picks and watches waiting on that copy go back to their callers

    async def call(self, run_id: str, method: str, args: list[Any], forward: bool = True,
                   standing: bool | str = False, carry: list[list[Any]] | None = None) -> Any:
        """`HostSlot.call` on the slot holding `run_id`; none does: the first slot answers as a host that does not
        hold it does (`NotHere`, or the call forwarded through the registry)."""
        slot = self._holding(run_id) or self.slots[0]
        return await slot.call(run_id, method, args, forward, standing, carry)

    async def wire(self, blob: bytes) -> bytes:
        """`call`, its arguments and its answer each one pickled `bytes` (`jr2ray.run.wire`)."""
        return wire.pack(await self.call(*wire.unpack(blob)))

    async def run_call(self, run_id: str, method: str, args: list[Any]) -> Any:
        """A Harness's call on its run (`hosted_ref.RunOnHost`): the run is named, as the process holds several."""
        if method == "record_telemetry":
            slot = self._holding(run_id)
            if slot is not None:
                await slot.record_telemetry(*args)
            return None
        return await self.call(run_id, method, args)


__all__ = ["RunHost"]
