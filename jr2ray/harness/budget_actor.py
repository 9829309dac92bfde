"""One KV budget per LLM app, shared by the Harness actors of every run: a small named Ray actor.

Why an actor: each run's Agents are HarnessActors in their own processes, so a `KvBudget` in one process would only
see its own conversations. The budget lives in one async actor, named `kv-budget:<app>` in the runs' namespace; the
Run actor's launcher finds it by name and hands its handle to each HarnessActor, whose Conversation asks it before
every model request (`RemoteAdmission`, the `Admission` port over Ray).

Whoever deploys the LLM app creates it (`serve.llm.ensure_kv_budget`, with each engine's capacity read from vLLM),
because reading vLLM's metrics belongs above this layer. It keeps one budget per replica (`jr2ray.harness.replicas`):
the grant names the replica a conversation is placed on, and the app's router sends its requests there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import ray
from ray.actor import ActorHandle

from jr2ray.harness.admission import AdmissionGrant, BudgetStats
from jr2ray.harness.replicas import Placement, ReplicaBudgets

log = logging.getLogger(__name__)

BUDGET_PREFIX = "kv-budget:"


def budget_name(app: str) -> str:
    """The budget actor's name for the LLM app `app` (Serve's application name, e.g. `llm`)."""
    return f"{BUDGET_PREFIX}{app}"


class KvBudgetActorImpl:
    """Hosts one budget per replica. Async, so every waiting ask is a coroutine of this one process, in one order.

    It also keeps the asks of parked runs: a virtual run whose Turn waits for admission may park (its host needs the
    slot); its Harness ends, and `park` hands its ask over. The ask keeps its place in line; once granted, the share
    is held for the conversation and its run is woken by id (the registry's `activate`). The run's restore starts
    the Turn's Harness again, whose first ask finds the share held, and its grant counts the wait from the start."""

    def __init__(self, capacities: Sequence[int], patience_s: float = 30.0, placement: Placement = "affinity") -> None:
        self.budget = ReplicaBudgets(capacities, placement=placement, patience_s=patience_s)
        self._parked: dict[str, tuple[str, Any]] = {}  # admission key -> (run id, registry) of a parked run's ask
        self._waited: dict[str, float] = {}  # admission key -> how long its parked ask waited until granted
        self._tasks: set[asyncio.Task[Any]] = set()
        self.woken = 0  # parked runs woken because their ask was granted (tests, the bench)

    async def admit(self, key: str, need_tokens: int, kind: str | None = None) -> dict[str, Any]:
        self._parked.pop(key, None)  # the conversation's Harness asks itself again: nothing is handed over now
        try:
            grant = await self.budget.admit(key, need_tokens, kind)
        except asyncio.CancelledError:
            if key in self._parked:  # its Harness ended with the parked run before its ask was granted: ask on
                self._spawn(self._ask_parked(key, need_tokens, kind))
            raise
        if key in self._parked:  # granted to a Harness that ended with its parked run
            self._granted_parked(key, grant)
        elif (earlier := self._waited.pop(key, None)) is not None:
            grant = grant.model_copy(update={"waited": True, "waited_s": grant.waited_s + earlier})
        return grant.model_dump()

    async def park(self, key: str, run_id: str, registry: Any) -> bool:
        """The run `run_id` parks while its conversation `key` waits in line: keep the ask, and when it is granted
        wake the run through `registry` (its run registry's handle). False: `key` was not waiting (its grant crossed
        the park), so the run is woken now and its Harness finds what it holds."""
        if self.budget.asking(key):
            self._parked[key] = (run_id, registry)
            return True
        self._spawn(self._wake(run_id, registry))
        return False

    def _granted_parked(self, key: str, grant: AdmissionGrant) -> None:
        run_id, registry = self._parked.pop(key)
        self._waited[key] = grant.waited_s
        self._spawn(self._wake(run_id, registry))

    async def _ask_parked(self, key: str, need_tokens: int, kind: str | None) -> None:
        try:
            grant = await self.budget.admit(key, need_tokens, kind)
        except asyncio.CancelledError:
            return  # its run's Harness asked again itself (the run was woken for something else)
        if key in self._parked:
            self._granted_parked(key, grant)

    async def _wake(self, run_id: str, registry: Any) -> None:
        self.woken += 1
        try:
            await registry.activate.remote(run_id)
        except Exception as exc:  # noqa: BLE001 - its share stays held until judged gone (patience_s)
            log.warning("admission: could not wake parked run %s: %s", run_id, exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def release(self, key: str, after_s: float = 0.0) -> None:
        await self.budget.release(key, after_s)

    async def stats(self) -> dict[str, Any]:
        return self.budget.stats().model_copy(update={"parked": sorted(self._parked), "woken": self.woken}).model_dump()

    async def reset_stats(self) -> None:
        """Start the counters over (a bench arm); what is held stays held."""
        self.budget.reset_stats()


KvBudgetActor = ray.remote(KvBudgetActorImpl)


def _capacities(stats: BudgetStats) -> list[int]:
    return [r.capacity_tokens for r in stats.replicas] or [stats.capacity_tokens]


def ensure_budget(app: str, capacity_tokens: int | Sequence[int], *, namespace: str, patience_s: float = 30.0,
                  placement: Placement = "affinity") -> ActorHandle[Any]:
    """The app's budget actor, created with `capacity_tokens` (one per replica, in the router's order; an int is one
    replica) if there is none yet. Detached: it outlives the driver that deployed the app, as the app does. An
    existing budget of other capacities or placement is replaced (the app was deployed again with another cache)
    only when nothing is held in it; otherwise that is an error."""
    capacities = [capacity_tokens] if isinstance(capacity_tokens, int) else list(capacity_tokens)
    name = budget_name(app)
    found = find_budget(app, namespace)
    if found is not None:
        stats = BudgetStats.model_validate(ray.get(found.stats.remote()))
        if _capacities(stats) == capacities and (stats.placement or "affinity") == placement:
            return found
        if stats.held or stats.waiting:
            raise ValueError(f"the KV budget of {app!r} holds {stats.used_tokens} tokens at capacity "
                             f"{_capacities(stats)}; it cannot change to {capacities} while in use")
        ray.kill(found, no_restart=True)
        drop_budget(app, namespace)
    handle: Any = KvBudgetActor.options(
        name=name, namespace=namespace, lifetime="detached", get_if_exists=True, num_cpus=0,
        max_concurrency=1000).remote(capacities, patience_s, placement)
    return handle


def find_budget(app: str, namespace: str) -> ActorHandle[Any] | None:
    try:
        handle: ActorHandle[Any] = ray.get_actor(budget_name(app), namespace=namespace)
    except ValueError:
        return None
    return handle


def drop_budget(app: str, namespace: str, timeout_s: float = 10.0) -> None:
    """Kill the app's budget actor and wait until its name is free (an undeploy, a test's teardown)."""
    import time

    found = find_budget(app, namespace)
    if found is not None:
        ray.kill(found, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while find_budget(app, namespace) is not None and time.monotonic() < deadline:
        time.sleep(0.1)


def budget_stats(handle: ActorHandle[Any]) -> BudgetStats:
    return BudgetStats.model_validate(ray.get(handle.stats.remote()))


class RemoteAdmission:
    """The `Admission` port over a budget actor: what a HarnessActor's Conversation asks."""

    def __init__(self, handle: ActorHandle[Any]) -> None:
        self.handle = handle

    async def admit(self, key: str, need_tokens: int, kind: str | None = None) -> AdmissionGrant:
        ref: Any = self.handle.admit.remote(key, need_tokens, kind)
        try:
            return AdmissionGrant.model_validate(await ref)
        except asyncio.CancelledError:
            # The Turn was stopped while it waited: withdraw the ask (and give back a grant that crossed it).
            self.handle.release.remote(key)
            raise

    async def release(self, key: str, after_s: float = 0.0) -> None:
        await self.handle.release.remote(key, after_s)
