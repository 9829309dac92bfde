"""What a parked run costs the registry: the logic of the `RunRegistry` class, driven in-process (no Ray instance)
with stand-in hosts, through start, park and wake. A parked run keeps one shared note (its pool key and its start's
secrets) and nothing else: no lock, no env dict of its own, no waiter; and its secrets still reach every wake."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ray_stand_ins import Remote

from jr2ray.run import registry as regmod
from jr2ray.run.models import Detached
from jr2ray.run.run_spec import pool_key

RegistryClass: Any = regmod.RunRegistry.__ray_metadata__.modified_class.__mro__[1]  # the class under @ray.remote
START_ENV = {"JR2RAY_NOTES_DRIVER": "external", "OPENAI_API_KEY": "sk-not-journaled"}



class _Host:
    """A pooled host stand-in: it records what it was asked to adopt and always agrees to detach."""

    def __init__(self) -> None:
        self.adopt = Remote({})
        self.detach = Remote(Detached())


@pytest.fixture
def registry(tmp_path: Path) -> Any:
    reg = RegistryClass(str(tmp_path / "runs"), idle_s=5.0, max_live=2)
    reg._requeued = True  # no Ray to recover hosts from
    return reg


def _spec(i: int, env: dict[str, str]) -> dict[str, Any]:
    return {"workflow": "notes", "digest": "d0", "input": {"changes": f"change {i}"}, "env": dict(env),
            "launcher": None}


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_parked_runs_keep_one_shared_note_and_no_lock(registry: Any) -> None:
    async def go() -> None:
        host = _Host()
        key = pool_key(_spec(0, START_ENV))
        registry.pool.idle[key].append(("h1", host))
        registry.pool.keys["h1"] = key
        ids = [uuid.uuid4().hex[:12] for _ in range(20)]
        for i, rid in enumerate(ids):
            await registry.start(rid, _spec(i, START_ENV))
            await _settle()
            assert rid in registry.live
            assert await registry.deactivate(rid, "h1")
        assert not registry.live and len(registry.locks) == 0
        assert not registry.waiters and not registry.early.offers and not registry.activating and not registry.queued
        notes = {id(registry.notes[r]) for r in ids}
        assert len(notes) == 1, "runs started alike share one note"
        assert registry.notes[ids[0]] == (key, (("OPENAI_API_KEY", "sk-not-journaled"),))

    asyncio.run(go())


def test_a_parked_runs_secrets_reach_its_wake_and_its_journaled_env_beats_the_instances(registry: Any) -> None:
    async def go() -> None:
        host = _Host()
        key = pool_key(_spec(0, START_ENV))
        registry.pool.idle[key].append(("h1", host))
        registry.pool.keys["h1"] = key
        registry.env = {"JR2RAY_NOTES_DRIVER": "harness", "INSTANCE_ONLY": "1"}
        rid = uuid.uuid4().hex[:12]
        await registry.start(rid, _spec(0, START_ENV))
        await _settle()
        assert await registry.deactivate(rid, "h1")
        (got,) = await registry.activate(rid)  # the wake: parked, adopted again from its journal
        assert got is host
        for call in host.adopt.calls:  # the start's adopt and the wake's: the same env layers each time
            _rid, _store, spec, env, under, _watched, first, hid = call
            assert hid == "h1"  # the slot the pool handed out (a host process may hold several)
            assert first is None  # nothing rode with these activations
            assert spec is None  # the host reads the journal (the journaled env: the start's, without secrets)
            assert env == {"OPENAI_API_KEY": "sk-not-journaled"}
            assert under == registry.env  # below the journaled env: the start's JR2RAY_NOTES_DRIVER wins
        assert len(host.adopt.calls) == 2

    asyncio.run(go())


def test_a_waiting_caller_keeps_the_runs_lock_until_it_is_done(registry: Any) -> None:
    async def go() -> None:
        order: list[str] = []

        async def holder(name: str, hold: asyncio.Event) -> None:
            async with registry.locks("r1"):
                order.append(f"{name} in")
                await hold.wait()
                order.append(f"{name} out")

        first, second = asyncio.Event(), asyncio.Event()
        a = asyncio.ensure_future(holder("a", first))
        await _settle()
        b = asyncio.ensure_future(holder("b", second))
        await _settle()
        assert order == ["a in"] and len(registry.locks) == 1
        first.set()
        await _settle()
        assert order == ["a in", "a out", "b in"], "the waiter got the same lock, not a fresh one"
        second.set()
        await asyncio.gather(a, b)
        assert len(registry.locks) == 0

    asyncio.run(go())


class _PooledHost:
    def __init__(self, quiet: bool) -> None:
        self.retire = Remote(quiet)
        self._actor_id = SimpleNamespace(hex=lambda: f"actor-{id(self)}")  # a process of one slot


def test_idle_hosts_are_trimmed_to_the_floor_and_a_busy_one_is_kept(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With `pool_idle_keep` set, hosts unused for `pool_idle_s` are ended down to the floor, longest unused first;
    one with a call still in it (a parked run's pick waiting for its wake) is never ended."""
    killed: list[Any] = []
    monkeypatch.setattr(regmod.ray, "kill", lambda h, no_restart=True: killed.append(h))

    async def go() -> None:
        reg = RegistryClass(str(tmp_path / "runs"), pool_idle_s=0.05, pool_idle_keep=1)
        busy, quiet_a, quiet_b = _PooledHost(False), _PooledHost(True), _PooledHost(True)
        for hid, h in (("busy", busy), ("a", quiet_a), ("b", quiet_b)):  # "busy" is the longest unused
            reg.pool.keys[hid] = ""
            reg.pool.put("", hid, h)
        await asyncio.sleep(0.6)
        assert killed == [quiet_a, quiet_b]
        assert reg.pool.idle[""] == [("busy", busy)] and reg.pool.trimmed == 2 and set(reg.pool.keys) == {"busy"}
        assert busy.retire.calls, "the busy host was asked, and kept"

    asyncio.run(go())


def test_the_pool_is_never_trimmed_without_a_floor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[Any] = []
    monkeypatch.setattr(regmod.ray, "kill", lambda h, no_restart=True: killed.append(h))

    async def go() -> None:
        reg = RegistryClass(str(tmp_path / "runs"), pool_idle_s=0.0)  # pool_idle_keep: the default, None
        for hid in ("a", "b"):
            reg.pool.put("", hid, _PooledHost(True))
        await asyncio.sleep(0.2)
        assert not killed and len(reg.pool.idle[""]) == 2

    asyncio.run(go())


class _SlowDetachHost(_Host):
    """A host whose detach answer is held back by the test (the window in which it no longer holds its run but
    the registry has not heard so yet)."""

    def __init__(self, actor_id: str) -> None:
        super().__init__()
        self._actor_id = SimpleNamespace(hex=lambda: actor_id)
        self.detached: asyncio.Future[Detached | None] | None = None
        self.detach = self  # type: ignore[assignment]

    def remote(self, *args: Any) -> asyncio.Future[Detached | None]:
        self.detached = asyncio.get_running_loop().create_future()
        return self.detached


async def _parking_on_a(registry: Any) -> tuple[Any, Any, str, str, asyncio.Future[bool]]:
    """A run started on host a (b idle in the pool), whose park has begun: a holds back its detach's answer."""
    a, b = _SlowDetachHost("actor-a"), _Host()
    key = pool_key(_spec(0, {}))
    registry.pool.keys.update({"a": key, "b": key})
    registry.pool.put(key, "b", b)
    registry.pool.put(key, "a", a)  # on top: the start takes it
    rid = uuid.uuid4().hex[:12]
    await registry.start(rid, _spec(0, {}))
    await _settle()
    assert registry.live[rid][0] == "a"
    parking = asyncio.ensure_future(registry.deactivate(rid, "a"))
    await _settle()
    return a, b, key, rid, parking


def test_a_call_forwarded_while_its_run_detaches_loses_no_host(registry: Any) -> None:
    """A host that has detached its run forwards a late call (`not_on` itself) before the registry has the detach's
    answer: the detach must still put the host back in the pool (once a forget in that window made it raise
    KeyError, and the host was lost, so the pool started new processes), and the call wakes the run on it."""
    async def go() -> None:
        a, b, key, rid, parking = await _parking_on_a(registry)
        forwarded = asyncio.ensure_future(registry.activate(rid, None, None, "actor-a"))
        await _settle()
        assert not forwarded.done()  # it waits for the run's lock, which the detach holds
        assert a.detached is not None
        a.detached.set_result(Detached())
        assert await parking is True
        (host,) = await forwarded  # woken again, on a pooled host: a, back on top of the pool, the warmest
        assert host is a and registry.live[rid][0] == "a"
        assert registry.pool.idle[key] == [("b", b)], "no host lost, none started"
        assert registry.slots.reserved == 0 and len(registry.live) == 1

    asyncio.run(go())


def test_a_host_is_never_pooled_twice_nor_while_it_hosts_a_live_run(registry: Any) -> None:
    """An adopt that fails on a host because it hosts a live run already, or a host given back twice, must not add a
    pool entry: two entries hand one host two runs, and every adopt that then fails on it would add another."""
    async def go() -> None:
        a, b = _Host(), _Host()
        registry.pool.put("", "a", a)
        registry.pool.put("", "a", a)
        registry.live["r1"] = ("b", b)
        registry.pool.put("", "b", b)
        assert registry.pool.idle[""] == [("a", a)] and registry.pool.refused == 2
        registry.pool.put("k", "a", a)  # warm knows its key; a first call's host scan pooled it under "" mid-warm
        assert registry.pool.idle[""] == [] and registry.pool.idle["k"] == [("a", a)]

    asyncio.run(go())


def test_a_wake_asked_while_its_run_parks_is_not_answered_with_the_host_letting_it_go(registry: Any) -> None:
    """`deactivate` holds the run's lock until its host has let the run go. A caller that only wakes the run (the
    timer service, the KV budget's grant) and asks meanwhile must not be handed that host: it would take the run
    for woken, and the wake (a timer's reminder, dropped once fired) was lost. It gets the run woken anew."""
    async def go() -> None:
        a, _b, _key, rid, parking = await _parking_on_a(registry)
        woken = asyncio.ensure_future(registry.activate(rid))  # a timer's wake, no not_on: nothing said NotHere
        await _settle()
        assert not woken.done()  # not answered with a, which is letting the run go
        assert a.detached is not None
        a.detached.set_result(Detached())
        assert await parking is True
        (host,) = await woken
        assert registry.live[rid][1] is host and len(a.adopt.calls) == 2  # adopted anew (a is the warmest again)
        assert registry.slots.reserved == 0 and len(registry.live) == 1

    asyncio.run(go())


def test_a_wake_asked_while_a_park_is_refused_gets_the_host_that_keeps_the_run(registry: Any) -> None:
    """The park waited for may not happen (the host's detach says the run may not go yet): the wake then gets the
    host that still holds the run, once the lock is free, and nothing is adopted again."""
    async def go() -> None:
        a, _b, _key, rid, parking = await _parking_on_a(registry)
        woken = asyncio.ensure_future(registry.activate(rid))
        await _settle()
        assert not woken.done() and a.detached is not None
        a.detached.set_result(None)  # it may not go yet
        assert await parking is False
        (host,) = await woken
        assert host is a and registry.live[rid][0] == "a" and len(a.adopt.calls) == 1

    asyncio.run(go())


def test_a_run_whose_host_died_leaves_no_idle_offer_behind(registry: Any) -> None:
    """The registry parks early the idle runs hosts offered it; a run forgotten with its dead host must not stay
    among them (an eviction would ask a host that no longer holds it, and the offer stayed until then)."""
    async def go() -> None:
        a = _SlowDetachHost("actor-a")
        key = pool_key(_spec(0, {}))
        registry.pool.keys["a"] = key
        registry.pool.put(key, "a", a)
        rid = uuid.uuid4().hex[:12]
        await registry.start(rid, _spec(0, {}))
        await _settle()
        await registry.idle_now(rid, "a")
        assert registry.early.offers == {rid: "a"}
        await registry.host_died(rid, "actor-a")
        assert rid not in registry.live and registry.early.offers == {}

    asyncio.run(go())
