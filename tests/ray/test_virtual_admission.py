"""Admission on a real local Ray: at most max_live_runs virtual runs are live; a start is one journal write and the
run is `queued` until a slot frees; slots go first come, first served; a queued run can be cancelled."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import stats as _stats
from ray_helpers import until as _until
from ray_helpers import virtual_client

pytestmark = pytest.mark.ray
MAX_LIVE = 2


@pytest.fixture(scope="module")
def aclient(ray_home: Path) -> Iterator[Any]:
    with virtual_client(ray_home, "aruns", idle_deactivate_s=600, max_live_runs=MAX_LIVE,
                        queued_idle_s=600) as c:  # live stays live, even while runs are queued
        yield c


def _status_in_journal(client: Any, run_id: str) -> str:
    return next(r["status"] for r in client.runs() if r["id"] == run_id)


def test_admission_holds_at_max_live_runs_and_queued_runs_start_in_order(aclient: Any) -> None:
    runs = aclient.start_many("notes", [{"changes": f"fix {i}"} for i in range(5)])
    ids = [r.id for r in runs]
    st = _until("two runs live and three queued",
                lambda: len((s := _stats(aclient))["queued"]) == 3 and len(s["live"]) == 2 and s)
    live, queued = st["live"], st["queued"]
    assert len(live) == MAX_LIVE and st["max_live"] == MAX_LIVE
    assert queued == [i for i in ids if i in queued]  # in line in the order they were started
    by_id = {r.id: r for r in runs}
    listed = {r["id"]: r for r in aclient.runs()}
    assert [listed[i]["presence"] for i in live + queued] == ["live", "live", "queued", "queued", "queued"]
    assert [listed[i]["status"] for i in queued] == ["queued"] * 3  # a start is its journal row, first
    assert by_id[live[0]].cancel().status == "cancelled"  # a finished run deactivates at once: its slot frees
    _until("the first queued run to go live", lambda: queued[0] in _stats(aclient)["live"])
    st = _stats(aclient)
    assert sorted(st["live"]) == sorted([live[1], queued[0]]) and st["queued"] == queued[1:]
    assert by_id[queued[0]].surface("writer").allowed == ["ask"]  # it started from its input
    by_id[live[1]].cancel()
    _until("the next queued run to go live", lambda: queued[1] in _stats(aclient)["live"])
    assert _stats(aclient)["queued"] == queued[2:]
    assert _stats(aclient)["peak_live"] <= MAX_LIVE
    for rid in queued:
        by_id[rid].cancel()
    _until("every run to deactivate", lambda: not _stats(aclient)["live"])


def test_cancel_on_a_queued_run(aclient: Any) -> None:
    runs = aclient.start_many("notes", [{"changes": f"fix {i}"} for i in range(3)])
    (waiting,) = _until("one run queued", lambda: _stats(aclient)["queued"])
    others = [r for r in runs if r.id != waiting]
    run = next(r for r in runs if r.id == waiting)
    assert run.presence() == "queued"
    assert run.cancel().status == "cancelled"
    assert _stats(aclient)["queued"] == [] and waiting not in _stats(aclient)["live"]
    assert _status_in_journal(aclient, waiting) == "cancelled"
    assert run.wait(10).status == "cancelled"
    others[0].cancel()  # the slot it frees goes to nobody: the cancelled run does not start
    time.sleep(1.0)
    assert waiting not in _stats(aclient)["live"] and _status_in_journal(aclient, waiting) == "cancelled"
    others[1].cancel()


def test_a_restarted_registry_keeps_its_live_runs_and_rebuilds_its_line(aclient: Any) -> None:
    """Ray restarts the registry (its process died): it finds the hosts still holding runs, so nothing is hosted
    twice and no slot is given out twice, and it lines the journal's `queued` runs up again in start order."""
    import ray

    runs = [aclient.submit("notes", {"changes": f"fix {i}"}) for i in range(5)]
    ids = [r.id for r in runs]
    st = _until("two runs live and three queued",
                lambda: len((s := _stats(aclient))["queued"]) == 3 and len(s["live"]) == 2 and s)
    live, queued = sorted(st["live"]), st["queued"]
    assert queued == [i for i in ids if i in queued]
    ray.kill(aclient.registry(), no_restart=False)

    def answers() -> dict[str, Any] | None:
        try:
            return _stats(aclient)
        except ray.exceptions.RayActorError:  # still restarting
            return None

    st = _until("the restarted registry to answer with the same runs live and the same line",
                lambda: (s := answers()) and s["queued"] == queued and sorted(s["live"]) == live and s)
    assert st["peak_live"] <= MAX_LIVE
    by_id = {r.id: r for r in runs}
    assert by_id[live[0]].cancel().status == "cancelled"  # its slot goes to the oldest queued run
    _until("the oldest queued run to go live", lambda: queued[0] in _stats(aclient)["live"])
    assert _stats(aclient)["queued"] == queued[1:] and len(_stats(aclient)["live"]) == MAX_LIVE
    for rid in [live[1], *queued]:
        by_id[rid].cancel()
    _until("every run to deactivate", lambda: not _stats(aclient)["live"])


def test_queued_starts_survive_a_restart_and_keep_their_order(ray_home: Path) -> None:
    """`down` while two runs are live and three wait `queued`: the new registry rebuilds its line from the journal
    (oldest start first), the runs that were live get their slots back first, and a rebuilt queued run cancels
    without ever going live. Last in the module: it restarts the module's Ray."""
    import ray

    import jr2ray
    from jr2ray.settings import load_settings

    settings = load_settings(idle_deactivate_s=600, max_live_runs=MAX_LIVE)
    with virtual_client(ray_home, "qruns", idle_deactivate_s=600, max_live_runs=MAX_LIVE) as c:
        runs = [c.submit("notes", {"changes": f"fix {i}"}) for i in range(5)]
        st = _until("two runs live and three queued",
                    lambda: len((s := _stats(c))["queued"]) == 3 and len(s["live"]) == 2 and s)
        live, queued = sorted(st["live"]), st["queued"]
        assert queued == [r.id for r in runs if r.id in queued]
        ray.shutdown()  # `down`: the registry, its line and every host go
        ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
        again = jr2ray.connect(store=ray_home / "qruns", launcher=None, settings=settings)
        assert sorted(again.resume()) == live  # `up`: the live ones wake; the queued ones line up again
        st = _until("the same two live and the same three queued, in order",  # two host starts: slow when loaded
                    lambda: (s := _stats(again))["queued"] == queued and sorted(s["live"]) == live and s,
                    timeout_s=240)
        assert [r["presence"] for r in again.runs() if r["id"] in queued] == ["queued"] * 3
        assert again.get(queued[2]).cancel().status == "cancelled"  # cancelled in its journal, never live
        assert _status_in_journal(again, queued[2]) == "cancelled"
        assert again.get(live[0]).cancel().status == "cancelled"  # its slot goes to the oldest queued run
        _until("the oldest queued run to go live", lambda: queued[0] in _stats(again)["live"], timeout_s=240)
        assert _stats(again)["queued"] == [queued[1]]
        assert again.get(queued[0]).surface("writer").allowed == ["ask"]  # it started from its input
        assert queued[2] not in _stats(again)["live"]
        for rid in (live[1], queued[0], queued[1]):
            again.get(rid).cancel()
