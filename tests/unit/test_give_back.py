"""`give_back`: memory a burst freed goes back to the system, where glibc would keep it below a live allocation."""

from __future__ import annotations

import time

import psutil

from jr2ray.run.give_back import Trimmer, give_back


def test_freed_heap_below_a_live_allocation_goes_back() -> None:
    me = psutil.Process()
    burst = [bytearray(4096) for _ in range(50_000)]  # ~200 MB of malloc'd blocks, as a burst of calls leaves
    pin = bytearray(4096)  # allocated last: it keeps the heap's top, so free() alone cannot shrink it
    del burst
    held = me.memory_info().rss
    assert give_back()
    back = held - me.memory_info().rss
    assert back > 100 * 2**20, f"only {back / 2**20:.0f} MB went back"
    del pin


def test_the_trimmer_waits_for_enough_work_and_time() -> None:
    t = Trimmer(every_s=3600.0, after=3)
    t.note(2)
    assert not t.due()
    t.note()
    t.last = time.monotonic() - 7200  # the last trim was two hours ago
    assert t.due()
    t.trim()
    t.note(5)
    assert not t.due(), "at most once per every_s"


def test_freezing_the_setup_happens_only_in_a_ray_worker() -> None:
    """Outside a Ray worker (this test process, which builds actor classes in-process) nothing is frozen."""
    import gc

    import ray

    from jr2ray.run.give_back import freeze_setup

    was_up = ray.is_initialized()
    before = gc.get_freeze_count()
    assert freeze_setup() is False
    assert gc.get_freeze_count() == before
    assert ray.is_initialized() == was_up, "asking whether this is a Ray worker started a Ray instance"


def test_a_trim_that_comes_too_soon_says_when_one_is_due() -> None:
    t = Trimmer(every_s=60.0, after=2)
    t.note()
    assert t.too_soon() is None, "not enough work yet: nothing to wait for"
    t.note()
    t.last = time.monotonic() - 50  # the last trim was 50 s ago
    left = t.too_soon()
    assert left is not None and 9 < left <= 10
    t.last = time.monotonic() - 61
    assert t.too_soon() is None and t.due()
