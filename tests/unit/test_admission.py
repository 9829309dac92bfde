"""The KV budget of Turn admission: never more held than the capacity, and the order rule (most recently resident
first, then never served by arrival, no waiter passed by one behind it, a patient waiter's limit)."""

from __future__ import annotations

import asyncio
import random

import pytest

from jr2ray.harness.admission import Admission, KvBudget, prompt_need


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_fits_at_once_then_waits_for_a_release() -> None:
    budget = KvBudget(100)
    assert isinstance(budget, Admission)
    first = await budget.admit("a", 60)
    assert not first.waited and budget.used == 60
    task = asyncio.create_task(budget.admit("b", 50))
    await _settle()
    assert not task.done() and budget.waiting == ["b"] and budget.used == 60
    await budget.release("a")
    grant = await asyncio.wait_for(task, 1)
    assert grant.waited and grant.need_tokens == 50 and budget.held == {"b": 50}


async def test_a_holder_within_its_hold_goes_on_and_one_that_outgrows_it_keeps_its_hold_while_it_waits() -> None:
    budget = KvBudget(100)
    await budget.admit("a", 40)
    await budget.admit("b", 50)
    assert not (await budget.admit("a", 30)).waited and budget.held["a"] == 40
    assert not (await budget.admit("a", 50)).waited and budget.held == {"a": 50, "b": 50}  # grown in place
    grow = asyncio.create_task(budget.admit("a", 70))  # 70 + 50 > 100: keeps its 50 (its prefix) and waits
    await _settle()
    assert not grow.done() and budget.held == {"a": 50, "b": 50} and budget.waiting == ["a"]
    await budget.release("b")
    assert (await asyncio.wait_for(grow, 1)).waited and budget.held == {"a": 70}
    assert budget.stats().grown == 2


async def test_a_growing_holder_goes_before_every_conversation_that_holds_nothing() -> None:
    budget = KvBudget(100)
    await budget.admit("a", 40)
    await budget.admit("b", 40)
    newcomer = asyncio.create_task(budget.admit("new", 20))  # fits now (80 + 20), but...
    assert (await asyncio.wait_for(newcomer, 1)) and budget.used == 100
    await budget.release("new")
    late = asyncio.create_task(budget.admit("late", 30))  # 80 + 30 > 100: waits
    await _settle()
    grow = asyncio.create_task(budget.admit("a", 55))  # 95 fits: a holder grows at once, ahead of "late"
    await asyncio.wait_for(grow, 1)
    assert budget.held == {"a": 55, "b": 40} and budget.waiting == ["late"]
    await budget.release("b")
    await asyncio.wait_for(late, 1)
    assert budget.held == {"a": 55, "late": 30}


async def test_two_holders_that_both_outgrow_do_not_wait_on_each_other() -> None:
    """Both wait to grow and neither fits: the one holding least gives its share back (the later one on a tie)."""
    budget = KvBudget(100)
    await budget.admit("a", 50)
    await budget.admit("b", 50)
    ta = asyncio.create_task(budget.admit("a", 60))
    await _settle()
    assert not ta.done() and budget.held == {"a": 50, "b": 50}  # b is busy (its model answers): a waits holding
    tb = asyncio.create_task(budget.admit("b", 60))
    await asyncio.wait_for(ta, 1)  # now both wait: b gave its hold back, and a grew
    assert not tb.done() and budget.held == {"a": 60} and budget.stats().given_back == 1
    await budget.release("a")
    await asyncio.wait_for(tb, 1)
    assert budget.held == {"b": 60}


async def test_a_fresh_conversation_reserves_what_its_kind_grew_to() -> None:
    """Two coder conversations grew to 45 each: a third of that kind is not let in beside them at its first 20,
    where it would crowd the two out half-way; a conversation of another kind is."""
    budget = KvBudget(100)
    await budget.admit("c1", 20, "coder")
    await budget.admit("c1", 25, "coder")  # its first request landed: the kind is warm
    await asyncio.wait_for(budget.admit("c2", 20, "coder"), 1)
    for key in ("c1", "c2"):
        await budget.admit(key, 45, "coder")
    other = await asyncio.wait_for(budget.admit("n1", 5, "notes"), 1)
    assert not other.waited
    await budget.release("n1")
    third = asyncio.create_task(budget.admit("c3", 20, "coder"))
    await _settle()
    assert not third.done() and budget.waiting == ["c3"]
    await budget.release("c1")
    await asyncio.wait_for(third, 1)
    assert budget.held == {"c2": 45, "c3": 45} and budget.stats().kinds == {"coder": 45, "notes": 5}
    assert not (await budget.admit("c3", 44, "coder")).waited  # within its reservation


async def test_a_kinds_first_request_goes_alone_so_the_rest_start_from_its_cached_prefix() -> None:
    """Four runs of one seat start at once: one is let in, the others wait (with room to spare) until its first
    request lands (its conversation asks again), then all go."""
    budget = KvBudget(1000)
    await budget.admit("r0", 50, "coder")
    rest = [asyncio.create_task(budget.admit(f"r{k}", 50, "coder")) for k in (1, 2, 3)]
    await _settle()
    assert budget.waiting == ["r1", "r2", "r3"] and budget.held == {"r0": 50}
    await budget.admit("r0", 80, "coder")  # r0 asks again: its first request has landed
    await asyncio.wait_for(asyncio.gather(*rest), 1)
    assert set(budget.held) == {"r0", "r1", "r2", "r3"}
    late = await asyncio.wait_for(budget.admit("r4", 50, "coder"), 1)  # the kind is warm: no wait
    assert not late.waited


async def test_a_kinds_first_conversation_that_gives_its_share_back_has_landed_too() -> None:
    budget = KvBudget(1000)
    await budget.admit("r0", 50, "coder")
    waiter = asyncio.create_task(budget.admit("r1", 50, "coder"))
    await _settle()
    assert not waiter.done()
    await budget.release("r0", after_s=5)  # its Turn ended (lingering): its request did land
    await asyncio.wait_for(waiter, 1)


async def test_a_waiting_grower_is_not_passed_by_another_holder_growing() -> None:
    budget = KvBudget(100)
    for key, need in (("a", 40), ("b", 40), ("c", 10)):
        await budget.admit(key, need)
    grow_a = asyncio.create_task(budget.admit("a", 55))  # needs 15, 10 free: waits (c is busy)
    await _settle()
    grow_b = asyncio.create_task(budget.admit("b", 45))  # 5 would fit, but a asked first
    await _settle()
    assert not grow_a.done() and not grow_b.done() and budget.waiting == ["a", "b"]
    await budget.release("c")
    await asyncio.wait_for(asyncio.gather(grow_a, grow_b), 1)
    assert budget.held == {"a": 55, "b": 45}


async def test_growers_waiting_on_a_holder_that_never_comes_back_get_its_share_after_patience() -> None:
    """c's Harness died holding 20 and its release was lost: a and b wait to grow; after `patience_s` without a word
    from c, c counts as gone and gives its share back (it holds least), so neither waits for ever."""
    budget = KvBudget(100, patience_s=0.2)
    for key, need in (("a", 40), ("b", 40), ("c", 20)):
        await budget.admit(key, need)
    growing = [asyncio.create_task(budget.admit(k, 50)) for k in ("a", "b")]
    await _settle()
    assert not any(t.done() for t in growing)
    await asyncio.wait_for(asyncio.gather(*growing), 2)
    assert budget.held == {"a": 50, "b": 50} and budget.stats().given_back == 1


async def test_a_cold_kind_holds_up_only_its_own_kind() -> None:
    budget = KvBudget(1000)
    await budget.admit("a0", 50, "A")
    cold = asyncio.create_task(budget.admit("a1", 50, "A"))
    await _settle()
    other = await asyncio.wait_for(budget.admit("b0", 50, "B"), 1)  # kind B passes kind A's cold waiter
    assert not other.waited and not cold.done()
    await budget.release("a0")
    await asyncio.wait_for(cold, 1)


async def test_a_first_request_cancelled_as_it_was_granted_lets_the_next_of_its_kind_go_first() -> None:
    budget = KvBudget(100)
    await budget.admit("blocker", 100)
    first = asyncio.create_task(budget.admit("p", 50, "A"))
    await _settle()
    await budget.release("blocker")  # grants p ...
    first.cancel()  # ... as its Turn is stopped: its request never goes
    with pytest.raises(asyncio.CancelledError):
        await first
    assert budget.held == {}
    nxt = await asyncio.wait_for(budget.admit("q", 50, "A"), 1)  # not held back for p's request that never went
    assert not nxt.waited


async def test_a_lingering_release_keeps_the_hold_for_a_quick_return_and_lets_go_after() -> None:
    budget = KvBudget(100)
    await budget.admit("a", 60)
    await budget.release("a", after_s=0.2)
    assert budget.held == {"a": 60}
    waiter = asyncio.create_task(budget.admit("b", 60))
    await asyncio.sleep(0.05)
    assert not (await budget.admit("a", 60)).waited  # back in time: the hold was kept
    await asyncio.sleep(0.3)
    assert budget.held == {"a": 60} and not waiter.done()  # its return cancelled the timer
    await budget.release("a", after_s=0.1)
    await asyncio.wait_for(waiter, 1)
    assert budget.held == {"b": 60}


async def test_order_most_recently_resident_first_then_new_by_arrival() -> None:
    clock = Clock()
    budget = KvBudget(100, clock=clock)
    for key in ("old", "recent"):
        await budget.admit(key, 10)
        clock.t += 1
        await budget.release(key)  # touched at t=1 ("old") and t=2 ("recent")
        clock.t += 1
    await budget.admit("blocker", 100)
    tasks = {k: asyncio.create_task(budget.admit(k, 60)) for k in ("new1", "old", "new2", "recent")}
    await _settle()
    assert budget.waiting == ["recent", "old", "new1", "new2"]
    order: list[str] = []
    for _ in range(4):
        holder = next(k for k in budget.held)
        await budget.release(holder)
        await _settle()
        order.append(next(k for k in budget.held))
    assert order == ["recent", "old", "new1", "new2"]
    await asyncio.gather(*tasks.values())


async def test_no_waiter_is_passed_by_a_smaller_one_behind_it() -> None:
    budget = KvBudget(100)
    await budget.admit("a", 70)
    big = asyncio.create_task(budget.admit("big", 90))
    await _settle()
    small = asyncio.create_task(budget.admit("small", 20))  # would fit now, but "big" is ahead of it
    await _settle()
    assert not small.done() and budget.waiting == ["big", "small"]
    await budget.release("a")
    await asyncio.wait_for(big, 1)
    assert not small.done()
    await budget.release("big")
    await asyncio.wait_for(small, 1)


async def test_a_waiter_past_its_patience_goes_first() -> None:
    clock = Clock()
    budget = KvBudget(100, patience_s=5, clock=clock)
    await budget.admit("resident", 10)
    await budget.release("resident")
    clock.t = 1
    await budget.admit("blocker", 100)
    newcomer = asyncio.create_task(budget.admit("newcomer", 50))
    await _settle()
    clock.t = 2
    resident = asyncio.create_task(budget.admit("resident", 50))
    await _settle()
    assert budget.waiting == ["resident", "newcomer"]
    clock.t = 10  # the newcomer has waited 9 s > 5 s
    assert budget.waiting == ["newcomer", "resident"]
    await budget.release("blocker")
    await asyncio.wait_for(asyncio.gather(newcomer, resident), 1)
    assert budget.granted[-2:] == ["newcomer", "resident"]


async def test_one_larger_than_the_capacity_is_let_in_alone() -> None:
    budget = KvBudget(100)
    await budget.admit("a", 10)
    huge = asyncio.create_task(budget.admit("huge", 150))
    await _settle()
    assert not huge.done()
    await budget.release("a")
    grant = await asyncio.wait_for(huge, 1)
    assert grant.over_capacity and budget.held == {"huge": 150}


async def test_a_cancelled_waiter_leaves_the_queue_and_holds_nothing() -> None:
    budget = KvBudget(100)
    await budget.admit("a", 80)
    waiter = asyncio.create_task(budget.admit("b", 50))
    await _settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert budget.waiting == [] and budget.held == {"a": 80}


@pytest.mark.parametrize("capacity", [1000, 3000])
@pytest.mark.parametrize("seed", range(4))
async def test_many_conversations_never_hold_more_than_the_capacity(seed: int, capacity: int) -> None:
    """Random Turns of 12 conversations over a budget that holds a few of them: the held tokens stay within the
    capacity at every grant (but for one that alone outgrew it), everyone finishes, and Turns that did not fit waited.
    With the 3000-token budget no conversation outgrows it (at most 600 + 20 x 60 tokens), and it is never passed."""
    budget = KvBudget(capacity)
    peaks: list[int] = []

    async def yields(rng: random.Random) -> None:
        for _ in range(rng.randint(0, 6)):
            await asyncio.sleep(0)

    async def conversation(key: str) -> int:
        rng = random.Random(f"{seed}-{key}")  # one stream per conversation: the interleaving is deterministic
        waited = 0
        size = rng.randint(300, 600)
        for _ in range(rng.randint(2, 5)):  # Turns
            for _ in range(rng.randint(1, 4)):  # requests within a Turn, each longer
                size += rng.randint(10, 60)
                grant = await budget.admit(key, size)
                waited += grant.waited
                peaks.append(budget.used)
                # within the capacity, or one conversation alone that outgrew it (let in alone, said so)
                assert budget.used <= budget.capacity or (len(budget.held) == 1 and grant.over_capacity)
                await yields(rng)  # the model answers, a Working tool runs
            await budget.release(key)
            await yields(rng)  # at a Gate or an Effect: holds nothing
        return waited

    waits = await asyncio.wait_for(asyncio.gather(*(conversation(f"c{i}") for i in range(12))), 30)
    assert max(peaks) <= budget.high_water
    if capacity == 3000:
        assert budget.high_water <= capacity
    assert sum(waits) > 0  # the demand was larger than the budget: some Turns did wait
    assert budget.held == {} and budget.waiting == []


def test_prompt_need_counts_what_was_appended_at_the_last_requests_bytes_per_token() -> None:
    assert prompt_need(1000, 40, 999_999, 256) == 1296  # no bytes of the last request known: its usage only
    assert prompt_need(None, None, 4000, 256) == 1256
    # 600 bytes appended (the answer as kept, the tool results) at the last request's 3 bytes a token
    assert prompt_need(1000, 40, 3600, 256, last_bytes=3000) == 1000 + 200 + 256
    assert prompt_need(1000, 40, 3000, 256, last_bytes=3000) == 1256


async def test_a_release_withdraws_the_same_conversations_waiting_ask() -> None:
    """Over Ray a Harness stopped mid-wait cannot withdraw its ask; the release sent for it does, and a waiter
    behind it goes ahead instead of a hold nobody will ever give back."""
    budget = KvBudget(100)
    await budget.admit("a", 80)
    stopped = asyncio.create_task(budget.admit("b", 50))
    behind = asyncio.create_task(budget.admit("c", 50))
    await _settle()
    assert budget.waiting == ["b", "c"]
    await budget.release("b")
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(stopped, 1)
    assert budget.waiting == ["c"] and budget.held == {"a": 80}
    await budget.release("a")
    assert (await asyncio.wait_for(behind, 1)).waited and budget.held == {"c": 50}
    stats = budget.stats()
    assert stats.grants == 2 and stats.waits == 1 and stats.high_water_tokens == 80 and stats.peak_holders == 1
