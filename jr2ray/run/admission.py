"""Admission: at most `max_live` runs are live, and the others wait in line for a slot, first come, first served.

`Slots` is the line (the registry's, in memory; after a restart it is rebuilt from the journals' `queued` runs), and
`EarlyParks` makes room in it: while runs wait, live runs idle past `queued_idle_s` park early. The functions below
are its journal writes: a start is one journal write (the run, `queued`, with how it was started), a batch of starts
one store batch, and a queued run is cancelled in its journal without ever taking a slot."""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from . import tracing, versions
from .actor import journaled_env
from .catalog import load_workflow_cached
from .give_back import Trimmer
from .models import RunStatus
from .store import JournalStore, LedgerKind, NewRun


class EarlyParks:
    """The live runs their hosts offered as idle past `queued_idle_s` (oldest first), and the early parks that free
    their slots while runs wait in line: at most one under way per waiting run. `park(run id, host id)` is the
    registry's early `deactivate` (its host re-checks under the run's lock, so a stale offer parks nothing)."""

    def __init__(self, waiting: Callable[[], int], park: Callable[[str, str], Awaitable[bool]]) -> None:
        self.waiting, self.park = waiting, park
        self.offers: dict[str, str] = {}  # run id -> host id
        self.under_way = 0
        self.parked = 0  # early parks done
        self._tasks: set[asyncio.Task[None]] = set()  # the loop holds tasks weakly

    def offer(self, run_id: str, hid: str) -> None:
        """A host's run may park: at once if a run waits for a slot, else when one does."""
        self.offers.pop(run_id, None)
        self.offers[run_id] = hid
        self.evict()

    def withdraw(self, run_id: str) -> None:
        """The run parked, or its host lost it: its offer goes."""
        self.offers.pop(run_id, None)

    def evict(self) -> None:
        """Park offered runs early, oldest offer first, one per run waiting in line."""
        while self.offers and self.under_way < self.waiting():
            rid = next(iter(self.offers))
            hid = self.offers.pop(rid)
            self.under_way += 1
            task = asyncio.get_running_loop().create_task(self._one(rid, hid))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(self, run_id: str, hid: str) -> None:
        try:
            if await self.park(run_id, hid):
                self.parked += 1
        finally:
            self.under_way -= 1
        self.evict()


def enqueue(store: JournalStore, run_id: str, spec: dict[str, Any]) -> None:
    """Create the run's journal as `queued` (once: a retried start finds it and writes nothing)."""
    new = new_run(run_id, _pinned(store, spec))
    j = store.open(run_id, create=True)
    try:
        if j.run() is not None:
            return
        j.create(run_id, new.workflow, new.digest, new.input, status="queued")
        j.commit(new.digest, "queued", None, list(new.entries))
    finally:
        j.close()
    if new.version:
        store.set_run_version(run_id, new.version)


def _pinned(store: JournalStore, spec: dict[str, Any]) -> dict[str, Any]:
    """A start by name that names no version (a caller other than the client) gets the current one here."""
    if isinstance(spec.get("workflow"), str) and not spec.get("version"):
        version, machine = versions.current(store, spec["workflow"])
        return {**spec, "version": version, "digest": machine.digest}
    return spec


def new_run(run_id: str, spec: dict[str, Any]) -> NewRun:
    """A start as the store writes it: the run, `queued`, with how it was started (its env without secrets)."""
    workflow = spec["workflow"]
    if "digest" in spec:
        name, digest = str(workflow), str(spec["digest"])
    else:
        machine = load_workflow_cached(workflow) if isinstance(workflow, str) else workflow
        name, digest = (workflow if isinstance(workflow, str) else machine.id), machine.digest
    origin = tracing.rooted({"env": journaled_env(spec.get("env")), "launcher": spec.get("launcher")}, run_id, name)
    version = str(spec.get("version") or "")
    if version:  # the Workflow version the run is pinned to (jr2ray.run.versions)
        origin["version"] = version
    return NewRun(id=run_id, workflow=name, digest=digest, input=spec.get("input"), status="queued",
                  version=version, entries=[(LedgerKind.START.value, None, origin)])


def on_instance(spec: dict[str, Any], instance: tuple[dict[str, str], str | None] | None) -> dict[str, Any]:
    """A start with no env of its own and the launcher of the instance `up` started (`instance`: its run env and
    launcher) runs with the instance's env, as its API's runs do, so it takes the hosts `up` warms for them (a host
    keeps the env of its first run). Measured: with a pool of their own, 20 runs a script started right after `up`
    used none of its 30 warming hosts and started 20 more, each behind all of those warm-ups (44.6 s to finish)."""
    if instance is None or spec.get("env") or spec.get("launcher") != instance[1]:
        return spec
    return {**spec, "env": dict(instance[0])}


def enqueue_many(store: JournalStore, starts: list[tuple[str, dict[str, Any]]]) -> None:
    """Journal a batch of starts, `queued`, in as few transactions as the store allows (see `create_runs`)."""
    store.create_runs([new_run(rid, _pinned(store, spec)) for rid, spec in starts])


def cancel_queued(store: JournalStore, run_id: str) -> RunStatus:
    j = store.open(run_id)
    try:
        row = j.run()
        assert row is not None
        j.commit(row.digest, "cancelled", None, [(LedgerKind.STATUS.value, None, {"status": "cancelled"})])
        return RunStatus(id=run_id, workflow=row.workflow, digest=row.digest, status="cancelled")
    finally:
        j.close()


class Slots:
    """The line for live slots. `take` reserves a slot (None) or a place in line by ticket (a future resolved when
    a slot is handed to it); a run that goes live keeps its slot until `free`d. `live_count` is how many runs are
    live now; `on_wait` is told when a run joins the line (the registry then parks idle runs early)."""

    def __init__(self, max_live: int, live_count: Callable[[], int], on_wait: Callable[[], None]) -> None:
        self.max_live = max_live
        self.live_count, self.on_wait = live_count, on_wait
        self.reserved = 0  # slots taken by activations not yet live
        self.queue: deque[tuple[float, str, asyncio.Future[None]]] = deque()  # (ticket, run id, its turn)
        self.queued: set[str] = set()
        self.trimmer = Trimmer(every_s=10.0, after=1000)  # after a burst (10,000 queued starts), memory goes back

    def take(self, run_id: str, ticket: float) -> asyncio.Future[None] | None:
        if not self.queue and self.live_count() + self.reserved < self.max_live:
            self.reserved += 1
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self.queue or ticket >= self.queue[-1][0]:  # a burst's tickets rise: append, no search
            self.queue.append((ticket, run_id, fut))
        else:
            self.queue.insert(bisect.bisect_right([t for t, _r, _f in self.queue], ticket), (ticket, run_id, fut))
        self.queued.add(run_id)
        self.on_wait()
        return fut

    def went_live(self) -> None:
        """A reserved slot is now a live run's (it counts in `live_count` from here on)."""
        self.reserved -= 1

    def release(self) -> None:
        """A reserved slot goes back (its activation failed, or found the run live already)."""
        self.reserved -= 1
        self.hand_out()

    def leave(self, run_id: str, line: asyncio.Future[None] | None) -> None:
        """Give back what `take` gave an activation that failed before going live."""
        if line is None or (line.done() and not line.cancelled() and line.exception() is None):
            self.release()
            return
        self.queue = deque(q for q in self.queue if q[2] is not line)
        self.queued.discard(run_id)

    def drop(self, run_id: str) -> list[asyncio.Future[None]]:
        """Take a queued run out of line (it was cancelled): the futures of its places."""
        dropped = [f for _t, r, f in self.queue if r == run_id]
        self.queue = deque(q for q in self.queue if q[1] != run_id)
        self.queued.discard(run_id)
        return dropped

    def hand_out(self) -> None:
        """Give free slots to the longest waiting activations. Once the line is short again after a burst, the
        memory its calls held goes back to the system."""
        while self.queue and self.live_count() + self.reserved < self.max_live:
            _t, _rid, fut = self.queue.popleft()
            if not fut.done():
                self.reserved += 1
                fut.set_result(None)
        self.trimmer.note()
        if len(self.queue) < self.max_live and self.trimmer.due():
            self.trimmer.trim()

    def places(self, run_ids: list[str]) -> dict[str, int]:
        """Each queued run's place in line (1 is next), for those of `run_ids` that wait."""
        want = set(run_ids)
        return {rid: i + 1 for i, (_t, rid, _f) in enumerate(self.queue) if rid in want}

    def waiting(self) -> list[str]:
        return [r for _t, r, _f in self.queue]
