"""One KV budget per LLM app, shared by the Harness actors of every run: a small named Ray actor.

Why an actor: each run's Agents are HarnessActors in their own processes, so a `KvBudget` in one process would only
see its own conversations. The budget lives in one async actor, named `kv-budget:<app>` in the runs' namespace; the
Run actor's launcher finds it by name and hands its handle to each HarnessActor, whose Conversation asks it before
every model request (`RemoteAdmission`, the `Admission` port over Ray).

Whoever deploys the LLM app creates it (`serve.llm.ensure_kv_budget`, with the capacity read from vLLM), because
reading vLLM's metrics belongs above this layer. One budget covers the app: its capacity is the sum of its engines'.
Under the session router a conversation stays on one replica, but which one is Serve's choice (a hash the Harness does
not see), so with 2 replicas one replica may hold more than its half (docs/design.md, "Turn admission").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray
from ray.actor import ActorHandle

from jr2ray.harness.admission import AdmissionGrant, BudgetStats, KvBudget

log = logging.getLogger(__name__)

BUDGET_PREFIX = "kv-budget:"


def budget_name(app: str) -> str:
    """The budget actor's name for the LLM app `app` (Serve's application name, e.g. `llm`)."""
    return f"{BUDGET_PREFIX}{app}"


class KvBudgetActorImpl:
    """Hosts one `KvBudget`. Async, so every waiting ask is a coroutine of this one process, in one order."""

    def __init__(self, capacity_tokens: int, patience_s: float = 30.0) -> None:
        self.budget = KvBudget(capacity_tokens, patience_s=patience_s)

    async def admit(self, key: str, need_tokens: int, kind: str | None = None) -> dict[str, Any]:
        return (await self.budget.admit(key, need_tokens, kind)).model_dump()

    async def release(self, key: str, after_s: float = 0.0) -> None:
        await self.budget.release(key, after_s)

    async def stats(self) -> dict[str, Any]:
        return self.budget.stats().model_dump()

    async def reset_stats(self) -> None:
        """Start the counters over (a bench arm); what is held stays held."""
        self.budget.high_water = self.budget.used
        self.budget.peak_holders = len(self.budget.held)
        self.budget.granted = []
        self.budget.waits = self.budget.over_capacity_grants = self.budget.grown = self.budget.given_back = 0


KvBudgetActor = ray.remote(KvBudgetActorImpl)


def ensure_budget(app: str, capacity_tokens: int, *, namespace: str, patience_s: float = 30.0) -> ActorHandle[Any]:
    """The app's budget actor, created with `capacity_tokens` if there is none yet. Detached: it outlives the
    driver that deployed the app, as the app does. An existing budget of another capacity is replaced (the app was
    deployed again with another cache) only when nothing is held in it; otherwise that is an error."""
    name = budget_name(app)
    found = find_budget(app, namespace)
    if found is not None:
        stats = BudgetStats.model_validate(ray.get(found.stats.remote()))
        if stats.capacity_tokens == capacity_tokens:
            return found
        if stats.held or stats.waiting:
            raise ValueError(f"the KV budget of {app!r} holds {stats.used_tokens} tokens at capacity "
                             f"{stats.capacity_tokens}; it cannot change to {capacity_tokens} while in use")
        ray.kill(found, no_restart=True)
        drop_budget(app, namespace)
    handle: Any = KvBudgetActor.options(
        name=name, namespace=namespace, lifetime="detached", get_if_exists=True, num_cpus=0,
        max_concurrency=1000).remote(capacity_tokens, patience_s)
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
