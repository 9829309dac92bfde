"""The journal store's behaviour, the same on every backend: each test runs once per registered backend (conftest)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from jr2ray.run.errors import RunCorrupt, RunFenced, RunLost

DIGEST = "d1"


def _start(store: Any, run_id: str, status: str = "active", input: Any = None) -> Any:
    j = store.open(run_id, create=True)
    assert j.load().row is None  # a new journal has no row until the Run creates it
    j.create(run_id, "notes", DIGEST, {"changes": "x"} if input is None else input, status=status)
    j.commit(DIGEST, status, {"value": "draft", "n": 0}, [("start", None, {"env": {}, "launcher": None})])
    return j


def test_create_commit_load_round_trip(store: Any) -> None:
    j = _start(store, "r1", input={"changes": "ä ünïcode", "n": [1, 2.5, None]})
    j.commit(DIGEST, "active", {"value": "review", "n": 1},
             [("admission", "turn:t1/p1", {"event": "submit"}), ("feed", "0", {"kind": "pick", "data": {}})])
    j.commit(DIGEST, "done", {"value": "published", "n": 2}, [("receipt", "turn:t1/p1", {"ok": True})])
    j.close()

    again = store.open("r1")
    loaded = again.load()
    assert loaded.row is not None
    assert (loaded.row.id, loaded.row.workflow, loaded.row.digest, loaded.row.status) == ("r1", "notes", DIGEST, "done")
    assert loaded.row.input == {"changes": "ä ünïcode", "n": [1, 2.5, None]}
    assert loaded.snapshot == (DIGEST, {"value": "published", "n": 2})
    assert [(e.kind, e.key, e.data) for e in loaded.ledger] == [
        ("start", None, {"env": {}, "launcher": None}),
        ("admission", "turn:t1/p1", {"event": "submit"}),
        ("feed", "0", {"kind": "pick", "data": {}}),
        ("receipt", "turn:t1/p1", {"ok": True}),
    ]
    seqs = [e.seq for e in loaded.ledger]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    assert again.run() == loaded.row and again.latest_snapshot() == loaded.snapshot
    again.close()


def test_a_commit_that_fails_writes_nothing(backend: Any, store: Any) -> None:
    j = _start(store, "r1")
    before = backend.dump(store, "r1")
    loop: dict[str, Any] = {}
    loop["self"] = loop  # cannot be written as JSON: the transaction fails part way
    with pytest.raises(ValueError):
        j.commit(DIGEST, "done", {"value": "x"}, [("telemetry", None, {"ok": 1}), ("telemetry", None, loop)])
    assert backend.dump(store, "r1") == before
    assert store.open("r1").run().status == "active"


def test_ledger_by_kind_and_counts(store: Any) -> None:
    j = _start(store, "r1")
    j.commit(DIGEST, "active", None, [("admission", "gate:g/rep-1", {"n": 1}), ("telemetry", None, {"t": 1}),
                                       ("admission", "turn:t/p-1", {"n": 2})])
    j.commit(DIGEST, "active", None, [("telemetry", None, {"t": 2})])
    assert [e.data for e in j.ledger("admission")] == [{"n": 1}, {"n": 2}]
    assert [e.key for e in j.ledger("admission")] == ["gate:g/rep-1", "turn:t/p-1"]
    assert [e.data for e in j.ledger("telemetry")] == [{"t": 1}, {"t": 2}]
    assert j.ledger("receipt") == []
    assert j.counts() == {"start": 1, "admission": 2, "telemetry": 2}
    assert j.latest_snapshot() == (DIGEST, {"value": "draft", "n": 0})  # a commit with no snapshot keeps the last


def test_feed_since_a_number(store: Any) -> None:
    j = _start(store, "r1")
    for n in range(12):
        j.commit(DIGEST, "active", None, [("feed", str(n), {"kind": "tick", "n": n})])
    assert [e["seq"] for e in j.feed()] == list(range(12))
    got = j.feed(since=10)
    assert got == [{"kind": "tick", "n": 10, "seq": 10}, {"kind": "tick", "n": 11, "seq": 11}]
    assert j.feed(since=12) == []
    other = _start(store, "r2")
    assert other.feed() == []  # one run's feed is never another's


def test_a_missing_run_is_lost_and_never_made(store: Any) -> None:
    assert not store.exists("nope")
    with pytest.raises(RunLost):
        store.open("nope")
    assert not store.exists("nope")
    assert store.list_runs() == []


def test_listing_shows_lost_and_corrupt_runs_and_every_other_run(backend: Any, store: Any) -> None:
    _start(store, "good").close()
    _start(store, "bad").close()
    _start(store, "gone").close()
    backend.damage(store, "bad")
    backend.remove(store, "gone")
    store.mark_lost("gone", "the journal of run gone is gone")
    rows = {r.id: r for r in store.list_runs()}
    assert sorted(rows) == ["bad", "gone", "good"]
    assert (rows["good"].status, rows["good"].lifecycle, rows["good"].workflow) == ("active", "active", "notes")
    assert rows["bad"].lifecycle == "corrupt" and "damaged" in (rows["bad"].error or "")
    assert rows["gone"].lifecycle == "lost" and rows["gone"].error == "the journal of run gone is gone"
    assert store.exists("gone") and store.exists("bad")
    with pytest.raises(RunLost):
        store.open("gone")
    with pytest.raises(RunCorrupt):
        store.open("bad").load()


def test_a_live_journal_whose_run_vanished_stops_writing(backend: Any, store: Any) -> None:
    j = _start(store, "r1")
    backend.remove(store, "r1")
    with pytest.raises(RunLost, match="stopped writing"):
        j.commit(DIGEST, "active", {"value": "x"}, [("telemetry", None, {})])
    with pytest.raises(RunLost):  # and it stays stopped
        j.commit(DIGEST, "active", {"value": "x"}, [])
    assert not store.exists("r1")


def test_purge_removes_only_finished_runs_past_retention(backend: Any, store: Any) -> None:
    now = time.time()
    day = 24 * 3600.0
    for rid, status, age in [("old-done", "done", 8), ("old-error", "error", 9), ("old-cancelled", "cancelled", 30),
                             ("new-done", "done", 6), ("old-active", "active", 30)]:
        _start(store, rid, status=status).close()
        backend.backdate(store, rid, now - age * day)
    assert store.purge_finished(7 * day, now=now) == ["old-cancelled", "old-done", "old-error"]
    assert sorted(r.id for r in store.list_runs()) == ["new-done", "old-active"]
    assert not store.exists("old-done")
    assert store.purge_finished(0.0, now=now) == ["new-done"]  # an active run is never purged, however old
    assert [r.id for r in store.list_runs()] == ["old-active"]


def test_two_handles_of_one_run_only_the_newest_claim_writes(backend: Any, store: Any) -> None:
    _start(store, "r1").close()
    old, new = store.open("r1"), store.open("r1")
    e1 = old.claim("host-a")
    e2 = new.claim("host-b")
    assert e2 > e1
    new.commit(DIGEST, "active", {"value": "b"}, [("telemetry", None, {"by": "b"})])
    before = backend.dump(store, "r1")
    with pytest.raises(RunFenced, match="another activation"):
        old.commit(DIGEST, "done", {"value": "a"}, [("telemetry", None, {"by": "a"})])
    assert backend.dump(store, "r1") == before, "a stale writer changed the journal"
    new.commit(DIGEST, "active", None, [("telemetry", None, {"by": "b2"})])
    assert [e.data["by"] for e in store.open("r1").ledger("telemetry")] == ["b", "b2"]


def test_a_reader_does_not_fence_the_writer(store: Any) -> None:
    writer = _start(store, "r1")
    writer.claim("host-a")
    reader = store.open("r1")
    assert reader.load().row is not None and reader.feed() == [] and reader.counts() == {"start": 1}
    reader.close()
    writer.commit(DIGEST, "active", None, [("telemetry", None, {"ok": True})])
    assert writer.counts() == {"start": 1, "telemetry": 1}


def test_a_stale_writer_racing_a_new_claim_never_writes_after_it(store: Any) -> None:
    """A slow old writer keeps committing while a new activation claims: its commits land whole until the claim,
    then it is fenced and stops; no entry of it ever follows the new writer's."""
    import threading

    _start(store, "r1").close()
    old, new = store.open("r1"), store.open("r1")
    old.claim("host-a")
    outcomes: list[str] = []
    three = threading.Event()

    def stale() -> None:
        # slow, as a real host's commits are (one an event): a writer committing back to back can hold SQLite's
        # write lock against the claim's busy-wait for seconds, which is lock starvation, not the fence under test
        deadline, i = time.monotonic() + 60, 0
        while time.monotonic() < deadline:
            i += 1
            time.sleep(0.002)
            try:
                old.commit(DIGEST, "active", {"by": "a", "i": i}, [("telemetry", None, {"by": "a", "i": i})])
            except RunFenced:
                outcomes.append("fenced")
                return  # a stale writer stops
            outcomes.append("ok")
            if len(outcomes) == 3:
                three.set()

    t = threading.Thread(target=stale)
    t.start()
    assert three.wait(30)
    new.claim("host-b")
    for i in range(10):
        new.commit(DIGEST, "active", {"by": "b", "i": i}, [("telemetry", None, {"by": "b", "i": i})])
    t.join(70)
    assert outcomes[-1] == "fenced" and outcomes.count("fenced") == 1
    by = [e.data["by"] for e in store.open("r1").ledger("telemetry")]
    assert by.count("b") == 10 and by.count("a") == outcomes.count("ok") >= 3
    assert "a" not in by[by.index("b"):], "the stale writer wrote after the new claim"
    assert store.open("r1").latest_snapshot() == (DIGEST, {"by": "b", "i": 9})


def test_a_finished_run_lists_with_its_last_value_and_a_live_one_without(store: Any) -> None:
    """`jr2ray runs` shows a done run's value from the index on every backend (PostgreSQL listed none)."""
    done, live = _start(store, "fin-1"), _start(store, "live-1")
    done.commit(DIGEST, "done", {"value": "published", "n": 2}, [("receipt", "k", {"ok": True})])
    live.commit(DIGEST, "active", {"value": "review", "n": 1}, [("receipt", "k", {"ok": True})])
    done.close()
    live.close()
    rows = {r.id: r for r in store.list_runs()}
    assert (rows["fin-1"].lifecycle, rows["fin-1"].value) == ("finished", "published")
    assert (rows["live-1"].lifecycle, rows["live-1"].value) == ("active", None)  # a live value changes unindexed


def test_a_retried_batch_of_starts_lists_every_run_once_and_moves_none_back(backend: Any, store: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray sends the registry's `start_many` again after a restart. The batch's second try lists every run once,
    including those whose journal the first try made before it died (on SQLite, the files are written before the
    index), and a run that moved on since keeps its status."""
    from jr2ray.run.store import NewRun

    batch = [NewRun(id=f"b{i}", workflow="notes", digest=DIGEST, input={"changes": str(i)},
                    entries=[("start", None, {"env": {}, "launcher": None})]) for i in range(3)]
    if backend.name == "sqlite":  # the first try dies between the journal files and the index
        index = type(store.index())

        def died(self: Any, rows: list[dict[str, Any]]) -> None:
            raise OSError("the registry's process died here")
        with monkeypatch.context() as m:
            m.setattr(index, "put_many", died)
            with pytest.raises(OSError):
                store.create_runs(batch[:2])
        assert all(store.exists(r.id) for r in batch[:2])
        assert {r.id for r in store.list_runs()} == set()
        half = store.path("b2").with_name("b2.sqlite.1-2.new")  # a try that died writing b2: its staged file
        half.write_bytes(store.path("b1").read_bytes()[:1000])
        assert "b2" not in store.run_ids() and not store.exists("b2")
    store.create_runs(batch[:1])
    j = store.open("b0")
    j.commit(DIGEST, "active", {"value": "drafting"}, [])
    j.close()
    store.create_runs(batch)  # the retry
    listed = {r.id: r.status for r in store.list_runs() if r.id.startswith("b")}
    assert listed == {"b0": "active", "b1": "queued", "b2": "queued"}
    assert store.listing("b0").status == "active" and store.listing("b1").status == "queued"
    for rid in ("b1", "b2"):
        j = store.open(rid)
        assert [e.kind for e in j.load().ledger] == ["start"]
        j.close()
