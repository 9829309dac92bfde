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
    """Hosts one budget per replica. Async, so every waiting ask is a coroutine of this one process, in one order."""

    def __init__(self, capacities: Sequence[int], patience_s: float = 30.0, placement: Placement = "affinity") -> None:
        self.budget = ReplicaBudgets(capacities, placement=placement, patience_s=patience_s)

    async def admit(self, key: str, need_tokens: int, kind: str | None = None) -> dict[str, Any]:
        return (await self.budget.admit(key, need_tokens, kind)).model_dump()

    async def release(self, key: str, after_s: float = 0.0) -> None:
        await self.budget.release(key, after_s)

    async def stats(self) -> dict[str, Any]:
        return self.budget.stats().model_dump()

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
