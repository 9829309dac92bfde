"""The timer index of parked runs, the same on every backend: the earliest due time per run, what is due by a time,
and a fired reminder dropped only if the run did not re-park meanwhile. On PostgreSQL it is a table every node
shares; a store opened by its `location` (what an actor on another node is given) sees the same rows."""

from __future__ import annotations

from typing import Any

from jr2ray.run.store import open_store


def _run(store: Any, run_id: str, status: str = "active") -> None:
    j = store.open(run_id, create=True)
    j.create(run_id, "deploy", "d1", {}, status=status)
    j.commit("d1", status, {"value": "cooldown"}, [])
    j.close()


def test_due_reminders_in_time_order_and_a_refire_keeps_a_new_due_time(store: Any) -> None:
    for rid in ("a", "b", "c"):
        _run(store, rid)
    idx = store.timer_index()
    idx.set("a", 3000.0)
    idx.set("b", 1000.0)
    idx.set("c", 9000.0)
    idx.set("a", 2000.0)  # one row per run: the latest due time wins
    assert idx.due(5000.0) == [("b", 1000.0), ("a", 2000.0)]
    assert idx.due(float("inf"), limit=1) == [("b", 1000.0)]
    idx.set("b", 4000.0)  # b re-parked with a later timer before its reminder was marked fired
    idx.fired("b", 1000.0)
    assert idx.due(5000.0) == [("a", 2000.0), ("b", 4000.0)]
    idx.fired("a", 2000.0)
    idx.set("c", None)  # woke with no timer left
    assert idx.due(float("inf")) == [("b", 4000.0)]
    idx.close()


def test_another_process_opening_the_store_by_location_sees_the_same_reminders(store: Any) -> None:
    _run(store, "r1")
    store.timer_index().set("r1", 1234.5)
    other = open_store(store.location)  # what a host or the timer service on another node is handed
    assert other.timer_index().due(2000.0) == [("r1", 1234.5)]
    assert other.shared == store.shared


def test_purging_a_finished_run_leaves_no_reminder(backend: Any, store: Any) -> None:
    _run(store, "old", status="done")
    _run(store, "kept")
    store.timer_index().set("old", 10.0)
    store.timer_index().set("kept", 20.0)
    backend.backdate(store, "old", 0.0)
    assert store.purge_finished(older_than_s=60.0) == ["old"]
    assert store.timer_index().due(float("inf")) == [("kept", 20.0)]
