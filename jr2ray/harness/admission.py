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
- A holder that grows keeps what it holds and asks only for the difference, ahead of every conversation that holds
  nothing: its prefix is in the cache now, and giving it back would let the others evict it. When every holder is
  waiting to grow and none fits, the one holding least gives its share back (it has the least prefix to lose), so
  holders never wait on each other for ever.
- A conversation let in afresh reserves the most its kind (its seat and Menu) has needed so far, not only its first
  prompt: the workflow's conversations of one kind grow alike, and letting in more than can grow side by side only
  means one of them is evicted half-way (the vLLM default this budget exists to beat).
- A kind's first request goes alone: a fresh conversation of that kind waits until it has landed (its conversation
  asks again or gives its share back), so the tools block and Briefing they all start with are in the cache once,
  and every later first request is served from it (for at most `patience_s`).
- Waiters that hold nothing are served in one order, after the growing holders, and none is passed by one later in
  that order (so a large waiter at the head is not starved by small ones behind it), except by another kind while
  it waits for its own kind's first request. The order: the conversation whose prefix was touched most recently first
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
    replica: int | None = Field(default=None, ge=0, description="With a budget per replica: the replica the request "
                                "must go to (where its share is held). None with one replica.")


class BudgetStats(BaseModel):
    """What a budget did so far: the bench reports it, the CI check asserts the capacity was never passed."""

    capacity_tokens: int
    used_tokens: int
    high_water_tokens: int = Field(description="The most tokens ever held at once.")
    peak_holders: int = Field(description="The most conversations ever holding a share at once.")
    held: dict[str, int]
    waiting: list[str] = Field(description="The waiting keys, in the order they will be served.")
    grants: int = Field(description="Fresh holds (a conversation let in that held nothing).")
    waits: int = Field(description="Fresh holds that had to queue.")
    over_capacity_grants: int = Field(description="Holds, fresh or grown, of a conversation alone past the capacity.")
    grown: int = Field(default=0, description="Holds grown in place (a holder's next, longer request).")
    given_back: int = Field(default=0, description="Holds given back because every holder waited to grow (or was "
                                                   "silent for patience_s, judged gone).")
    kinds: dict[str, int] = Field(default_factory=dict, description="The most each kind of conversation needed.")
    placement: str | None = Field(default=None, description="With a budget per replica: how fresh conversations "
                                                           "are placed (turn_admission_placement).")
    parked: list[str] = Field(default_factory=list, description="Waiting keys whose run parked meanwhile: granted, "
                              "their run is woken (the budget actor).")
    woken: int = Field(default=0, description="Parked runs woken because their ask was granted (the budget actor).")
    replicas: list[BudgetStats] = Field(default_factory=list, description="With a budget per replica: each one's "
                                        "own figures, in the router's replica order (the totals above sum them).")


@runtime_checkable
class Admission(Protocol):
    """What a Conversation asks before a model request, and tells when its Turn ends (a narrow port)."""

    async def admit(self, key: str, need_tokens: int, kind: str | None = None) -> AdmissionGrant: ...

    async def release(self, key: str, after_s: float = 0.0) -> None: ...


@dataclass(order=False)
class _Waiter:
    key: str
    need: int
    arrived: float
    seq: int
    touched: float | None  # when this conversation last held the cache; None: never served
    future: asyncio.Future[AdmissionGrant] = field(repr=False)
    kind: str | None = None
    growing: bool = False  # a holder asking for more: it keeps its hold meanwhile


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
        self.kinds: dict[str, int] = {}  # the most each kind of conversation has needed so far
        self.high_water = 0  # the most tokens ever held at once (tests, the bench)
        self.peak_holders = 0
        self.granted: list[str] = []  # keys in the order they were let in (tests, the bench)
        self.waits = 0
        self.over_capacity_grants = 0
        self.grown = 0
        self.given_back = 0
        self._lingering: dict[str, asyncio.TimerHandle] = {}  # holds given back later unless asked for again
        self._pioneer: dict[str, tuple[str, float]] = {}  # kind -> (key, when) of its first request in flight
        self._warm: set[str] = set()  # kinds whose first request has landed: their shared prefix is cached
        self._recheck: asyncio.TimerHandle | None = None  # a wake due when growers may be waiting on a gone holder

    @property
    def used(self) -> int:
        return sum(self.held.values())

    @property
    def waiting(self) -> list[str]:
        """The waiting keys in the order they will be served."""
        return [w.key for w in self._ordered()]

    def room(self) -> int:
        """Tokens neither held nor asked for by a waiter (a grower's difference, a fresh waiter's reserve): what a
        conversation placed here now could count on. Negative when more waits than will fit."""
        asked = sum(max(0, w.need - self.held.get(w.key, 0)) if w.growing else self._reserve(w.need, w.kind)
                    for w in self._waiting if not w.future.done())
        return self.capacity - self.used - asked

    def reserve_for(self, need_tokens: int, kind: str | None = None) -> int:
        """What a fresh conversation of `kind` asking `need_tokens` would hold here (the most its kind needed)."""
        return self._reserve(max(0, int(need_tokens)), kind)

    def knows(self, kind: str | None) -> bool:
        """Has `kind`'s first request landed here, or is it in flight? Then its shared prefix (tools block,
        Briefing) is, or is about to be, in this replica's cache."""
        return kind is not None and (kind in self._warm or kind in self._pioneer)

    def holds(self, key: str) -> bool:
        return key in self.held or any(w.key == key for w in self._waiting)

    def asking(self, key: str) -> bool:
        """Does `key` wait in line (for a fresh hold, or to grow the one it has)?"""
        return any(w.key == key and not w.future.done() for w in self._waiting)

    def reset_stats(self) -> None:
        """Start the counters over (a bench arm); what is held stays held."""
        self.high_water = self.used
        self.peak_holders = len(self.held)
        self.granted = []
        self.waits = self.over_capacity_grants = self.grown = self.given_back = 0

    async def admit(self, key: str, need_tokens: int, kind: str | None = None) -> AdmissionGrant:
        """Hold `need_tokens` for `key`, waiting until they fit. A holder asking for no more than it holds goes on;
        one asking for more keeps its hold and waits only for the difference. `kind` names the conversation's kind
        (its seat and Menu): a fresh one reserves the most its kind has needed."""
        need = max(0, int(need_tokens))
        start = self._clock()
        self._stay(key)
        warmed = self._landed(key)
        if kind is not None:
            self.kinds[kind] = max(self.kinds.get(kind, 0), need)
        for stale in [w for w in self._waiting if w.key == key]:  # one ask per conversation: a newer one replaces it
            self._waiting.remove(stale)
            stale.future.cancel()
            warmed = True  # wake the others below: the withdrawn ask may have been the head
        if key in self.held:
            self._touched[key] = start  # it is alive and its prefix in use (see _stale_holders)
            if need > self.held[key] and not any(w.growing for w in self._waiting) \
                    and self.used - self.held[key] + need <= self.capacity:
                self._grow(key, need)  # never ahead of a holder already waiting to grow
            if need <= self.held[key]:
                if warmed:
                    self._wake()  # its kind's shared prefix is cached now: the fresh ones of its kind may go
                return self._grant(need, start, waited=False)
        elif not self._blocking() and not self._cold(kind) and self._fits(reserve := self._reserve(need, kind)):
            self._hold(key, reserve, kind)
            if warmed:
                self._wake()
            return self._grant(need, start, waited=False)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(key=key, need=need, arrived=start, seq=next(self._seq), touched=self._touched.get(key),
                         future=loop.create_future(), kind=kind, growing=key in self.held)
        self._waiting.append(waiter)
        self._wake()
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.future.done() and not waiter.future.cancelled():
                self._drop(key)  # granted as it was cancelled: give the hold back
                self._forget_pioneer(key)  # its request never went: the next fresh one of its kind goes first
            self._wake()
            raise

    async def release(self, key: str, after_s: float = 0.0) -> None:
        """The conversation is done with the cache for now (its Turn ended, or it waits on a Gate or an Effect): its
        share goes to the waiters. An ask of the same key still waiting is withdrawn too: over Ray, a Harness that
        was stopped mid-wait cannot withdraw it itself, and one conversation never has two asks at once.

        With `after_s`, the hold stays that long and goes only if the conversation asks for nothing meanwhile: a
        continued conversation whose next Turn opens at once (the chart moved on to a state that invokes the same
        seat, a Gate answered in a moment) keeps its prefix. The budget keeps the timer, so a Harness that dies
        while its hold lingers leaks nothing."""
        for waiter in [w for w in self._waiting if w.key == key]:
            self._waiting.remove(waiter)
            if not waiter.future.done():
                waiter.future.cancel()
        self._stay(key)
        self._landed(key)
        if after_s > 0 and key in self.held:
            self._lingering[key] = asyncio.get_running_loop().call_later(after_s, self._let_go, key)
            self._wake()  # its withdrawn ask, or its kind now warm, may let others in
            return
        self._drop(key)
        self._wake()

    def stats(self) -> BudgetStats:
        return BudgetStats(capacity_tokens=self.capacity, used_tokens=self.used, high_water_tokens=self.high_water,
                           peak_holders=self.peak_holders, held=dict(self.held), waiting=self.waiting,
                           grants=len(self.granted), waits=self.waits, over_capacity_grants=self.over_capacity_grants,
                           grown=self.grown, given_back=self.given_back, kinds=dict(self.kinds))

    # -- internal -------------------------------------------------------------------------------------------------

    def _stay(self, key: str) -> None:
        timer = self._lingering.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _let_go(self, key: str) -> None:
        self._lingering.pop(key, None)
        self._drop(key)
        self._wake()

    def _reserve(self, need: int, kind: str | None) -> int:
        """What a fresh conversation holds: its need, or the most its kind needed (never more than the capacity,
        so a kind that once outgrew it does not shut its next conversations out)."""
        if kind is None or need > self.capacity:
            return need
        return max(need, min(self.kinds.get(kind, 0), self.capacity))

    def _fits(self, need: int) -> bool:
        return self.used + need <= self.capacity or (not self.held and need > self.capacity)

    def _hold(self, key: str, need: int, kind: str | None) -> None:
        self.held[key] = need
        self._touched[key] = self._clock()
        self.granted.append(key)
        self.over_capacity_grants += need > self.capacity
        if kind is not None and kind not in self._warm and kind not in self._pioneer:
            self._pioneer[kind] = (key, self._clock())
            asyncio.get_running_loop().call_later(self.patience_s, self._wake)  # its kind waits no longer than this
        self._note()

    def _grow(self, key: str, need: int) -> None:
        self.held[key] = need
        self._touched[key] = self._clock()
        self.grown += 1
        self.over_capacity_grants += need > self.capacity
        self._note()

    def _note(self) -> None:
        self.high_water = max(self.high_water, self.used)
        self.peak_holders = max(self.peak_holders, len(self.held))

    def _landed(self, key: str) -> bool:
        """`key` asked again or gave its share back: if it was its kind's first, that request has landed, and the
        kind's shared prefix (tools block, Briefing) is in the cache for the rest of its kind."""
        kinds = self._forget_pioneer(key)
        self._warm.update(kinds)
        return bool(kinds)

    def _cold(self, kind: str | None) -> bool:
        """A fresh conversation of `kind` waits while its kind's first request is in flight (within patience)."""
        if kind is None or kind in self._warm or kind not in self._pioneer:
            return False
        return self._clock() - self._pioneer[kind][1] < self.patience_s

    def _forget_pioneer(self, key: str) -> list[str]:
        """The kinds whose first request was `key`'s, no longer in flight."""
        kinds = [kind for kind, (pioneer, _) in self._pioneer.items() if pioneer == key]
        for kind in kinds:
            del self._pioneer[kind]
        return kinds

    def _blocking(self) -> bool:
        """Is a waiter queued that a fresh ask may not pass? Cold ones (their kind's first request is in flight)
        hold up only their own kind."""
        return any(w.growing or not self._cold(w.kind) for w in self._waiting if not w.future.done())

    def _drop(self, key: str) -> None:
        if self.held.pop(key, None) is not None:
            self._touched[key] = self._clock()

    def _grant(self, need: int, start: float, *, waited: bool) -> AdmissionGrant:
        return AdmissionGrant(need_tokens=need, waited_s=max(0.0, self._clock() - start), waited=waited,
                              capacity_tokens=self.capacity, over_capacity=need > self.capacity)

    def _ordered(self) -> list[_Waiter]:
        """Growing holders first (by arrival), then the rest in the order rule."""
        now = self._clock()

        def rank(w: _Waiter) -> tuple[int, float, int]:
            if w.growing:
                return (0, 0.0, w.seq)  # holders, all resident: by arrival, so none is passed for ever
            if now - w.arrived > self.patience_s:
                return (1, w.arrived, w.seq)  # waited too long: by arrival, before all others
            if w.touched is not None:
                return (2, -w.touched, w.seq)  # most recently resident first
            return (3, w.arrived, w.seq)  # never served: by arrival

        return sorted(self._waiting, key=rank)

    def _room(self, waiter: _Waiter) -> bool:
        if waiter.growing:
            return self.used - self.held.get(waiter.key, 0) + waiter.need <= self.capacity or len(self.held) == 1
        return not self._cold(waiter.kind) and self._fits(self._reserve(waiter.need, waiter.kind))

    def _wake(self) -> None:
        """Let waiters in, in order, while the head fits; no waiter passes one ahead of it, but one held back only
        because its kind's first request is in flight is passed by the other kinds. When every holder waits to grow
        and the head does not fit, the holder with least to lose gives its share back, until it does."""
        while True:
            ordered = [w for w in self._ordered() if not w.future.done()]  # cancelled ones: their tasks clean up
            ordered = [w for w in ordered if w.growing or not self._cold(w.kind)]
            if not ordered:
                return
            head = ordered[0]
            if self._room(head):
                self._waiting.remove(head)
                if head.growing:
                    self._grow(head.key, head.need)
                else:
                    self._hold(head.key, self._reserve(head.need, head.kind), head.kind)
                    self.waits += 1
                head.future.set_result(self._grant(head.need, head.arrived, waited=True))
                continue
            growers = [w for w in ordered if w.growing]
            stale = self._stale_holders(growers)
            if not growers or len(growers) + len(stale) < len(self.held):
                if growers and self._recheck is None:  # a holder is busy (its model answers, its tool runs): it
                    # will grow or give back, or after patience_s be judged gone
                    self._recheck = asyncio.get_running_loop().call_later(self.patience_s, self._rewake)
                return
            victim = min([*((w.key, w.seq) for w in growers), *((k, -1) for k in stale)],
                         key=lambda ks: (self.held.get(ks[0], 0), -ks[1]))[0]
            self._drop(victim)
            for w in growers:
                if w.key == victim:
                    w.growing = False
            self.given_back += 1

    def _rewake(self) -> None:
        self._recheck = None
        self._wake()

    def _stale_holders(self, growers: list[_Waiter]) -> list[str]:
        """Holders that asked for nothing for `patience_s` while others wait to grow: their Harness may be gone
        (killed, its release lost), so they count as giving way, or the growers would wait on them for ever."""
        asking = {w.key for w in growers}
        now = self._clock()
        return [k for k in self.held if k not in asking and k not in self._lingering
                and now - self._touched.get(k, now) >= self.patience_s]


def prompt_need(last_prompt_tokens: int | None, last_completion_tokens: int | None, fresh_bytes: int,
                growth_tokens: int, last_bytes: int = 0) -> int:
    """The tokens a request will hold, and the answer's allowance on top. The cache has the last request's prompt;
    what was appended since (its answer as the transcript keeps it, the tool results, the receipt) is counted at the
    last request's own bytes per token. Without those bytes, the last prompt and answer tokens; before any request,
    a rough guess from the prompt's bytes (about 4 bytes a token)."""
    if last_prompt_tokens is None:
        return fresh_bytes // 4 + growth_tokens
    if last_bytes <= 0:
        return last_prompt_tokens + (last_completion_tokens or 0) + growth_tokens
    added = -(-max(0, fresh_bytes - last_bytes) * last_prompt_tokens // last_bytes)  # rounded up
    return last_prompt_tokens + added + growth_tokens


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
