"""Virtual runs on a real local Ray: a run's host lives only while it has work. It parks (its pooled host goes back
to the pool) and wakes from its journal on a pick, a Gate event and a cancel, with nothing lost; racing activations
get one host, and two hosts of one run never both write (the journal's lease)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_helpers import stats as _stats
from ray_helpers import until as _until
from ray_helpers import virtual_client

from jr2ray.run import RunError
from jr2ray.run.host_process import RunHost
from jr2ray.run.names import registry_name
from jr2ray.settings import load_settings

pytestmark = pytest.mark.ray
GATE = "notes.writing.asking"
IDLE_S = 0.5


@pytest.fixture(scope="module")
def vclient(ray_home: Path) -> Iterator[Any]:
    with virtual_client(ray_home, "vruns", idle_deactivate_s=IDLE_S) as c:
        yield c


def _parked(client: Any, run_id: str) -> bool:
    return run_id not in _stats(client)["live"]


def _ledger(client: Any, run_id: str, kind: str) -> list[Any]:
    j = client.store.open(run_id)
    try:
        return [e.data for e in j.ledger(kind)]
    finally:
        j.close()


def test_a_run_parks_and_wakes_on_a_pick_and_a_gate_event_with_nothing_lost(vclient: Any) -> None:
    run = vclient.start("notes", {"changes": "fix: crash"})
    assert run.surface("writer").allowed == ["ask"]
    _until("the run to park at Rest", lambda: _parked(vclient, run.id))
    before = _stats(vclient)["activations"]

    ref = run.pick_async("writer", "ask", {"question": "Which?"}, "ask-1")  # wakes it; waits for Rest
    _until("the Gate to open", lambda: run.gates())
    # It parks again at the Gate, with the pick still waiting: the pick and its progress are in the journal.
    _until("the run to park at the Gate", lambda: _parked(vclient, run.id))
    assert not ref.done()
    assert [p["delivery_id"] for p in _ledger(vclient, run.id, "admission")] == ["ask-1"]

    run.send(GATE, "reply", {"text": "The crash fix."}, "rep-1")  # a Gate event wakes it
    receipt = ref.result(60)
    assert receipt.answer == "The editor replied: The crash fix." and receipt.delivery_id == "ask-1"
    with contextlib.suppress(RunError):  # the same Gate event again, to a later activation: never applied twice
        run.send(GATE, "reply", {"text": "The crash fix."}, "rep-1")
    assert run.pick("writer", "done", {"notes": "# Notes"}).turn_complete
    assert run.wait(30).value == "published"
    assert _stats(vclient)["activations"] - before >= 2  # woken by the pick, and again by the Gate event
    _until("the finished run to deactivate", lambda: _parked(vclient, run.id))
    replies = [e for e in _ledger(vclient, run.id, "admission") if e.get("delivery_id") == "rep-1"]
    assert len(replies) == 1  # the reply counted once, though it was sent twice across activations
    assert run.status().output == {"notes": "# Notes"}


def test_cancel_wakes_a_parked_run_and_ends_it(vclient: Any) -> None:
    run = vclient.start("notes", {"changes": "fix: crash"})
    _until("the run to park", lambda: _parked(vclient, run.id))
    assert run.cancel().status == "cancelled"
    assert run.wait(10).status == "cancelled"
    _until("the cancelled run to deactivate", lambda: _parked(vclient, run.id))
    with pytest.raises(RunError):
        run.pick("writer", "ask", {"question": "too late"})


def test_racing_activations_get_one_host(vclient: Any) -> None:
    run = vclient.start("notes", {"changes": "fix: crash"})
    _until("the run to park", lambda: _parked(vclient, run.id))
    reg = vclient.registry()
    hosts = ray.get([reg.activate.remote(run.id) for _ in range(8)])
    infos = ray.get([h.info.remote() for (h,) in hosts])
    assert len({i["hid"] for i in infos}) == 1 and infos[0]["run_id"] == run.id
    run.cancel()


def test_two_hosts_of_one_run_never_both_write(vclient: Any) -> None:
    """Bypassing the registry, two hosts adopt one run: the later lease wins, the earlier one is fenced."""
    run = vclient.start("notes", {"changes": "fix: crash"})
    _until("the run to park", lambda: _parked(vclient, run.id))
    store_dir = str(vclient.store.directory)
    a, b = RunHost.remote(IDLE_S * 100, store_dir), RunHost.remote(IDLE_S * 100, store_dir)
    ia = ray.get(a.adopt.remote(run.id, store_dir))
    ib = ray.get(b.adopt.remote(run.id, store_dir))
    assert ib["epoch"] == ia["epoch"] + 1
    with contextlib.suppress(RunError):  # the stale host's first write is refused by the lease
        ray.get(a.call.remote(run.id, "pick", ["writer", "ask", {"question": "from a"}, "a-1"]), timeout=30)
    with pytest.raises(RunError, match="another activation holds the lease"):
        ray.get(a.call.remote(run.id, "pick", ["writer", "ask", {"question": "again"}, "a-2"]), timeout=30)
    assert [p["delivery_id"] for p in _ledger(vclient, run.id, "admission")] == []
    ref = b.call.remote(run.id, "pick", ["writer", "ask", {"question": "from b"}, "b-1"])
    _until("b's Gate", lambda: ray.get(b.call.remote(run.id, "gates", [])))
    assert [p["delivery_id"] for p in _ledger(vclient, run.id, "admission")] == ["b-1"]
    ray.kill(a)
    ray.kill(b)
    del ref


DEPLOY_ENV = {"JR2RAY_DEPLOY_DRIVER": "external"}


def _deploy_log(run: Any) -> Path:
    """The deploy Effect's file: confined to the run's workspace, <home>/workspaces/<run id>."""
    import os

    return Path(os.environ["JR2RAY_HOME"]) / "workspaces" / run.id / "deploy.log"


def _to_cooldown(client: Any, cooldown_s: float) -> tuple[Any, float]:
    """A deploy run approved at its Gate, now in its `after` cooldown; returns (run, deadline as wall time)."""
    run = client.start("deploy", {"log_path": "deploy.log", "deploy_seconds": 0.05,
                                  "cooldown_ms": int(cooldown_s * 1000)}, env=DEPLOY_ENV)
    assert run.pick("operator", "deploy", {}).answer == "deploy finished: deployed"
    assert run.pick("operator", "submit", {}).turn_complete
    t0 = time.time()
    run.send("approval", "approve", {"by": "ops"})
    return run, t0 + cooldown_s


def test_a_parked_runs_timer_fires_on_time(vclient: Any) -> None:
    run, deadline = _to_cooldown(vclient, 10.0)  # long: a loaded box parks it well before the deadline
    _until("the run to park during its cooldown", lambda: _parked(vclient, run.id), timeout_s=9.0)
    assert run.id in dict(_due(vclient))  # its reminder is in the durable index while it is parked
    assert run.id in vclient.store.run_ids() and "timers" not in vclient.store.run_ids()
    final = run.wait(60)
    ended = _ended_at(vclient, run.id)
    assert final.status == "done" and final.value == "released"
    assert ended >= deadline - 0.1  # not early: the engine fired the restored timer at its deadline
    assert _deploy_log(run).read_text() == "deployed\n"


def test_a_parked_runs_timer_fires_after_down_and_up(vclient: Any, ray_home: Path) -> None:
    """`down` (the whole Ray goes, registry and timer service too) while a parked run's timer is pending; its
    deadline passes while nothing runs; after `up` the timer service catches up and fires it at once."""
    import jr2ray

    run, deadline = _to_cooldown(vclient, 10.0)
    _until("the run to park during its cooldown", lambda: _parked(vclient, run.id), timeout_s=9.0)
    ray.shutdown()
    time.sleep(max(0.0, deadline - time.time()) + 1.0)  # overdue by the time anything runs again
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    client = jr2ray.connect(store=ray_home / "vruns", launcher=None,
                            settings=load_settings(idle_deactivate_s=IDLE_S), virtual=True)
    client.registry()  # what `up` does: the registry and the timer service start, and catch up
    final = client.get(run.id).wait(120)
    assert final.status == "done" and final.value == "released"
    assert _deploy_log(run).read_text() == "deployed\n"  # the Effect ran once, before the down
    # The reminder goes once the timer service marks it fired and the finished run's host parks it; the journal
    # may say `done` a moment before either, so this is awaited, not read once.
    _until("the fired reminder to be dropped", lambda: run.id not in dict(_due(client)), timeout_s=30)


def _due(client: Any) -> list[tuple[str, float]]:
    from jr2ray.run.timers import TimerIndex

    idx = TimerIndex(client.store.directory)
    try:
        return idx.due(float("inf"))
    finally:
        idx.close()


def _ended_at(client: Any, run_id: str) -> float:
    j = client.store.open(run_id)
    try:
        feed = j.feed(0)
    finally:
        j.close()
    return max(e["at"] for e in feed if e["kind"] == "status")


def _hosts_open_calls(client: Any) -> int:
    """Calls open in every host of this registry (a parked run's waiting pick used to be one)."""
    prefix = f"{registry_name(client.store.location)}:host:"
    hosts = [ray.get_actor(a["name"], namespace=a["namespace"])
             for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]
    return sum(ray.get(h.info.remote(), timeout=30)["open_calls"] for h in hosts)


def test_a_pick_waiting_on_a_parked_run_holds_no_call_in_any_actor(vclient: Any) -> None:
    """Five runs parked at the Gate, each with the driver's `ask` waiting for Rest: the picks wait in the driver
    (the registry notes who waits), no host or registry call stays open, and each is answered after its Gate."""
    runs = [vclient.start("notes", {"changes": f"c{i}"}) for i in range(5)]
    asks = [r.pick_async("writer", "ask", {"question": f"q{i}?"}, f"ask-{i}") for i, r in enumerate(runs)]
    _until("every Gate to open", lambda: all(r.gates() for r in runs))
    _until("every run to park at its Gate", lambda: all(_parked(vclient, r.id) for r in runs))
    st = _stats(vclient)
    assert st["watched_runs"] >= 5 and st["next_activation_calls"] == 0, st
    assert _hosts_open_calls(vclient) == 0
    assert not any(a.done() for a in asks)
    for i, r in enumerate(runs):
        r.send(GATE, "reply", {"text": f"r{i}"}, f"rep-{i}")
    receipts = [a.result(60) for a in asks]
    assert [x.answer for x in receipts] == [f"The editor replied: r{i}" for i in range(5)]
    assert [x.delivery_id for x in receipts] == [f"ask-{i}" for i in range(5)]
    for r in runs:  # each pick and each reply admitted once, though the pick was sent again after the wake
        assert [p["delivery_id"] for p in _ledger(vclient, r.id, "admission")] == [f"ask-{runs.index(r)}",
                                                                                   f"rep-{runs.index(r)}"]
    assert _stats(vclient)["watched_runs"] == st["watched_runs"] - 5


def test_a_parked_pick_is_answered_after_the_registry_restarts(vclient: Any) -> None:
    """The registry keeps who waits on a parked run only in memory. After Ray restarts it, the driver's long poll
    sees a new registry and sends its parked pick again: the pick is answered once the Gate is, and admitted once."""
    run = vclient.start("notes", {"changes": "restart"})
    ask = run.pick_async("writer", "ask", {"question": "Which?"}, "ask-r")
    _until("the Gate to open", lambda: run.gates())
    _until("the run to park at its Gate", lambda: _parked(vclient, run.id))
    ray.kill(vclient.registry(), no_restart=False)  # Ray starts it again (max_restarts=-1)
    _until("the registry to answer again", lambda: ray.get(vclient.registry().ping.remote(), timeout=10))
    _until("the parked pick to be sent again", lambda: not _parked(vclient, run.id) or ask.done())
    assert not ask.done(), "answered before the editor replied"
    run.send(GATE, "reply", {"text": "after the restart"}, "rep-r")
    assert ask.result(60).answer == "The editor replied: after the restart"
    assert [p["delivery_id"] for p in _ledger(vclient, run.id, "admission")] == ["ask-r", "rep-r"]
