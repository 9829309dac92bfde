"""Several live runs in one pooled host process (`runs_per_host`), on a real local Ray.

The registry deals in slots; a host process holds `runs_per_host` of them and routes each call by the run it names.
These tests check that runs sharing a process stay apart: each keeps its own journal and answers, a Harness reaches
its own run through the process, and a process that dies takes none of its runs with it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import stats as _stats
from ray_helpers import until as _until
from ray_helpers import virtual_client

import jr2ray
from conformance_fakes import FakeModelServer, calls
from jr2ray.run.store import LedgerKind
from jr2ray.settings import load_settings
from jr2ray.testing import ScriptedAgent

pytestmark = pytest.mark.ray
PER_HOST = 3
SLOTS = 6
GATE = "notes.writing.asking"
# Runs at Rest stay live through each test (a finished one parks at once): what is killed or counted is live.
SETTINGS: dict[str, Any] = {"idle_deactivate_s": 60.0, "max_live_runs": SLOTS, "runs_per_host": PER_HOST}


@pytest.fixture(scope="module")
def client(ray_home: Path) -> Iterator[Any]:
    with virtual_client(ray_home, "perhost", **SETTINGS) as c:
        yield c


def _admissions(client: Any, run_id: str) -> list[tuple[str, Any]]:
    """(name, args) of each pick and Gate event the run's journal took, in order."""
    j = client.store.open(run_id)
    try:
        return [(e.data["name"], e.data.get("args")) for e in j.ledger(LedgerKind.ADMISSION)]
    finally:
        j.close()


def _process(host: Any) -> str:
    return str(host._actor_id.hex())


def test_a_host_process_that_dies_takes_none_of_its_runs(client: Any) -> None:
    """Three live runs in one process, which is killed twice. With no call in flight, the restarted process tells
    the registry, which wakes each of its runs from its journal before anyone asks. With each writer's pick waiting
    at its Gate, each pick fails (it may have landed) and is sent again with its delivery id, as with one run a
    process: each ask is taken once, each reply lands once. First in the module: the pool is empty, so the three
    activations share the one process start."""
    import ray

    runs = client.start_many("notes", [{"changes": f"fix: kill {i}"} for i in range(PER_HOST)])
    _until("the three runs to be live", lambda: {r.id for r in runs} <= set(_stats(client)["live"]))
    hosts = [r.host_now() for r in runs]  # a lookup: no call of the driver stays open on the host
    assert all(h is not None for h in hosts) and len({_process(h) for h in hosts}) == 1, "one process holds them"
    pids = {r.pid() for r in runs}
    assert len(pids) == 1, "the runs of one process answer with its pid"
    woken = _stats(client)["activations"]
    os.kill(pids.pop(), signal.SIGKILL)
    asyncio.run(_restarted(hosts[0]))
    _until("the registry to wake the killed process's runs", lambda: _stats(client)["activations"] >= woken + PER_HOST)
    assert {r.presence() for r in runs} == {"live"}

    asks = [r.pick_async("writer", "ask", {"question": f"which {r.id}?"}, f"ask-{r.id}") for r in runs]
    asyncio.run(client.until_gates(runs, GATE, timeout=120))
    pids = {r.pid() for r in runs}
    assert len(pids) == 1, "woken into the one process again (its slots were the pool's only ones)"
    os.kill(pids.pop(), signal.SIGKILL)
    for a in asks:
        with pytest.raises(ray.exceptions.RayActorError):
            a.result(60)
    asyncio.run(_restarted(hosts[0]))
    again = [r.pick_async("writer", "ask", {"question": f"which {r.id}?"}, f"ask-{r.id}") for r in runs]
    for r in runs:
        r.send(GATE, "reply", {"text": f"for {r.id}"}, delivery_id=f"k-{r.id}")
    for r, a in zip(runs, again, strict=True):
        assert a.result(60).answer == f"The editor replied: for {r.id}"
        assert r.pick("writer", "done", {"notes": "# Notes"}).delivered
    for r in runs:
        assert r.wait(60).status == "done"
        got = _admissions(client, r.id)
        assert [name for name, _a in got] == ["ask", "reply", "done"]
        assert got[1][1] == {"text": f"for {r.id}"}
    _until("every slot to be free again", lambda: not _stats(client)["live"], timeout_s=60)


def test_runs_live_at_once_share_processes_and_each_keeps_its_own_journal(client: Any) -> None:
    """Six runs live at once fill two processes of three slots; each is asked, answered and finished through the
    driver's public calls, and each journal holds its own ask, reply and done, once."""
    runs = client.start_many("notes", [{"changes": f"fix: {i}"} for i in range(SLOTS)])
    writer = ScriptedAgent("writer", [("ask", {"question": "Which?"}), ("done", {"notes": "# Notes"})])

    async def drive() -> tuple[set[str], list[Any], list[Any]]:
        played = await jr2ray.create_tasks(writer.play_async(r) for r in runs)
        await client.until_gates(runs, GATE, timeout=120)
        hosts = await asyncio.gather(*(r.host_now_async() for r in runs))  # all live, at Rest at their Gates
        assert all(h is not None for h in hosts)
        sent = await client.send_many_async((r, GATE, "reply", {"text": f"for {r.id}"}) for r in runs)
        _done, unfinished = await client.wait_async(runs, timeout=120)
        assert not unfinished
        return {_process(h) for h in hosts}, sent, [await p for p in played]

    processes, sent, receipts = asyncio.run(drive())
    assert all(s.ok for s in sent) and all(len(rs) == 2 for rs in receipts)
    assert len(processes) <= SLOTS // PER_HOST, f"{len(processes)} host processes for {SLOTS} live runs"
    for r in runs:  # each run's own reply reached its own journal, once
        got = _admissions(client, r.id)
        assert [name for name, _a in got] == ["ask", "reply", "done"]
        assert got[1][1] == {"text": f"for {r.id}"}
        assert r.status().output == {"notes": "# Notes"}


async def _restarted(host: Any) -> None:
    """Once Ray has the killed host process up again (the same actor, its slots empty, named as before)."""
    for _ in range(600):
        try:
            infos = await asyncio.wait_for(host.infos.remote(), 5)
        except Exception:  # noqa: BLE001 - still restarting
            await asyncio.sleep(0.1)
            continue
        assert len(infos) == PER_HOST
        return
    raise AssertionError("the killed host process did not come back")


def test_a_harness_reaches_its_own_run_in_a_shared_process(client: Any, ray_home: Path) -> None:
    """Two Harness-driven runs live in one process: each Harness's picks and its telemetry go to its own run,
    named in the call, not to whichever run the process holds."""
    with FakeModelServer() as model:
        ask = calls(("ask", {"question": "Which change matters most?"}))
        model.push(ask, ask, calls(("done", {"notes": "# Notes"})), calls(("done", {"notes": "# Notes"})))
        c = jr2ray.connect(store=client.store.directory, launcher="jr2ray.harness.launcher:RayTurnLauncher",
                           settings=load_settings(**SETTINGS), virtual=True)
        env = {"JR2RAY_NOTES_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url}
        runs = []
        for i in range(2):  # one after the other: the second takes a free slot of the first's new process
            runs.append(r := c.start("notes", {"changes": f"fix: harness {i}"}, env=env))
            _until("the writer to ask", lambda r=r: r.gates(), timeout_s=120)
        hosts = [r.host_now() for r in runs]
        assert all(h is not None for h in hosts) and len({_process(h) for h in hosts}) == 1, \
            "both runs in one process"
        for r in runs:
            (gate,) = r.gates()
            r.send(gate.id, "reply", {"text": "The crash fix."})
        for r in runs:
            assert r.wait(120).status == "done"
            rows = r.telemetry()
            assert len(rows) == 2 and all(row["run_id"] == r.id for row in rows)
        assert len(model.requests) == 4
