"""The Workflow version table, on both backends: a version is put once under its sha256, read back byte for byte by
any handle on the store, counted by the runs pinned to it, and dropped by gc; a run pinned to a version the store
lacks is `drifted` in its journal and index, keeps its last value and its timer row, and can be cancelled."""

from __future__ import annotations

import time
from typing import Any

import pytest

from jr2ray.run import versions
from jr2ray.run.admission import enqueue_many
from jr2ray.run.errors import RunDrifted
from jr2ray.run.handles import journal_status
from jr2ray.run.store import VersionRow, open_store


def _row(workflow: str, source: str) -> VersionRow:
    import hashlib

    return VersionRow(workflow=workflow, version=hashlib.sha256(source.encode()).hexdigest(), target="m",
                      source=source, created_at=time.time())


def test_a_version_is_put_once_and_read_back_whole_by_another_handle(store: Any, backend: Any) -> None:
    one, two = _row("notes", "machine = 1\n"), _row("notes", "machine = 2\n")
    store.put_version(one)
    store.put_version(one.model_copy(update={"source": "something else", "target": "x"}))  # same name: kept as is
    store.put_version(two)
    other = open_store(backend.location())
    got = other.get_version("notes", one.version)
    assert got is not None and got.source == "machine = 1\n" and got.target == "m"
    assert [v.version for v in other.versions("notes")] == [one.version, two.version]
    assert other.versions("deploy") == [] and other.get_version("deploy", one.version) is None
    assert other.drop_version("notes", one.version) is True
    assert other.drop_version("notes", one.version) is False
    assert [v.version for v in store.versions()] == [two.version]


def test_a_start_records_its_version_in_its_start_entry_and_the_index(store: Any) -> None:
    version, machine = versions.current(store, "notes")
    assert store.get_version("notes", version) is not None
    starts = [(f"run{i}", {"workflow": "notes", "digest": machine.digest, "version": version,
                           "input": {"changes": f"fix {i}"}, "env": {}, "launcher": None}) for i in range(3)]
    enqueue_many(store, starts)
    j = store.open("run0")
    try:
        assert j.ledger("start")[0].data["version"] == version
    finally:
        j.close()
    assert {line.version for line in store.list_runs()} == {version}
    assert store.version_counts() == {("notes", version): {"queued": 3}}
    store.set_run_version("run1", "v2")
    assert store.version_counts() == {("notes", version): {"queued": 2}, ("notes", "v2"): {"queued": 1}}
    assert store.indexed("run1").version == "v2"


def _parked_run(store: Any, version: str) -> str:
    """A run that got as far as an active snapshot with a value and a context, pinned to `version`, with a timer."""
    rid = "parked1"
    enqueue_many(store, [(rid, {"workflow": "notes", "digest": "d", "version": version,
                                "input": {"changes": "x"}, "env": {}, "launcher": None})])
    j = store.open(rid)
    try:
        j.commit("d", "active", {"status": "active", "value": {"writing": "asking"}, "context": {"replies": 0}}, [])
    finally:
        j.close()
    store.set_parked(rid, True, {"status": {"value": {"writing": "asking"}}, "waiting": {}})
    timers = store.timer_index()
    timers.set(rid, 1000.0)
    timers.close()
    return rid


def test_a_run_whose_version_is_gone_is_drifted_durably_readable_and_cancellable(store: Any) -> None:
    row = _row("notes", "machine = None\n")
    rid = _parked_run(store, row.version)
    with pytest.raises(RunDrifted, match="not in the store"):
        versions.machine_for(store, "notes", row.version, rid)
    line = store.indexed(rid)
    assert line is not None and line.status == "drifted"
    assert [r.id for r in store.list_runs(status="drifted")] == [rid]
    st = journal_status(store, rid)
    assert st is not None and st.status == "drifted" and st.value == {"writing": "asking"}
    assert st.context == {"replies": 0} and "not in the store" in str(st.error) and st.version == row.version
    timers = store.timer_index()
    assert timers.due(2000.0) == [(rid, 1000.0)]  # the reminder waits for the run to load again
    timers.close()
    ended = versions.cancel_drifted(store, rid)
    assert ended is not None and ended.status == "cancelled"
    assert store.indexed(rid).status == "cancelled"
    assert versions.cancel_drifted(store, rid) is None  # not drifted any more: nothing to do


def test_a_drifted_run_whose_version_is_back_is_active_again(store: Any) -> None:
    row = _row("notes", "machine = None\n")
    rid = _parked_run(store, row.version)
    versions.mark_drifted(store, rid, "gone")
    assert versions.revive_drifted(store) == []  # still gone: it stays drifted
    store.put_version(row)
    assert versions.revive_drifted(store) == [rid]
    assert store.indexed(rid).status == "active"
    st = journal_status(store, rid)
    assert st is not None and st.value == {"writing": "asking"}
