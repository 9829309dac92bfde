"""How the registry's one door for starts orders its work: a batch is journaled and answered before any of its
activations begins, and activations wait while other start batches are still being written (at most
`JOURNALING_FIRST_S`). Driven in-process (no Ray) with stand-in hosts, on a real SQLite store."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ray_stand_ins import Remote

from jr2ray.run import admission
from jr2ray.run import registry as regmod
from jr2ray.run.models import Detached
from jr2ray.run.run_spec import pool_key, run_spec

RegistryClass: Any = regmod.RunRegistry.__ray_metadata__.modified_class.__mro__[1]  # the class under @ray.remote


class _Host:
    def __init__(self) -> None:
        self.adopt = Remote({})
        self.detach = Remote(Detached())


def _spec(i: int) -> dict[str, Any]:
    return {"workflow": "notes", "digest": "d0", "input": {"changes": f"change {i}"}, "env": {}, "launcher": None}


def _registry(tmp_path: Path, max_live: int, hosts: int) -> Any:
    """An in-process registry (no Ray to recover hosts from) with `hosts` pooled stand-in hosts."""
    reg = RegistryClass(str(tmp_path / "runs"), idle_s=5.0, max_live=max_live)
    reg._requeued = True
    key = pool_key(_spec(0))
    for i in range(hosts):
        reg.pool.idle[key].append((f"h{i}", _Host()))
        reg.pool.keys[f"h{i}"] = key
    return reg


@pytest.fixture
def registry(tmp_path: Path) -> Any:
    return _registry(tmp_path, max_live=50, hosts=20)  # enough pooled hosts that no start needs a new one


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


def test_a_batch_is_answered_before_any_of_its_activations_begins(registry: Any) -> None:
    async def go() -> None:
        ids = [uuid.uuid4().hex[:12] for _ in range(5)]
        answered = await registry.start_many([(rid, _spec(i)) for i, rid in enumerate(ids)])
        assert answered == 5
        assert not registry.live and not registry.activating, "no activation ran before the answer"
        listed = {r.id: r.status for r in registry.store.list_runs()}
        assert all(listed.get(rid) == "queued" for rid in ids), "journaled and listed when answered"
        await _settle()
        assert set(registry.live) == set(ids), "each went live right after the answer"

    asyncio.run(go())


@pytest.fixture
def release(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """A batch whose input says `slow` is written only once the returned event is set."""
    gate = threading.Event()
    real = admission.enqueue_many

    def enqueue_many(store: Any, starts: list[tuple[str, dict[str, Any]]]) -> None:
        if starts[0][1]["input"]["changes"].startswith("slow"):
            assert gate.wait(10)
        real(store, starts)

    monkeypatch.setattr(admission, "enqueue_many", enqueue_many)
    return gate


def test_activations_wait_while_another_batch_is_journaled(registry: Any, release: threading.Event) -> None:
    async def go() -> None:
        slow = [(uuid.uuid4().hex[:12], {**_spec(0), "input": {"changes": "slow"}})]
        fast = [(uuid.uuid4().hex[:12], _spec(i)) for i in range(3)]
        writing = asyncio.ensure_future(registry.start_many(slow))
        await _settle()
        assert await registry.start_many(fast) == 3  # answered while the slow batch is still being written
        await asyncio.sleep(0.2)
        assert not registry.live, "no activation while a batch is being journaled"
        release.set()
        assert await writing == 1
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(registry.live) == 4:
                break
        assert set(registry.live) == {rid for rid, _ in slow + fast}

    asyncio.run(go())


def test_a_long_write_holds_activations_back_no_longer_than_the_cap(registry: Any, release: threading.Event,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regmod, "JOURNALING_FIRST_S", 0.3)

    async def go() -> None:
        writing = asyncio.ensure_future(registry.start_many([(uuid.uuid4().hex[:12],
                                                               {**_spec(0), "input": {"changes": "slow"}})]))
        await _settle()
        fast = [uuid.uuid4().hex[:12] for _ in range(2)]
        await registry.start_many([(rid, _spec(i)) for i, rid in enumerate(fast)])
        for _ in range(200):
            await asyncio.sleep(0.01)
            if set(registry.live) == set(fast):
                break
        assert set(registry.live) == set(fast), "the cap let them go live while the other batch was written"
        release.set()
        await writing

    asyncio.run(go())


def test_one_start_still_says_whether_it_took_a_slot(tmp_path: Path) -> None:
    reg = _registry(tmp_path, max_live=1, hosts=2)

    async def go() -> None:
        assert await reg.start(uuid.uuid4().hex[:12], _spec(0)) == "live"
        assert await reg.start(uuid.uuid4().hex[:12], _spec(1)) == "queued"

    asyncio.run(go())


def test_one_start_takes_its_slot_or_its_place_even_while_a_batch_is_written(tmp_path: Path,
                                                                             release: threading.Event) -> None:
    """A single start's answer is exact: it tries its slot at once rather than waiting behind a batch's write, so
    `queued` is said when the slots are full and `live` when one is free."""
    reg = _registry(tmp_path, max_live=2, hosts=3)

    async def go() -> None:
        assert await reg.start(uuid.uuid4().hex[:12], _spec(0)) == "live"
        writing = asyncio.ensure_future(reg.start_many([(uuid.uuid4().hex[:12],
                                                          {**_spec(9), "input": {"changes": "slow"}})]))
        await _settle()
        second = uuid.uuid4().hex[:12]
        assert await reg.start(second, _spec(1)) == "live"
        assert second in reg.live or second in reg.activating
        third = uuid.uuid4().hex[:12]
        assert await reg.start(third, _spec(2)) == "queued"
        assert third in reg.queued
        release.set()
        assert await writing == 1

    asyncio.run(go())


def test_watch_many_answers_at_once_while_a_host_adopts_one_of_its_runs(registry: Any) -> None:
    """A run whose host is still adopting it holds its lock; `watch_many` answers None for it (the driver asks it
    alone) rather than waiting there, so the batch's other runs are answered, or noted, at once."""
    async def go() -> None:
        adopted = asyncio.Event()

        async def slow_adopt() -> dict[str, Any]:
            await adopted.wait()
            return {}

        other = uuid.uuid4().hex[:12]
        await registry.start_many([(other, _spec(0))])
        await _settle()
        assert other in registry.live
        slow_host = _Host()
        slow_host.adopt = SimpleNamespace(remote=lambda *_a: slow_adopt())  # type: ignore[assignment]
        key = pool_key(_spec(0))
        registry.pool.idle[key].append(("slow", slow_host))  # the warmest: the next adoption takes it
        registry.pool.keys["slow"] = key
        slow = uuid.uuid4().hex[:12]
        await registry.start_many([(slow, _spec(1))])
        await _settle()
        assert registry.locks.busy(slow) and slow not in registry.live
        unseen = uuid.uuid4().hex[:12]
        got = await asyncio.wait_for(registry.watch_many([slow, other, unseen], "wake-1"), 1.0)
        assert got == {slow: None, other: registry.live[other][1]}
        assert registry.board.watched(unseen) and not registry.board.watched(slow)
        adopted.set()
        assert await asyncio.wait_for(registry.watch(slow, "wake-1"), 1.0) == [slow_host]

    asyncio.run(go())


INSTANCE_ENV = {"JR2RAY_WORKFLOWS": "workflows.notes", "JR2RAY_TELEMETRY": "off"}


def test_a_start_with_no_env_on_an_instance_gets_its_env_and_takes_the_hosts_up_warmed(tmp_path: Path) -> None:
    """Once `up` has named its env (`warm(..., instance=True)`), a script's start with no env of its own is
    journaled with that env and goes live on a host of that pool; one with an env of its own keeps it."""
    reg = _registry(tmp_path, max_live=5, hosts=0)
    key = pool_key({"env": INSTANCE_ENV, "launcher": None})
    own_key = pool_key({"env": {"JR2RAY_TELEMETRY": "on"}, "launcher": None})
    for hid, k in (("h0", key), ("h1", key), ("o0", own_key)):  # no host starts: no Ray here
        reg.pool.idle[k].append((hid, _Host()))
        reg.pool.keys[hid] = k

    async def go() -> None:
        assert await reg.warm(0, INSTANCE_ENV, None, True) == 2
        bare, own = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
        await reg.start_many([(bare, _spec(0)), (own, {**_spec(1), "env": {"JR2RAY_TELEMETRY": "on"}})])
        await _settle()
        assert bare in reg.live and reg.live[bare][0] in ("h0", "h1")
        assert reg.notes[bare][0] == key
        assert reg.notes[own][0] == own_key and reg.live[own][0] == "o0"
        journaled = {r.id: r for r in reg.store.list_runs()}
        assert set(journaled) == {bare, own}
        assert run_spec(reg.store, bare)["env"] == INSTANCE_ENV
        assert run_spec(reg.store, own)["env"] == {"JR2RAY_TELEMETRY": "on"}

    asyncio.run(go())
