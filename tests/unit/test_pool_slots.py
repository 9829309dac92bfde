"""The host pool deals in slots when a host process holds several runs (`runs_per_host`), in-process (no Ray)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from jr2ray.run import pool as poolmod
from jr2ray.run.pool import HostPool

PER_HOST = 3


class _Answer:
    def __init__(self, value: Any, calls: list[tuple[Any, ...]] | None = None) -> None:
        self.value, self.calls = value, calls if calls is not None else []

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        self.calls.append(args)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(self.value)
        return fut


class _Process:
    """A host process stand-in with `PER_HOST` slots."""

    made = 0

    def __init__(self) -> None:
        _Process.made += 1
        me = f"p{_Process.made}"
        self._actor_id = SimpleNamespace(hex=lambda: me)
        self.infos = _Answer([{"hid": f"{me}.{i}"} for i in range(PER_HOST)])
        self.retire = _Answer(True)
        self.abandon = _Answer(None)


def _pool(monkeypatch: pytest.MonkeyPatch, killed: list[Any]) -> HostPool:
    _Process.made = 0
    pool = HostPool("reg", "store", "head", 5.0, 0.25, lambda hid: False, per_host=PER_HOST)
    monkeypatch.setattr(pool, "new_host", _Process)
    monkeypatch.setattr(poolmod.ray, "kill", lambda h, no_restart=True: killed.append(h))
    return pool


def test_a_burst_of_wakes_starts_one_process_for_each_few_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[Any] = []
    pool = _pool(monkeypatch, killed)

    async def go() -> list[tuple[str, Any]]:
        return list(await asyncio.gather(*(pool.take("") for _ in range(4))))

    got = asyncio.run(go())
    assert _Process.made == 2 and len({h for h, _p in got}) == 4  # four wakes, two processes, no slot twice
    assert pool.count() == 2 * PER_HOST - 4


def test_warming_in_small_calls_counts_the_slots_a_process_brings(monkeypatch: pytest.MonkeyPatch) -> None:
    """`up` warms two slots a call: 30 slots at three a process are 10 processes, not 15."""
    pool = _pool(monkeypatch, [])

    async def go() -> int:
        for _ in range(15):
            await pool.warm(2, "")
        return pool.count()

    assert asyncio.run(go()) == 30 and _Process.made == 10


def test_a_process_ends_with_its_last_slot_and_not_before(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[Any] = []
    pool = _pool(monkeypatch, killed)

    async def go() -> None:
        slots = [await pool.take("") for _ in range(PER_HOST)]
        process = slots[0][1]
        for hid, host in slots[:-1]:
            pool.end(hid, host)
        assert killed == [] and [c[0] for c in process.abandon.calls] == [h for h, _p in slots[:-1]]
        pool.end(*slots[-1])
        assert killed == [process]

    asyncio.run(go())
