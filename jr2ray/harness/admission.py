"""Turn admission: a per-replica KV budget that live conversations share (issue 25, item 2).

vLLM keeps each conversation's prefix in its KV cache and evicts by LRU. When more conversations are live than the
cache holds, each one's next request may find its prefix gone and prefill it all again. The Harness knows what vLLM
does not: how long each live conversation is (the last request's usage) and when it is done with the cache for a while
(its Turn ends: the run goes on to a Gate, an Effect or another slot). So before a model request the Turn asks this
budget whether its prefix plus the growth it expects fits beside the others; if not, it waits its turn.

The budget's capacity is the replica's real KV capacity in tokens, read from vLLM (`serve.llm.metrics.read_kv_capacity`:
`num_gpu_blocks x block_size` of the engine's `vllm:cache_config_info`), never configured by hand.

The rules, each checked by tests/unit/test_admission.py:
- The held tokens never exceed the capacity. A conversation that alone needs more than the whole capacity is let in
  only when nothing else is held (it would wait forever otherwise); its grant says so (`over_capacity`).
- A holder that outgrows its hold gives it back and asks again; it never waits while holding, so two holders can never
  wait on each other.
- Waiters are served in one order, and no waiter is passed by one later in that order (so a large waiter at the head
  is not starved by small ones behind it). The order: the conversation whose prefix was touched most recently first
  (under LRU it is the most likely still resident), then those never served, by arrival. A waiter that has waited
  longer than `patience_s` goes before every waiter that has not, by arrival, so none waits forever.

Pure asyncio: no Ray, no model client. One `KvBudget` serves the conversations of one process; the Harness actors of
many runs share one through `jr2ray.harness.budget_actor` (a named Ray actor per LLM app that hosts a `KvBudget`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from jr2ray.settings import Settings


class AdmissionGrant(BaseModel):
    """What one admission cost: the Turn records it in its request's telemetry row (never in the transcript)."""

    need_tokens: int = Field(ge=0, description="The prefix plus the growth estimate this request was admitted with.")
    waited_s: float = Field(ge=0, description="How long the request waited for room in the KV budget.")
    waited: bool = Field(description="True when the request did not fit at once and queued.")
    capacity_tokens: int = Field(gt=0)
    over_capacity: bool = Field(default=False, description="Alone it needs more than the capacity: let in alone.")


class BudgetStats(BaseModel):
    """What a budget did so far: the bench reports it, the CI check asserts the capacity was never passed."""

    capacity_tokens: int
    used_tokens: int
    high_water_tokens: int = Field(description="The most tokens ever held at once.")
    peak_holders: int = Field(description="The most conversations ever holding a share at once.")
    held: dict[str, int]
    waiting: list[str] = Field(description="The waiting keys, in the order they will be served.")
    grants: int
    waits: int = Field(description="Grants that had to queue.")
    over_capacity_grants: int = Field(description="Grants to a conversation that alone needed more than the capacity.")


@runtime_checkable
class Admission(Protocol):
    """What a Conversation asks before a model request, and tells when its Turn ends (a narrow port)."""

    async def admit(self, key: str, need_tokens: int) -> AdmissionGrant: ...

    async def release(self, key: str) -> None: ...


@dataclass(order=False)
class _Waiter:
    key: str
    need: int
    arrived: float
    seq: int
    touched: float | None  # when this conversation last held the cache; None: never served
    future: asyncio.Future[AdmissionGrant] = field(repr=False)


class KvBudget:
    """One replica's KV capacity, in tokens, shared by the live conversations that send to it."""

    def __init__(self, capacity_tokens: int, *, patience_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if capacity_tokens <= 0:
            raise ValueError("the KV capacity must be a positive number of tokens")
        self.capacity = capacity_tokens
        self.patience_s = patience_s
        self._clock = clock
        self.held: dict[str, int] = {}
        self._touched: dict[str, float] = {}
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()
        self.high_water = 0  # the most tokens ever held at once (tests, the bench)
        self.peak_holders = 0
        self.granted: list[str] = []  # keys in the order they were let in (tests, the bench)
        self.waits = 0
        self.over_capacity_grants = 0

    @property
    def used(self) -> int:
        return sum(self.held.values())

    @property
    def waiting(self) -> list[str]:
        """The waiting keys in the order they will be served."""
        return [w.key for w in self._ordered()]

    async def admit(self, key: str, need_tokens: int) -> AdmissionGrant:
        """Hold `need_tokens` for `key`, waiting until they fit. A holder asking for no more than it holds goes on."""
        need = max(0, int(need_tokens))
        start = self._clock()
        if key in self.held:
            if need <= self.held[key]:
                return self._grant(need, start, waited=False)
            self._drop(key)  # outgrew its hold: give it back and ask like anyone else (it is at the front)
            self._wake()
        if not self._waiting and self._fits(need):
            self._hold(key, need)
            return self._grant(need, start, waited=False)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(key=key, need=need, arrived=start, seq=next(self._seq), touched=self._touched.get(key),
                         future=loop.create_future())
        self._waiting.append(waiter)
        self._wake()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.future.done() and not waiter.future.cancelled():
                self._drop(key)  # granted as it was cancelled: give the hold back
            self._wake()
            raise

    async def release(self, key: str) -> None:
        """The conversation is done with the cache for now (its Turn ended, or it waits on a Gate or an Effect): its
        share goes to the waiters. An ask of the same key still waiting is withdrawn too: over Ray, a Harness that
        was stopped mid-wait cannot withdraw it itself, and one conversation never has two asks at once."""
        for waiter in [w for w in self._waiting if w.key == key]:
            self._waiting.remove(waiter)
            if not waiter.future.done():
                waiter.future.cancel()
        self._drop(key)
        self._wake()

    def stats(self) -> BudgetStats:
        return BudgetStats(capacity_tokens=self.capacity, used_tokens=self.used, high_water_tokens=self.high_water,
                           peak_holders=self.peak_holders, held=dict(self.held), waiting=self.waiting,
                           grants=len(self.granted), waits=self.waits, over_capacity_grants=self.over_capacity_grants)

    # -- internal -------------------------------------------------------------------------------------------------

    def _fits(self, need: int) -> bool:
        return self.used + need <= self.capacity or (not self.held and need > self.capacity)

    def _hold(self, key: str, need: int) -> None:
        self.held[key] = need
        self._touched[key] = self._clock()
        self.granted.append(key)
        self.high_water = max(self.high_water, self.used)
        self.peak_holders = max(self.peak_holders, len(self.held))
        self.over_capacity_grants += need > self.capacity

    def _drop(self, key: str) -> None:
        if self.held.pop(key, None) is not None:
            self._touched[key] = self._clock()

    def _grant(self, need: int, start: float, *, waited: bool) -> AdmissionGrant:
        return AdmissionGrant(need_tokens=need, waited_s=max(0.0, self._clock() - start), waited=waited,
                              capacity_tokens=self.capacity, over_capacity=need > self.capacity)

    def _ordered(self) -> list[_Waiter]:
        now = self._clock()

        def rank(w: _Waiter) -> tuple[int, float, int]:
            if now - w.arrived > self.patience_s:
                return (0, w.arrived, w.seq)  # waited too long: by arrival, before all others
            if w.touched is not None:
                return (1, -w.touched, w.seq)  # most recently resident first
            return (2, w.arrived, w.seq)  # never served: by arrival

        return sorted(self._waiting, key=rank)

    def _wake(self) -> None:
        """Let waiters in, in order, while the head fits; no waiter passes one ahead of it."""
        for waiter in self._ordered():
            if waiter.future.done():  # cancelled: its task cleans up
                continue
            if not self._fits(waiter.need):
                return
            self._waiting.remove(waiter)
            self._hold(waiter.key, waiter.need)
            self.waits += 1
            waiter.future.set_result(self._grant(waiter.need, waiter.arrived, waited=True))


def prompt_need(last_prompt_tokens: int | None, last_completion_tokens: int | None, fresh_bytes: int,
                growth_tokens: int) -> int:
    """The tokens a request will hold: the last request's prompt and answer (what the cache has of this conversation)
    plus the expected growth; before any request, a rough guess from the prompt's bytes (about 4 bytes a token)."""
    if last_prompt_tokens is None:
        return fresh_bytes // 4 + growth_tokens
    return last_prompt_tokens + (last_completion_tokens or 0) + growth_tokens


def budget_from_settings(settings: Settings, capacity_tokens: int | None) -> KvBudget | None:
    """The KV budget the caller's settings ask for: None with Turn admission off. `capacity_tokens` is what the
    entry point read from vLLM (`serve.llm.read_kv_capacity`); admission on with no capacity found is an error,
    never a guess."""
    if not settings.turn_admission:
        return None
    if not capacity_tokens:
        raise ValueError("Turn admission is on (JR2RAY_TURN_ADMISSION) but no KV capacity was read from vLLM: "
                         "is the engine up, with its metrics on (log_engine_metrics)?")
    return KvBudget(capacity_tokens, patience_s=settings.turn_admission_patience_s)
