"""The registry's pool of idle hosts on a real local Ray: a host handed a run never holds another one.

Each test makes a host hold what the registry did not give it (an adopt whose answer was lost, a host that asked about
a run it had just been given), then checks the registry's map of run to host stays one host per run, and that a
new start still goes live.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_helpers import stats as _stats
from ray_helpers import until as _until
from ray_helpers import virtual_client

import jr2ray
from jr2ray.run.names import registry_name
from jr2ray.settings import load_settings

pytestmark = pytest.mark.ray
IDLE_S = 0.5
NOTES = {"changes": "fix: crash"}


@pytest.fixture(scope="module")
def vclient(ray_home: Path) -> Iterator[Any]:
    with virtual_client(ray_home, "vpool", idle_deactivate_s=IDLE_S) as c:
        yield c


def _hosts(client: Any) -> list[tuple[Any, dict[str, Any]]]:
    """Every host slot this client's registry started (a process holds `runs_per_host`), with what each says it
    holds now."""
    prefix = f"{registry_name(client.store.location)}:host:"
    named = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]
    handles = [ray.get_actor(a["name"], namespace=a["namespace"]) for a in named]
    return [(h, i) for h, infos in zip(handles, ray.get([h.infos.remote() for h in handles]), strict=True)
            for i in infos]


def _parked(client: Any, run_id: str) -> bool:
    return run_id not in _stats(client)["live"]


def test_a_pooled_host_that_holds_a_run_is_mapped_to_it_and_the_start_takes_another(vclient: Any) -> None:
    first = vclient.start("notes", NOTES)
    _until("the first run to park", lambda: _parked(vclient, first.id))
    idle = [(h, i) for h, i in _hosts(vclient) if i["run_id"] is None]
    assert idle, "a parked run's host goes back to the pool"
    # Behind the registry's back, every idle host adopts the parked run (as if an adopt landed and its answer was
    # lost): the next start must not be handed a host that already holds a run.
    for h, i in idle:
        ray.get(h.adopt.remote(first.id, str(vclient.store.location), hid=i["hid"]))
    second = vclient.start("notes", NOTES)
    assert second.status().status == "active"
    by_run: dict[str, list[str]] = {}
    for _h, i in _hosts(vclient):
        if i["run_id"]:
            by_run.setdefault(i["run_id"], []).append(i["hid"])
    assert len(by_run.get(second.id, [])) == 1
    assert second.id in _stats(vclient)["live"]
    # The run those hosts took is mapped to one of them, and parks again; the copies that lost its lease are ended.
    _until("the first run to park again", lambda: _parked(vclient, first.id), timeout_s=60)
    _until("no host to hold the first run", lambda: all(i["run_id"] != first.id for _h, i in _hosts(vclient)))
    second.cancel()


def test_a_host_that_asks_about_a_run_it_was_just_given_keeps_it(vclient: Any) -> None:
    """`not_on` says "this host does not hold the run"; when the host has adopted it since, the mapping stands."""
    run = vclient.start("notes", NOTES)
    reg = vclient.registry()
    (host,) = ray.get(reg.activate.remote(run.id))
    (again,) = ray.get(reg.activate.remote(run.id, None, None, host._actor_id.hex()))
    assert again._actor_id == host._actor_id
    holders = [i["hid"] for _h, i in _hosts(vclient) if i["run_id"] == run.id]
    assert len(holders) == 1
    run.cancel()


def test_hosts_warmed_before_the_first_call_are_pooled_once(vclient: Any, ray_home: Path) -> None:
    """A fresh registry that is warmed first finds its own named hosts on its first call: each is pooled once."""
    client = jr2ray.connect(store=ray_home / "vpool-warm", launcher=None, virtual=True,
                            settings=load_settings(idle_deactivate_s=IDLE_S))
    reg = client.registry()
    slots = -(-2 // client.settings.runs_per_host) * client.settings.runs_per_host  # a process brings them all
    assert ray.get(reg.warm.remote(2)) == slots
    assert _stats(client)["idle_hosts"] == slots
    runs = [client.submit("notes", NOTES) for _ in range(3)]  # three at once: each needs a host of its own
    assert [r.ready().status for r in runs] == ["active"] * 3  # ready waits for the run to be live
    holders = [i["run_id"] for _h, i in _hosts(client) if i["run_id"]]
    assert len(holders) == len(set(holders))
    for r in runs:
        r.cancel()


def test_a_pooled_hosts_setup_is_out_of_the_collectors_walk(vclient: Any) -> None:
    """A full GC pass in a host (its idle trim, or one Python starts) walks only what it made since it was set up:
    Ray's and jr2ray's modules and objects were frozen once, in the actor's own process."""
    run = vclient.submit("notes", NOTES)
    assert run.ready().status == "active"
    infos = [i for _h, i in _hosts(vclient)]
    assert infos and all(i["gc_frozen"] > 10_000 for i in infos), [i["gc_frozen"] for i in infos]
    run.cancel()


def test_every_answer_that_names_a_host_gives_the_driver_its_one_handle_on_that_host(vclient: Any) -> None:
    """The registry names a host by its actor id beside Ray's serialized handle (`host_ref`), so a driver that was
    named that host before gets the same handle: Ray would build a new one, method table and all, for each of
    thousands of answers (activations, wakes on the long poll, watches) that name the pool's few dozen hosts."""
    run = vclient.start("notes", NOTES)
    reg = vclient.registry()
    pooled = {h._actor_id for h, _i in _hosts(vclient)}
    # asked at once, while the run is live (it parks after IDLE_S at rest); a timeout fails, never hangs
    named = ray.get([reg.activate.remote(run.id), reg.activate.remote(run.id), reg.lookup.remote(run.id),
                     reg.watch.remote(run.id, "probe"), reg.next_activation.remote(run.id)], timeout=60)
    assert all(len(n) == 1 for n in named), named
    host = named[0][0]
    assert all(n[0] is host for n in named) and host._actor_id in pooled
    _until("the run to park", lambda: _parked(vclient, run.id))
    assert ray.get(reg.watch.remote(run.id, "probe"), timeout=60) == []  # parked: "probe" hears of its next wake
    (woken,) = ray.get(reg.activate.remote(run.id), timeout=60)
    polled = ray.get(reg.wakes.remote("probe", 10.0), timeout=60)["runs"]
    assert [r[0] for r in polled] == [run.id]
    assert polled[0][1] is woken and woken._actor_id in pooled
    assert (woken is host) == (woken._actor_id == host._actor_id)  # one handle per host, across both halves
    run.cancel()
