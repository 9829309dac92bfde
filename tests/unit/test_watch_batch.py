"""A driver that starts watching many parked or queued runs at once notes them with the registry in one call per
batch, not one Ray call per run; each watcher gets its own run's answer, and a failed call reaches every watcher."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from jr2ray.run.watch_batch import WATCH_BATCH, WatchBatch


class _Registry:
    """Stands in for the registry actor: `watch_many.remote(ids, watcher)` is an awaitable, as on Ray."""

    def __init__(self, live: dict[str, str], fail: bool = False) -> None:
        self.live = live
        self.fail = fail
        self.calls: list[tuple[list[str], str]] = []
        self.watch_many = self

    def remote(self, run_ids: list[str], watcher: str) -> Any:
        self.calls.append((list(run_ids), watcher))

        async def answer() -> dict[str, str]:
            if self.fail:
                raise ConnectionError("registry restarting")
            return {r: self.live[r] for r in run_ids if r in self.live}

        return answer()


def test_many_watches_in_one_moment_are_one_call_per_batch() -> None:
    n = 2 * WATCH_BATCH + 5
    registry = _Registry(live={"run-3": "host-a", "run-7": "host-b"})

    async def watch_all() -> list[list[Any]]:
        batch = WatchBatch(registry, "wake-1")
        futs = [batch.watch(f"run-{i}") for i in range(n)]
        again = batch.watch("run-3")  # a second waiter on one run shares its answer
        got = await asyncio.gather(*futs)
        assert await again == ["host-a"]
        return list(got)

    got = asyncio.run(watch_all())
    assert [len(ids) for ids, _ in registry.calls] == [WATCH_BATCH, WATCH_BATCH, 5]
    assert {w for _, w in registry.calls} == {"wake-1"}
    assert sorted(r for ids, _ in registry.calls for r in ids) == sorted(f"run-{i}" for i in range(n))
    assert got[3] == ["host-a"] and got[7] == ["host-b"]
    assert all(g == [] for i, g in enumerate(got) if i not in (3, 7))


def test_a_failed_batch_reaches_every_watcher() -> None:
    registry = _Registry(live={}, fail=True)

    async def watch_two() -> None:
        batch = WatchBatch(registry, "wake-2")
        a, b = batch.watch("run-a"), batch.watch("run-b")
        for fut in (a, b):
            with pytest.raises(ConnectionError, match="registry restarting"):
                await fut

    asyncio.run(watch_two())
    assert len(registry.calls) == 1


def test_a_run_being_adopted_is_asked_alone_and_holds_up_no_other_watcher() -> None:
    """The registry answers None for a run whose lock a host's adoption holds: that run is asked again alone (its
    answer comes once the adoption ends), while every other watcher of the batch has its answer at once."""
    adopted = asyncio.Event()

    class _Busy(_Registry):
        def __init__(self) -> None:
            super().__init__(live={"run-live": "host-a"})
            self.watch = SimpleNamespace(remote=self.alone)
            self.alone_calls: list[tuple[str, str]] = []

        def remote(self, run_ids: list[str], watcher: str) -> Any:
            self.calls.append((list(run_ids), watcher))

            async def answer() -> dict[str, Any]:
                return {"run-live": "host-a", "run-adopting": None}

            return answer()

        def alone(self, run_id: str, watcher: str) -> Any:
            self.alone_calls.append((run_id, watcher))

            async def answer() -> list[Any]:
                await adopted.wait()
                return ["host-b"]

            return answer()

    registry = _Busy()

    async def watch() -> None:
        batch = WatchBatch(registry, "wake-3")
        busy, live, parked = batch.watch("run-adopting"), batch.watch("run-live"), batch.watch("run-parked")
        assert await live == ["host-a"] and await parked == []
        assert not busy.done(), "the adopting run's answer waits for its adoption alone"
        adopted.set()
        assert await busy == ["host-b"]

    asyncio.run(watch())
    assert len(registry.calls) == 1
    assert registry.alone_calls == [("run-adopting", "wake-3")]
