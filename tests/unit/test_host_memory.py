"""A pooled RunHost keeps nothing of the runs it hosted once they park: the logic of the `RunHost` class is driven
in-process (no Ray instance), through adopt, a pick that waits at a Gate, and detach, for several runs in a row.

A run parked at a Gate leaves its writer's pick waiting in the host that parked it (to be re-sent to the run's next
activation). That waiting pick once held the detached engine, so a host grew by one whole engine (its interpreter,
replayed ledger, feed and closed journal) per run it had parked; these tests pin that it holds none."""

from __future__ import annotations

import asyncio
import gc
import uuid
import weakref
from pathlib import Path
from typing import Any

import pytest
from ray_stand_ins import Remote, Wired, host_in_process

from jr2ray.run import host as hostmod
from jr2ray.run.engine import RunEngine

GATE = "notes.writing.asking"



class _NextHost:
    """The run's next activation, as the re-sent pick sees it: it records the call and answers it."""

    def __init__(self) -> None:
        self.call = Remote("answered by the next activation")
        self.wire = Wired(self)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    return host_in_process(monkeypatch, tmp_path)


async def _park_at_gate(h: Any, i: int) -> tuple[str, asyncio.Task[Any], weakref.ref[Any], weakref.ref[Any]]:
    """Start a notes run on the host, send the writer's `ask` (it waits for the editor at the Gate), then detach."""
    rid = uuid.uuid4().hex[:12]
    spec = {"workflow": "notes", "input": {"changes": f"change {i}"}, "env": {}, "launcher": None, "create": True}
    await h.adopt(rid, h.store.location, spec)
    engine, journal = weakref.ref(h.engine), weakref.ref(h.engine.journal)
    pick = asyncio.ensure_future(h.call(rid, "pick", ["writer", "ask", {"question": "Which first?"}, f"ask-{rid}"]))
    for _ in range(20):  # until the pick is admitted and waits for Rest (the Gate is open)
        await asyncio.sleep(0)
        if h.engine.gates():
            break
    assert not pick.done()
    assert await h.detach(rid), "a run waiting at its Gate with nothing running parks"
    for _ in range(5):  # the waiting pick sees the run go and asks the registry for its next activation
        await asyncio.sleep(0)
    assert rid in h._registry.next_activation.waiting
    return rid, pick, engine, journal


def test_a_parked_runs_waiting_pick_holds_no_engine_or_journal(host: Any) -> None:
    async def go() -> None:
        parked = [await _park_at_gate(host, i) for i in range(5)]
        gc.collect()
        for rid, pick, engine, journal in parked:
            assert not pick.done(), "the pick still waits for the run's next activation"
            assert engine() is None, f"run {rid}: its detached RunEngine is still reachable"
            assert journal() is None, f"run {rid}: its closed journal is still reachable"
        assert not [o for o in gc.get_objects() if isinstance(o, RunEngine)]
        for rid, pick, _e, _j in parked:  # each waiting pick still reaches the run's next activation, unchanged
            nxt = _NextHost()
            host._registry.next_activation.waiting[rid].set_result([nxt])
            assert await pick == "answered by the next activation"
            assert nxt.call.calls == [(rid, "pick", ["writer", "ask", {"question": "Which first?"}, f"ask-{rid}"])]
        if host._watch is not None:
            host._watch.cancel()

    asyncio.run(go())


def test_the_hosted_run_is_the_only_engine_a_host_holds(host: Any) -> None:
    """After several runs parked, adopting the next leaves exactly one engine reachable: the hosted one."""
    async def go() -> None:
        for i in range(3):
            await _park_at_gate(host, i)
        spec = {"workflow": "notes", "input": {"changes": "the last"}, "env": {}, "launcher": None, "create": True}
        await host.adopt(uuid.uuid4().hex[:12], host.store.location, spec)
        gc.collect()
        assert [o for o in gc.get_objects() if isinstance(o, RunEngine)] == [host.engine]
        if host._watch is not None:
            host._watch.cancel()

    asyncio.run(go())


def test_a_host_trims_only_after_a_quiet_spell_with_no_run_taken(host: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host in a burst of wakes takes its next run within milliseconds: the trim its last park scheduled must not
    run then (its collection and heap walk cost a third of a wake's CPU). One with no run taken since trims."""
    trims: list[int] = []
    monkeypatch.setattr(host._trimmer, "due", lambda: True)
    monkeypatch.setattr(host._trimmer, "trim", lambda: trims.append(1) or True)
    scheduled: list[tuple[float, Any, tuple[Any, ...]]] = []

    async def go() -> None:
        loop = asyncio.get_running_loop()
        real = loop.call_later

        def call_later(delay: float, fn: Any, *args: Any) -> Any:
            if getattr(fn, "__name__", "") != "_trim_if_idle":
                return real(delay, fn, *args)
            scheduled.append((delay, fn, args))
            return None

        monkeypatch.setattr(loop, "call_later", call_later)
        parked = [await _park_at_gate(host, 0)]
        (delay, fn, args), = scheduled
        assert delay == hostmod.TRIM_AFTER_S
        parked.append(await _park_at_gate(host, 1))  # the next run taken (and parked) before that check comes due
        for rid, pick, _e, _j in parked:  # their waiting picks go on to the runs' next activations
            host._registry.next_activation.waiting[rid].set_result([_NextHost()])
            await pick
        fn(*args)
        assert trims == [], "a run was taken since that park: the burst goes on, no trim"
        _d, fn2, args2 = scheduled[-1]
        fn2(*args2)
        assert trims == [1], "no run taken since the last park: the host trims"
        if host._watch is not None:
            host._watch.cancel()

    asyncio.run(go())


def test_a_trim_too_soon_after_the_last_one_comes_back_when_due(host: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two bursts a few seconds apart: the quiet spell after the second is checked before a trim is due again. The
    check comes back when one is, instead of leaving that burst's memory until the host's next park."""
    monkeypatch.setattr(host._trimmer, "due", lambda: False)
    monkeypatch.setattr(host._trimmer, "too_soon", lambda: 3.0)
    scheduled: list[tuple[float, Any, tuple[Any, ...]]] = []

    async def go() -> None:
        loop = asyncio.get_running_loop()
        monkeypatch.setattr(loop, "call_later", lambda delay, fn, *args: scheduled.append((delay, fn, args)))
        host._trim_if_idle(host.adoptions)
        assert [(d, a) for d, _f, a in scheduled] == [(3.0, (host.adoptions,))]
        scheduled.clear()
        host._trim_if_idle(host.adoptions - 1)  # a run was taken since: the burst goes on, nothing is scheduled
        assert scheduled == []

    asyncio.run(go())
