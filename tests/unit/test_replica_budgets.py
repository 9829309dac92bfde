"""Turn admission over several replicas: one budget each, a conversation placed once and kept there, its kind's
shared prefix followed while there is room, and no replica ever holding more than its own capacity."""

from __future__ import annotations

import asyncio
import random

import pytest

from jr2ray.harness.admission import Admission
from jr2ray.harness.replicas import ReplicaBudgets, pinned_session, placed_replica


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_placement_travels_in_the_session_id_and_only_at_its_end() -> None:
    assert placed_replica(pinned_session("run-1:writer", 3)) == 3
    assert pinned_session("run-1:writer", None) == "run-1:writer"
    assert placed_replica("run-1:writer") is None
    assert placed_replica("a#replica=1:b") is None  # not a placement: the mark is only ever appended


def test_bad_budgets_are_refused_at_once() -> None:
    with pytest.raises(ValueError, match="at least one replica"):
        ReplicaBudgets([])
    with pytest.raises(ValueError, match="unknown placement 'nearest'"):
        ReplicaBudgets([100, 100], placement="nearest")  # type: ignore[arg-type]


async def test_one_replica_names_none_so_the_session_id_stays_as_it_was() -> None:
    budgets = ReplicaBudgets([100])
    assert isinstance(budgets, Admission)
    grant = await budgets.admit("a", 60, "k")
    assert grant.replica is None and budgets.stats().placement == "affinity"


async def test_affinity_counts_the_kinds_shared_prefix_as_room_and_a_conversation_never_moves() -> None:
    budgets = ReplicaBudgets([100, 100])
    first = await budgets.admit("a", 40, "coder")
    await budgets.release("a", after_s=60)  # lands: coder's shared prefix is on first.replica now, and a still holds
    second = await budgets.admit("b", 40, "coder")
    assert second.replica == first.replica  # 60 free and the prefix (worth one reserve of 40) beat 100 free
    third = await budgets.admit("c", 40, "coder")  # no room beside a and b: the other replica, which has room
    assert third.replica != first.replica
    other = await budgets.admit("d", 30, "notes")  # another kind known nowhere: the most free room
    assert other.replica == third.replica
    for _ in range(3):  # a placed conversation stays, however the room moves
        await budgets.release("b")
        assert (await budgets.admit("b", 50, "coder")).replica == first.replica
    stats = budgets.stats()
    assert [r.capacity_tokens for r in stats.replicas] == [100, 100] and stats.capacity_tokens == 200
    assert stats.used_tokens == sum(r.used_tokens for r in stats.replicas) == sum(stats.held.values())


async def test_spread_ignores_the_kind_and_fills_the_emptier_replica() -> None:
    budgets = ReplicaBudgets([100, 100], placement="spread")
    a = await budgets.admit("a", 40, "coder")
    await budgets.release("a", after_s=60)
    b = await budgets.admit("b", 40, "coder")
    assert b.replica != a.replica


async def test_a_burst_of_one_kind_is_spread_by_affinity_and_herded_by_prefix() -> None:
    """What waits on a replica counts against its room; only `prefix` sends every fresh one where the kind is known
    while it fits, and the bench measured what that costs (one replica idle)."""
    counts = {}
    for placement in ("affinity", "spread", "prefix"):
        budgets = ReplicaBudgets([300, 300], placement=placement)  # type: ignore[arg-type]
        asks = [asyncio.create_task(budgets.admit(f"c{i}", 30, "coder")) for i in range(6)]
        landed: set[int] = set()
        for _ in range(10):  # a kind's first request on each replica goes alone: let each land as it is granted
            await _settle()
            for i in [i for i, t in enumerate(asks) if t.done() and i not in landed]:
                landed.add(i)
                await budgets.release(f"c{i}", after_s=60)
        grants = await asyncio.wait_for(asyncio.gather(*asks), 1)
        counts[placement] = sorted(sum(1 for g in grants if g.replica == k) for k in (0, 1))
    assert counts == {"affinity": [3, 3], "spread": [3, 3], "prefix": [0, 6]}


async def test_round_robin_moves_the_share_with_every_request() -> None:
    budgets = ReplicaBudgets([100, 100], placement="round_robin")
    seen = []
    for _ in range(4):
        grant = await budgets.admit("a", 40, "coder")
        seen.append(grant.replica)
        assert sum(1 for r in budgets.stats().replicas if "a" in r.held) == 1  # held on one replica only
    assert seen == [0, 1, 0, 1]
    await budgets.release("a")
    assert budgets.stats().used_tokens == 0


async def test_with_no_room_anywhere_a_fresh_conversation_queues_on_one_replica_and_is_let_in_there() -> None:
    budgets = ReplicaBudgets([100, 100])
    a = await budgets.admit("a", 60, "coder")
    b = await budgets.admit("b", 60, "coder")  # no room beside a (it reserves what its kind needed): the other one
    assert {a.replica, b.replica} == {0, 1}
    late = asyncio.create_task(budgets.admit("c", 30, "coder"))  # reserves 60: fits on neither, holds nothing
    await _settle()
    assert not late.done() and budgets.stats().used_tokens == 120
    queued_on = next(k for k, r in enumerate(budgets.stats().replicas) if r.waiting == ["c"])
    await budgets.release("b" if b.replica == queued_on else "a")
    grant = await asyncio.wait_for(late, 1)
    assert grant.waited and grant.replica == queued_on
    for r in budgets.stats().replicas:
        assert r.used_tokens <= r.capacity_tokens


async def test_no_replica_ever_holds_more_than_its_capacity_under_random_load() -> None:
    rng = random.Random(7)
    for placement in ("affinity", "prefix", "spread", "round_robin"):
        budgets = ReplicaBudgets([300, 200, 250], placement=placement, patience_s=0.05)
        where: dict[str, set[int]] = {}

        async def conversation(key: str, kind: str, budgets: ReplicaBudgets = budgets,
                               where: dict[str, set[int]] = where) -> None:
            need = rng.randint(20, 80)
            for _ in range(rng.randint(1, 4)):
                grant = await budgets.admit(key, need, kind)
                assert grant.replica is not None
                where.setdefault(key, set()).add(grant.replica)
                for part in budgets.stats().replicas:
                    assert part.used_tokens <= part.capacity_tokens
                await asyncio.sleep(rng.random() / 200)
                need += rng.randint(0, 40)
            await budgets.release(key, after_s=rng.choice([0.0, 0.01]))

        await asyncio.wait_for(asyncio.gather(*(conversation(f"c{i}", f"k{i % 3}") for i in range(40))), 30)
        for part in budgets.stats().replicas:
            assert part.high_water_tokens <= part.capacity_tokens, placement
        if placement != "round_robin":  # placed once: every request of a conversation went to one replica
            assert all(len(r) == 1 for r in where.values()), placement
        else:
            assert any(len(r) > 1 for r in where.values())
