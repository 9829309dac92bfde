"""Turn admission over several LLM replicas: one KV budget per replica, and where each conversation goes.

Why per replica: each vLLM replica has its own KV cache, so one budget summed over replicas would let two large
conversations in "side by side" on one replica whose cache holds only one of them. And the router alone cannot place
well: Serve's consistent hash spreads conversations blindly, while this budget knows which replica has room and which
already holds a kind's shared prefix (its tools block and Briefing, what every conversation of one seat and Menu
starts with).

So a conversation is placed once, when it first asks, and stays on its replica (its prefix is there). The grant names
the replica; the Harness puts it in its session id (`pinned_session`), and the LLM app's router
(`serve.llm.router.PlacedReplicaRouter`) sends the request there. A fresh conversation goes to a replica where it fits
now, counting what already waits there; among those, by the placement policy (`turn_admission_placement`):
- `affinity` (the default): the most room, where a replica that knows the conversation's kind (its shared prefix is
  resident, or its first request is in flight) counts one conversation's reserve more. The shared prefix is worth
  something, but less than using both replicas: `jr2ray bench --load --replicas 2` measured the cost of herding.
- `prefix`: a replica that knows the kind, while it has room: every conversation of a kind where its prefix is (the
  herding the bench measures against).
- `spread`: the most room, whatever the kind: each replica pays each kind's shared prefix once.
- `round_robin`: every request to the next replica in turn, its share moved with it: what routing without state does
  (the bench's baseline for conversation affinity).

Pure asyncio: no Ray, no model client. `jr2ray.harness.budget_actor` hosts one for an LLM app.
"""

from __future__ import annotations

import itertools
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import get_args

from jr2ray.harness.admission import AdmissionGrant, BudgetStats, KvBudget
from jr2ray.settings import TurnPlacement as Placement

PLACEMENTS: tuple[Placement, ...] = get_args(Placement)

_MARK = "#replica="
_PLACED = re.compile(re.escape(_MARK) + r"(\d+)$")
REMEMBERED = 65_536  # placements kept (least recently asked go first): a few bytes each


def pinned_session(session: str, replica: int | None) -> str:
    """The session id a request sends when its budget placed it on `replica` (unchanged when None)."""
    return session if replica is None else f"{session}{_MARK}{replica}"


def placed_replica(session: str) -> int | None:
    """The replica a session id was placed on by `pinned_session`, or None for a plain session id."""
    m = _PLACED.search(session)
    return int(m.group(1)) if m else None


class ReplicaBudgets:
    """The `Admission` port over one `KvBudget` per replica, in the router's replica order."""

    def __init__(self, capacities: Sequence[int], *, placement: Placement = "affinity", patience_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not capacities:
            raise ValueError("a KV budget needs at least one replica's capacity")
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {placement!r}: one of {', '.join(PLACEMENTS)}")
        self.budgets = [KvBudget(c, patience_s=patience_s, clock=clock) for c in capacities]
        self.placement: Placement = placement
        self.placed: OrderedDict[str, int] = OrderedDict()
        self._turn = itertools.count()

    async def admit(self, key: str, need_tokens: int, kind: str | None = None) -> AdmissionGrant:
        k = await self._place(key, need_tokens, kind)
        grant = await self.budgets[k].admit(key, need_tokens, kind)
        return grant if len(self.budgets) == 1 else grant.model_copy(update={"replica": k})

    async def release(self, key: str, after_s: float = 0.0) -> None:
        """Give the share back on the replica it is held on (a round-robin conversation may hold on any)."""
        where = [self.placed[key]] if key in self.placed and self.placement != "round_robin" \
            else [k for k, b in enumerate(self.budgets) if b.holds(key)]
        for k in where:
            await self.budgets[k].release(key, after_s)

    def asking(self, key: str) -> bool:
        return any(b.asking(key) for b in self.budgets)

    def stats(self) -> BudgetStats:
        parts = [b.stats() for b in self.budgets]
        if len(parts) == 1:
            return parts[0].model_copy(update={"placement": self.placement})
        one = parts[0]
        return one.model_copy(update={
            "capacity_tokens": sum(p.capacity_tokens for p in parts), "used_tokens": sum(p.used_tokens for p in parts),
            "high_water_tokens": sum(p.high_water_tokens for p in parts),
            "peak_holders": sum(p.peak_holders for p in parts),
            "held": {k: v for p in parts for k, v in p.held.items()},
            "waiting": [k for p in parts for k in p.waiting], "grants": sum(p.grants for p in parts),
            "waits": sum(p.waits for p in parts), "over_capacity_grants": sum(p.over_capacity_grants for p in parts),
            "grown": sum(p.grown for p in parts), "given_back": sum(p.given_back for p in parts),
            "kinds": {k: max(p.kinds.get(k, 0) for p in parts) for p in parts for k in p.kinds},
            "placement": self.placement, "replicas": parts})

    def reset_stats(self) -> None:
        for b in self.budgets:
            b.reset_stats()

    async def _place(self, key: str, need: int, kind: str | None) -> int:
        n = len(self.budgets)
        if n == 1:
            return 0
        if self.placement == "round_robin":
            k = next(self._turn) % n
            for other, b in enumerate(self.budgets):  # its share moves with it: the old replica's cache is no use
                if other != k and b.holds(key):
                    await b.release(key)
            return k
        if key in self.placed:
            self.placed.move_to_end(key)
            return self.placed[key]

        def rank(k: int) -> tuple[bool, int, int, int]:
            """Fits now first (counting what already waits there), then the policy's score, then the lower index."""
            b = self.budgets[k]
            want, room, known = b.reserve_for(need, kind), b.room(), b.knows(kind)
            if self.placement == "spread":
                return (room >= want, room, 0, -k)
            if self.placement == "prefix":
                return (room >= want, int(known), room, -k)
            # affinity: most room, the kind's shared prefix counted as one conversation's worth of it
            return (room >= want, room + (want if known else 0), int(known), -k)

        k = max(range(n), key=rank)
        self.placed[key] = k
        while len(self.placed) > REMEMBERED:
            self.placed.popitem(last=False)
        return k
