"""What one pick costs the store, as counts: a pick answered at Rest is one transaction on either backend (its
macrostep and its receipt together), and on PostgreSQL that transaction is one round trip to the server.

The counts are what the store speed goal rests on (benchmarks/store_speed.py measures the time): every extra
statement of a pick is a network round trip on PostgreSQL, where SQLite's is a local call.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from jr2ray.run import LocalRun, RunError, RunFenced
from workflows.deploy import machine as deploy

PICKS = 6


def _door(tmp_path: Path) -> dict[str, Any]:
    return {"log_path": str(tmp_path / "deploy.log")}


async def _warm(run: LocalRun) -> None:
    for i in range(6):  # past psycopg's prepare threshold, and every lazy first-time path
        assert (await run.pick("operator", "note", {"text": f"warm {i}"})).moved


def _count_commits(run: LocalRun, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    journal = run.engine.journal
    assert journal is not None
    calls: list[int] = []
    real = journal.commit

    def commit(*args: Any, **kw: Any) -> None:
        calls.append(1)
        real(*args, **kw)

    monkeypatch.setattr(journal, "commit", commit)
    return calls


async def test_a_pick_at_rest_is_one_commit_carrying_its_macrostep_and_its_receipt(
        store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = LocalRun(deploy, _door(tmp_path), run_id="rt-1", store=store)
    await _warm(run)
    calls = _count_commits(run, monkeypatch)
    receipts = [await run.pick("operator", "note", {"text": f"line {i}"}, delivery_id=f"d-{i}")
                for i in range(PICKS)]
    assert len(calls) == PICKS, f"{len(calls)} commits for {PICKS} picks"
    # Each commit was whole: the latest snapshot has every note, the ledger every admission and receipt.
    j = store.open("rt-1")
    latest = j.latest_snapshot()
    assert latest is not None and latest[1]["context"]["notes"][-PICKS:] == [f"line {i}" for i in range(PICKS)]
    keys = {e.key for e in j.ledger("receipt")}
    assert all(any(k and k.endswith(f"/d-{i}") for k in keys) for i in range(PICKS))
    # A rebuild from the store alone answers a retry with the journaled receipt, and adds no note twice.
    again = LocalRun(deploy, _door(tmp_path), run_id="rt-1", store=store)
    assert await again.pick("operator", "note", {"text": "line 2"}, delivery_id="d-2") == receipts[2]
    assert again.context["notes"].count("line 2") == 1


async def test_a_stale_writer_of_a_held_macrostep_is_fenced_and_writes_nothing(
        backend: Any, store: Any, tmp_path: Path) -> None:
    """The pick's macrostep waits for its receipt to be written with it; the fence still refuses the whole."""
    old = LocalRun(deploy, _door(tmp_path), run_id="rt-f", store=store)
    assert old.engine.journal is not None
    old.engine.journal.claim("host-a")
    assert (await old.pick("operator", "note", {"text": "a"})).moved
    new = LocalRun(deploy, _door(tmp_path), run_id="rt-f", store=store)
    assert new.engine.journal is not None
    new.engine.journal.claim("host-b")
    before = backend.dump(store, "rt-f")
    with pytest.raises(RunFenced, match="another activation holds the lease"):
        await old.pick("operator", "note", {"text": "stale"})
    assert backend.dump(store, "rt-f") == before, "the fenced writer wrote"
    with pytest.raises(RunError, match="another activation"):  # it stopped: nothing more is taken
        await old.pick("operator", "note", {"text": "later"})
    assert (await new.pick("operator", "note", {"text": "b"})).moved
    assert LocalRun(deploy, _door(tmp_path), run_id="rt-f", store=store).context["notes"] == ["a", "b"]


@contextmanager
def _round_trips(pool: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Trace libpq's protocol messages on every connection the pool lends out; yields a list that, once the block
    is over, holds the number of round trips made (each Sync of the extended protocol, each simple Query)."""
    from psycopg import pq

    fd, name = tempfile.mkstemp(prefix="jr2ray-libpq-")
    real_get, real_put = pool.getconn, pool.putconn

    def getconn(*args: Any, **kw: Any) -> Any:
        conn = real_get(*args, **kw)
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        return conn

    def putconn(conn: Any) -> None:
        conn.pgconn.untrace()
        real_put(conn)

    monkeypatch.setattr(pool, "getconn", getconn)
    monkeypatch.setattr(pool, "putconn", putconn)
    out: list[int] = []
    try:
        yield out
    finally:
        monkeypatch.setattr(pool, "getconn", real_get)
        monkeypatch.setattr(pool, "putconn", real_put)
        os.close(fd)
        lines = Path(name).read_text(errors="replace").splitlines()
        os.unlink(name)
        sent = [ln.split("\t") for ln in lines if ln.startswith("F\t")]
        out.append(sum(1 for f in sent if len(f) > 2 and f[2].split(" ")[0] in ("Sync", "Query")))


async def test_a_pick_at_rest_is_one_round_trip_to_postgresql(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jr2ray.run.store.postgresql import PgStore

    store = PgStore(pg_url)
    run = LocalRun(deploy, _door(tmp_path), run_id="rt-pg", store=store)
    await _warm(run)
    with _round_trips(store.pool, monkeypatch) as trips:
        for i in range(PICKS):
            assert (await run.pick("operator", "note", {"text": f"line {i}"})).moved
    assert trips == [PICKS], f"{trips[0]} round trips for {PICKS} picks"
    # The tracer sees what it should: a read of the journal is counted too.
    with _round_trips(store.pool, monkeypatch) as trips:
        store.open("rt-pg").counts()
    assert trips == [2]  # the open's existence check, then the count


def test_rebuilding_a_run_reads_postgresql_in_two_round_trips(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What an activation reads: the journal's open (one), then its row, snapshot and ledger in one snapshot of
    the database (one: the transaction and its reads are pipelined)."""
    from jr2ray.run.store.postgresql import PgStore

    store = PgStore(pg_url)
    j = store.open("rt-load", create=True)
    j.create("rt-load", "deploy", "d0", {"x": 1})
    j.commit("d0", "active", {"value": "a"}, [("telemetry", None, {"n": 1}), ("feed", "0", {"kind": "pick"})])
    with _round_trips(store.pool, monkeypatch) as trips:
        loaded = store.open("rt-load").load()
    assert trips == [2]
    assert loaded.row is not None and loaded.row.input == {"x": 1}
    assert loaded.snapshot == ("d0", {"value": "a"}) and [e.kind for e in loaded.ledger] == ["telemetry", "feed"]
