"""The run list pages through an index: a page opens no journal, paging visits every run once, newest first, and
a status filter reads only that status. Every backend."""

from __future__ import annotations

import time
from typing import Any

import pytest

DIGEST = "d1"
N = 2000


def _make(store: Any, n: int) -> list[str]:
    ids = []
    for i in range(n):
        rid = f"r{i:05d}"
        j = store.open(rid, create=True)
        j.create(rid, "notes", DIGEST, {"i": i}, status="queued" if i % 10 == 0 else "active")
        j.close()
        ids.append(rid)
    return ids


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch, backend: Any) -> list[str]:
    """Every journal the store opens from now on (its run id)."""
    seen: list[str] = []
    cls = backend.journal_class()
    real = cls.__init__

    def counting(self: Any, *args: Any, **kw: Any) -> None:
        seen.append(repr(args))
        real(self, *args, **kw)

    monkeypatch.setattr(cls, "__init__", counting)
    return seen


def test_paging_visits_every_run_once_newest_first_and_opens_no_journal(store: Any, opens: list[str]) -> None:
    ids = _make(store, N)
    store.list_runs(limit=1)  # a first listing may fill the index once (a store from before it)
    opens.clear()
    seen: list[str] = []
    pages = 0
    after = None
    t0 = time.perf_counter()
    while page := store.list_runs(limit=300, after=after):
        pages += 1
        seen += [r.id for r in page]
        after = store.cursor(page[-1])
    took = time.perf_counter() - t0
    assert opens == [], f"paging opened {len(opens)} journals"
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen)) == N
    assert pages == -(-N // 300)
    created = [r.created_at for r in store.list_runs()]
    assert created == sorted(created, reverse=True)
    assert took < 60  # sanity only; the speed itself is measured in benchmarks/


def test_a_status_filter_lists_only_that_status_and_queued_runs_come_oldest_first(store: Any) -> None:
    ids = _make(store, 50)
    queued = [r.id for r in store.list_runs(status="queued")]
    assert sorted(queued) == [i for n, i in enumerate(ids) if n % 10 == 0]
    assert store.queued_runs() == [i for n, i in enumerate(ids) if n % 10 == 0]
    assert {r.status for r in store.list_runs(status=["active"])} == {"active"}


def test_the_index_follows_status_changes(store: Any) -> None:
    j = store.open("r1", create=True)
    j.create("r1", "notes", DIGEST, {}, status="queued")
    assert store.queued_runs() == ["r1"]
    j.commit(DIGEST, "active", {"value": "draft"}, [])
    assert store.queued_runs() == [] and [r.status for r in store.list_runs()] == ["active"]
    j.commit(DIGEST, "done", {"value": "published"}, [])
    assert [(r.status, r.lifecycle) for r in store.list_runs()] == [("done", "finished")]
    j.close()


def test_run_states_give_every_runs_id_workflow_and_status_and_open_no_journal(store: Any,
                                                                            opens: list[str]) -> None:
    ids = _make(store, 50)
    store.mark_lost("r99999", "the journal of run r99999 is gone")  # a run the store knows only as lost
    store.list_runs(limit=1)  # a first listing may fill the index once (a store from before it)
    j = store.open(ids[1])
    j.commit(DIGEST, "done", {"value": "published"}, [])
    j.close()
    opens.clear()
    states = store.run_states()
    assert opens == [], f"run_states opened {len(opens)} journals"
    got = {rid: (wf, status) for rid, wf, status in states}
    assert len(states) == len(got) == 51
    assert got[ids[0]] == ("notes", "queued") and got[ids[1]] == ("notes", "done")
    assert got[ids[2]] == ("notes", "active")
    assert got["r99999"][1] == "lost"
    listed = {r.id: r.status for r in store.list_runs()}
    assert {rid: status for rid, (_wf, status) in got.items()} == listed  # the same counts the gauges had


def test_a_damaged_journal_pages_as_corrupt_and_a_missing_one_as_lost(backend: Any, store: Any) -> None:
    _make(store, 5)
    backend.damage(store, "r00001")
    backend.remove(store, "r00002")
    store.mark_lost("r00002", "the journal of run r00002 is gone")
    rows = {r.id: r for r in store.list_runs(limit=10)}
    assert rows["r00001"].lifecycle == "corrupt" and "damaged" in (rows["r00001"].error or "")
    assert rows["r00002"].lifecycle == "lost" and rows["r00002"].error == "the journal of run r00002 is gone"
    assert {rows[k].status for k in ("r00000", "r00003", "r00004")} <= {"active", "queued"}


def test_a_store_from_before_the_index_is_indexed_on_first_listing(tmp_path: Any) -> None:
    """SQLite only: PostgreSQL's run table is its own index."""
    from jr2ray.run.store import Store
    from jr2ray.run.store import index as idx

    _make(Store(tmp_path), 3)
    idx._indexes.clear()
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / (idx.INDEX_FILE + suffix)).unlink(missing_ok=True)
    assert sorted(r.id for r in Store(tmp_path).list_runs()) == ["r00000", "r00001", "r00002"]
