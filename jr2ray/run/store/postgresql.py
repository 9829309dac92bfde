"""The PostgreSQL journal: every run's journal in one database, so a run's actor may live on any node.

The same narrow plain-data interface as the SQLite store (`JournalStore`, and a per-run handle like `RunJournal`):
the Run hands over JSON, the store knows no chart. Payloads are kept as the exact JSON text the Run wrote, so a
journal reads back byte for byte as on SQLite.

One writer per run: the run's row holds an epoch. `claim` takes the next one; every commit is a compare-and-set on
that row (`UPDATE ... WHERE epoch = mine`), in the same transaction as the macrostep's rows, so a stale writer (an
old actor on a slow or partitioned node) writes nothing and gets `RunFenced`. As on SQLite, only a handle that
claimed is fenced: every activation of a run claims before it writes, and readers never write.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from jr2ray.settings import Settings

from ..errors import RunCorrupt, RunFenced, RunLost
from ..models import FINISHED, lifecycle
from .base import (
    RETENTION_S,
    Entry,
    LedgerEntry,
    LedgerKind,
    Loaded,
    NewRun,
    RunImage,
    RunListing,
    RunRow,
    SnapshotRow,
    VersionRow,
)
from .index import decode_cursor, encode_cursor
from .migrations import migrate
from .timer_index import PgTimerIndex

SNAPSHOTS_KEPT = 50  # older snapshots of a run are dropped as new ones are written (as on SQLite)
_RUN_COLS = "id, workflow, digest, input, status, created_at, updated_at, epoch, parked, value, waiting, version"

_COMMIT = """
WITH fence AS (
  UPDATE jr2ray_run SET status = %(status)s, updated_at = %(now)s, value = COALESCE(%(value)s::text, value)
  WHERE id = %(id)s AND (%(epoch)s::bigint IS NULL OR epoch = %(epoch)s) RETURNING id
), entries AS (
  INSERT INTO jr2ray_ledger (run_id, kind, key, digest, data, at)
  SELECT fence.id, e.kind, e.key, %(digest)s, e.data, %(now)s
  FROM fence, unnest(%(kinds)s::text[], %(keys)s::text[], %(datas)s::text[]) WITH ORDINALITY AS e(kind, key, data, n)
  ORDER BY e.n
), snap AS (
  INSERT INTO jr2ray_snapshot (run_id, digest, status, data, at)
  SELECT fence.id, %(digest)s, %(status)s, %(snap)s::text, %(now)s FROM fence WHERE %(snap)s::text IS NOT NULL
), prune AS (
  DELETE FROM jr2ray_snapshot WHERE %(snap)s::text IS NOT NULL AND run_id IN (SELECT id FROM fence) AND seq <= (
    SELECT seq FROM jr2ray_snapshot WHERE run_id = %(id)s ORDER BY seq DESC OFFSET %(kept)s LIMIT 1)
)
SELECT count(*) FROM fence
"""

_LATEST = "SELECT digest, data FROM jr2ray_snapshot WHERE run_id = %s ORDER BY seq DESC LIMIT 1"
_LEDGER = "SELECT seq, kind, key, digest, data, at FROM jr2ray_ledger WHERE run_id = %s"

POOL_MIN = int(Settings.model_fields["store_pool_min"].default)  # the settings' defaults, when none are handed down
POOL_MAX = int(Settings.model_fields["store_pool_max"].default)
_pools: dict[str, ConnectionPool] = {}
_pools_lock = threading.Lock()


def pool_for(url: str, min_size: int = POOL_MIN, max_size: int = POOL_MAX) -> ConnectionPool:
    """One pool per database URL per process, migrated once when first made. Its size is the settings'
    (`store_pool_min`/`store_pool_max`, handed down by `open_store`): each process holds at least `min_size`
    connections open, so the server must allow about (processes that touch the store) x that many. A second store
    of the same URL in the process shares the first one's pool."""
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            pool = ConnectionPool(url, min_size=min_size, max_size=max(min_size, max_size), open=True,
                                  name="jr2ray-store", kwargs={"autocommit": True})
            with pool.connection() as conn:
                migrate(conn)
            _pools[url] = pool
        return pool


def ping(url: str, timeout_s: float = 5.0) -> None:
    """Connect once, or raise within about `timeout_s` (a pool would retry for its whole timeout first)."""
    with psycopg.connect(url, connect_timeout=max(1, int(timeout_s))) as conn:
        conn.execute("SELECT 1")


def close_pools() -> None:
    """Close every pool this process opened (tests, and a clean `down`)."""
    with _pools_lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


def _kind(kind: Any) -> str:
    return str(getattr(kind, "value", kind))


def _row(run_id: str, r: tuple[Any, ...]) -> RunRow:
    try:
        data = json.loads(r[3]) if r[3] else None
    except ValueError as exc:
        raise RunCorrupt(f"the journal of run {run_id} is damaged (its input is not JSON: {exc})") from None
    return RunRow(id=r[0], workflow=r[1], digest=r[2], input=data, status=r[4], created_at=r[5], updated_at=r[6])


class PgRunJournal:
    """One run's journal in PostgreSQL. `create=False` refuses a run with no row: the run is lost."""

    def __init__(self, pool: ConnectionPool, run_id: str, *, create: bool = True) -> None:
        self.pool = pool
        self.run_id = run_id
        self.broken: RunLost | RunCorrupt | None = None
        self.epoch: int | None = None  # the lease this journal writes under, once `claim` took one
        with pool.connection() as conn:  # one round trip: is the row there, and was the run marked lost?
            got = conn.execute("SELECT EXISTS (SELECT 1 FROM jr2ray_run WHERE id = %s), "
                               "(SELECT error FROM jr2ray_lost WHERE id = %s)", (run_id, run_id)).fetchone()
        there, lost = (bool(got[0]), got[1]) if got else (False, None)
        if not there and (not create or lost is not None):
            reason = lost if lost is not None else f"the journal of run {run_id} is gone"
            raise RunLost(f"{reason}; it is not re-run from its input")

    def close(self) -> None:
        """Nothing to release: connections go back to the shared pool after every call."""

    # ---- writes --------------------------------------------------------------------------------------------
    def create(self, run_id: str, workflow: str, digest: str, input: Any, status: str = "active") -> None:
        now = time.time()
        with self.pool.connection() as conn:
            conn.execute("INSERT INTO jr2ray_run (id, workflow, digest, input, status, created_at, updated_at) "
                         "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                         (run_id, workflow, digest, json.dumps(input), status, now, now))

    def claim(self, holder: str) -> int:
        """Take the run's write lease: the next epoch on its row. Every older handle's next commit is refused."""
        with self.pool.connection() as conn:
            got = conn.execute("UPDATE jr2ray_run SET epoch = epoch + 1, holder = %s WHERE id = %s "
                               "RETURNING epoch", (holder, self.run_id)).fetchone()
        if got is None:
            raise RunLost(f"the journal of run {self.run_id} is gone; it is not re-run from its input")
        self.epoch = int(got[0])
        return self.epoch

    def commit(self, digest: str, status: str, snapshot: dict[str, Any] | None, entries: list[Entry]) -> None:
        """Append one macrostep, fenced by the epoch; or raise and write nothing.

        One statement, so one round trip and one transaction: the compare-and-set on the run's row, then the
        ledger entries and the snapshot, each joined to that row so that a missed fence inserts nothing."""
        if self.broken is not None:
            raise self.broken
        mine = self.epoch
        now = time.time()
        kinds = [_kind(k) for k, _, _ in entries]
        keys = [key for _, key, _ in entries]
        datas = [json.dumps(d, default=str) for _, _, d in entries]
        snap = None if snapshot is None else json.dumps(snapshot, default=str)
        # A run that finishes lists with its last value, as on SQLite (the index follows its status change).
        value = json.dumps(snapshot.get("value"), default=str) if snapshot and lifecycle(status) == "finished" \
            else None
        with self.pool.connection() as conn:
            got = conn.execute(_COMMIT, {"status": status, "now": now, "id": self.run_id, "epoch": mine,
                                         "digest": digest, "kinds": kinds, "keys": keys, "datas": datas,
                                         "snap": snap, "value": value, "kept": SNAPSHOTS_KEPT}).fetchone()
            if not got or not got[0]:
                self._refuse(conn, mine)

    def _refuse(self, conn: psycopg.Connection, mine: int | None) -> None:
        """The compare-and-set missed: the row is gone (lost) or holds a newer epoch (fenced). Say which."""
        got = conn.execute("SELECT epoch FROM jr2ray_run WHERE id = %s", (self.run_id,)).fetchone()
        if got is None:
            self.broken = RunLost(f"the journal of run {self.run_id} was removed while the run was live; "
                                  "the run stopped writing")
            raise self.broken
        raise RunFenced(f"run {self.run_id}: another activation holds the lease (epoch {got[0]}, this one "
                        f"{mine}); this one stopped writing")

    # ---- reads ---------------------------------------------------------------------------------------------
    def load(self) -> Loaded:
        """The whole journal, read in one snapshot of the database; text that is not JSON raises RunCorrupt.

        One round trip: the transaction and its three reads go to the server together (psycopg's pipeline mode),
        and the results are read once it is over."""
        with self.pool.connection() as conn:
            with conn.pipeline():
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                run = conn.execute(f"SELECT {_RUN_COLS} FROM jr2ray_run WHERE id = %s", (self.run_id,))
                latest = conn.execute(_LATEST, (self.run_id,))
                ledger = conn.execute(_LEDGER + " ORDER BY seq", (self.run_id,))
                conn.execute("COMMIT")
            r = run.fetchone()
            return Loaded(row=None if r is None else _row(self.run_id, r), snapshot=self._snap(latest.fetchone()),
                          ledger=self._entries(ledger.fetchall()))

    def run(self) -> RunRow | None:
        with self.pool.connection() as conn:
            return self._run(conn)

    def latest_snapshot(self) -> tuple[str, dict[str, Any]] | None:
        with self.pool.connection() as conn:
            return self._latest(conn)

    def ledger(self, kind: str | LedgerKind | None = None) -> list[LedgerEntry]:
        with self.pool.connection() as conn:
            return self._ledger(conn, kind)

    def feed(self, since: int = 0) -> list[dict[str, Any]]:
        """The journaled feed from event number `since` on, each event with its number as `seq`."""
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT key, data FROM jr2ray_ledger WHERE run_id = %s AND kind = 'feed' "
                                "AND CAST(key AS BIGINT) >= %s ORDER BY seq", (self.run_id, since)).fetchall()
        return [{**self._json(d), "seq": int(k)} for k, d in rows]

    def counts(self) -> dict[str, int]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT kind, COUNT(*) FROM jr2ray_ledger WHERE run_id = %s GROUP BY kind",
                                (self.run_id,)).fetchall()
        return {k: int(n) for k, n in rows}

    def _run(self, conn: psycopg.Connection) -> RunRow | None:
        r = conn.execute(f"SELECT {_RUN_COLS} FROM jr2ray_run WHERE id = %s", (self.run_id,)).fetchone()
        return None if r is None else _row(self.run_id, r)

    def _latest(self, conn: psycopg.Connection) -> tuple[str, dict[str, Any]] | None:
        return self._snap(conn.execute(_LATEST, (self.run_id,)).fetchone())

    def _snap(self, r: tuple[Any, ...] | None) -> tuple[str, dict[str, Any]] | None:
        return None if r is None else (r[0], self._json(r[1]))

    def _ledger(self, conn: psycopg.Connection, kind: str | LedgerKind | None) -> list[LedgerEntry]:
        q = _LEDGER
        args: tuple[Any, ...] = (self.run_id,)
        if kind is not None:
            q += " AND kind = %s"
            args += (_kind(kind),)
        return self._entries(conn.execute(q + " ORDER BY seq", args).fetchall())

    def _entries(self, rows: list[tuple[Any, ...]]) -> list[LedgerEntry]:
        return [LedgerEntry(seq=r[0], kind=r[1], key=r[2], digest=r[3], data=self._json(r[4]), at=r[5])
                for r in rows]

    def _json(self, text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise RunCorrupt(f"the journal of run {self.run_id} is damaged (a row is not JSON: {exc})") from None


class PgStore:
    """All runs' journals in one PostgreSQL database. Any process on any node may read; one handle writes a run."""

    shared = True  # any process on any node that reaches the database reads and writes the same runs

    def __init__(self, url: str, pool_min: int = POOL_MIN, pool_max: int = POOL_MAX) -> None:
        self.url = url
        self.location = url
        self.pool = pool_for(url, pool_min, pool_max)

    def timer_index(self) -> PgTimerIndex:
        return PgTimerIndex(self.pool)

    def open(self, run_id: str, *, create: bool = False) -> PgRunJournal:
        """A run's journal. Readers open with the default; only a run's first start passes `create=True`."""
        if not run_id:
            raise ValueError(f"bad run id {run_id!r}")
        return PgRunJournal(self.pool, run_id, create=create)

    def exists(self, run_id: str) -> bool:
        with self.pool.connection() as conn:
            got = conn.execute("SELECT 1 FROM jr2ray_run WHERE id = %s UNION ALL SELECT 1 FROM jr2ray_lost "
                               "WHERE id = %s LIMIT 1", (run_id, run_id)).fetchone()
        return got is not None

    def run_ids(self) -> list[str]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT id FROM jr2ray_run UNION SELECT id FROM jr2ray_lost ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    def mark_lost(self, run_id: str, reason: str) -> None:
        """Remember a run whose journal is gone, so that it lists as `lost` (its rows are never remade)."""
        with self.pool.connection() as conn:
            conn.execute("INSERT INTO jr2ray_lost (id, error, at) VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE "
                         "SET error = EXCLUDED.error, at = EXCLUDED.at", (run_id, reason, time.time()))

    def listing(self, run_id: str) -> RunListing:
        """One run's line; never raises for a bad row: the line says `corrupt` or `lost` and why."""
        for line in self._listings("WHERE id = %s", (run_id,)):
            return line
        return RunListing(id=run_id, status="lost", lifecycle="lost", error=f"the journal of run {run_id} is gone")

    def list_runs(self, limit: int | None = None, after: str | None = None,
                  status: str | list[str] | None = None) -> list[RunListing]:
        """Runs newest first, one indexed query on the run table (lost runs, whose rows are gone, come first)."""
        where: list[str] = []
        args: list[Any] = []
        if after is not None:
            at, rid = decode_cursor(after)
            where.append("(created_at, id) < (%s, %s)")
            args += [at, rid]
        if status is not None:
            where.append("status = ANY(%s)")
            args.append([status] if isinstance(status, str) else list(status))
        q = f"SELECT {_RUN_COLS} FROM jr2ray_run {'WHERE ' + ' AND '.join(where) if where else ''} " \
            "ORDER BY created_at DESC, id DESC"
        if limit is not None:
            q += " LIMIT %s"
            args.append(limit)
        with self.pool.connection() as conn:
            rows = conn.execute(q, args).fetchall()
            wants_lost = after is None and (status is None or "lost" in ([status] if isinstance(status, str)
                                                                          else status))
            lost = conn.execute("SELECT id, error FROM jr2ray_lost WHERE id NOT IN (SELECT id FROM jr2ray_run) "
                                "ORDER BY id").fetchall() if wants_lost else []
        lines = [RunListing(id=rid, status="lost", lifecycle="lost", error=error) for rid, error in lost]
        lines += [self._line(r) for r in rows]
        return lines if limit is None else lines[:limit]

    def indexed(self, run_id: str) -> RunListing | None:
        """The run's line from its row; None when the row is gone (a lost run keeps no workflow here)."""
        line = self.listing(run_id)
        return None if not line.workflow else line

    def set_parked(self, run_id: str, parked: bool, standing: dict[str, Any] | None = None) -> None:
        """Whether the run is parked (only in its journal), with how it stood then; `up` wakes the active runs that
        were not."""
        with self.pool.connection() as conn:
            if parked and standing is not None:
                conn.execute("UPDATE jr2ray_run SET parked = true, value = %s, waiting = %s, standing = %s "
                             "WHERE id = %s", (json.dumps((standing.get("status") or {}).get("value")),
                                               json.dumps(standing.get("waiting")), json.dumps(standing), run_id))
            else:
                conn.execute("UPDATE jr2ray_run SET parked = %s, waiting = NULL, standing = NULL WHERE id = %s",
                             (parked, run_id))

    def standing(self, run_id: str) -> dict[str, Any] | None:
        with self.pool.connection() as conn:
            got = conn.execute("SELECT standing FROM jr2ray_run WHERE id = %s AND parked", (run_id,)).fetchone()
        return json.loads(got[0]) if got and got[0] else None

    def create_runs(self, runs: list[NewRun]) -> None:
        """The whole batch in one transaction (rows, then their first entries); a run that exists is left alone."""
        if not runs:
            return
        now = time.time()
        with self.pool.connection() as conn, conn.transaction():
            made = conn.execute(
                "INSERT INTO jr2ray_run (id, workflow, digest, input, status, created_at, updated_at, version) "
                "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], "
                "%s::float8[], %s::float8[], %s::text[]) ON CONFLICT (id) DO NOTHING RETURNING id",
                ([r.id for r in runs], [r.workflow for r in runs], [r.digest for r in runs],
                 [json.dumps(r.input) for r in runs], [r.status for r in runs], [now] * len(runs),
                 [now] * len(runs), [r.version for r in runs])).fetchall()
            fresh = {m[0] for m in made}
            rows = [(r.id, k, key, r.digest, json.dumps(d, default=str), now)
                    for r in runs if r.id in fresh for k, key, d in r.entries]
            if rows:
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO jr2ray_ledger (run_id, kind, key, digest, data, at) "
                                    "VALUES (%s, %s, %s, %s, %s, %s)", rows)

    def awake_runs(self) -> list[str]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT id FROM jr2ray_run WHERE status = 'active' AND NOT parked "
                                "ORDER BY created_at, id").fetchall()
        return [r[0] for r in rows]

    def cursor(self, line: RunListing) -> str:
        return encode_cursor(line.created_at, line.id)

    def queued_runs(self) -> list[str]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT id FROM jr2ray_run WHERE status = 'queued' ORDER BY created_at, id").fetchall()
        return [r[0] for r in rows]

    def _line(self, r: tuple[Any, ...]) -> RunListing:
        try:
            row = _row(r[0], r)
        except RunCorrupt as exc:
            return RunListing(id=r[0], status="corrupt", lifecycle="corrupt", error=str(exc))
        life = lifecycle(row.status)
        parked = life == "active" and bool(r[8])  # a parked run lists with how it stood when it parked
        shown = (parked or life == "finished") and r[9]  # a live run's value changes without the index
        return RunListing(**row.model_dump(), lifecycle=life, value=json.loads(r[9]) if shown else None,
                          waiting=json.loads(r[10]) if parked and r[10] else None, version=r[11] or "")

    def _listings(self, where: str, args: tuple[Any, ...]) -> list[RunListing]:
        with self.pool.connection() as conn:
            rows = conn.execute(f"SELECT {_RUN_COLS} FROM jr2ray_run {where}", args).fetchall()
            lost = conn.execute(f"SELECT id, error FROM jr2ray_lost {where}", args).fetchall()
        out: dict[str, RunListing] = {}
        for rid, error in lost:
            out[rid] = RunListing(id=rid, status="lost", lifecycle="lost", error=error)
        for r in rows:
            out[r[0]] = self._line(r)  # a row that does not read lists as corrupt, with why
        return [out[k] for k in sorted(out)]

    def purge_finished(self, older_than_s: float = RETENTION_S, now: float | None = None) -> list[str]:
        """Remove the journals of runs finished (done, error, cancelled) more than `older_than_s` ago."""
        cutoff = (time.time() if now is None else now) - older_than_s
        with self.pool.connection() as conn:
            rows = conn.execute("DELETE FROM jr2ray_run WHERE status = ANY(%s) AND updated_at < %s RETURNING id",
                                (sorted(FINISHED), cutoff)).fetchall()
        return sorted(r[0] for r in rows)

    # ---- Workflow versions ---------------------------------------------------------------------------------
    def put_version(self, row: VersionRow) -> None:
        with self.pool.connection() as conn:
            conn.execute("INSERT INTO jr2ray_version (workflow, version, target, source, created_at) "
                         "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (workflow, version) DO NOTHING",
                         (row.workflow, row.version, row.target, row.source, row.created_at or time.time()))

    def get_version(self, workflow: str, version: str) -> VersionRow | None:
        got = self.versions(workflow, version)
        return got[0] if got else None

    def versions(self, workflow: str | None = None, version: str | None = None) -> list[VersionRow]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT workflow, version, target, source, created_at FROM jr2ray_version "
                                "WHERE (%s::text IS NULL OR workflow = %s) AND (%s::text IS NULL OR version = %s) "
                                "ORDER BY created_at, version", (workflow, workflow, version, version)).fetchall()
        return [VersionRow(workflow=w, version=v, target=t, source=src, created_at=at) for w, v, t, src, at in rows]

    def drop_version(self, workflow: str, version: str) -> bool:
        with self.pool.connection() as conn:
            cur = conn.execute("DELETE FROM jr2ray_version WHERE workflow = %s AND version = %s", (workflow, version))
            return cur.rowcount > 0

    def set_run_version(self, run_id: str, version: str) -> None:
        with self.pool.connection() as conn:
            conn.execute("UPDATE jr2ray_run SET version = %s WHERE id = %s", (version, run_id))

    def run_states(self) -> list[tuple[str, str, str]]:
        """(id, workflow, status) of every run, one query on the run table (a lost run whose row is gone: lost)."""
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT id, workflow, status FROM jr2ray_run UNION ALL SELECT id, '', 'lost' FROM "
                                "jr2ray_lost WHERE id NOT IN (SELECT id FROM jr2ray_run)").fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def version_counts(self) -> dict[tuple[str, str], dict[str, int]]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT workflow, version, status, COUNT(*) FROM jr2ray_run "
                                "GROUP BY workflow, version, status").fetchall()
        out: dict[tuple[str, str], dict[str, int]] = {}
        for w, v, status, n in rows:
            out.setdefault((w, v or ""), {})[status] = int(n)
        return out

    def export_run(self, run_id: str) -> RunImage:
        """The run's whole journal, read in one snapshot of the database (RunLost/RunCorrupt for a bad one)."""
        j = self.open(run_id)
        loaded = j.load()
        if loaded.row is None:
            raise RunLost(f"the journal of run {run_id} is gone")
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT digest, status, data, at FROM jr2ray_snapshot WHERE run_id = %s ORDER BY seq",
                                (run_id,)).fetchall()
        return RunImage(row=loaded.row, ledger=loaded.ledger,
                        snapshots=[SnapshotRow(digest=d, status=st, data=j._json(x), at=at) for d, st, x, at in rows])

    def import_run(self, image: RunImage) -> bool:
        """The copied run's row, snapshots and ledger in one transaction, times kept; nothing over an existing run."""
        r = image.row
        value = image.snapshots[-1].data.get("value") if image.snapshots else None
        with self.pool.connection() as conn, conn.transaction():
            made = conn.execute(
                "INSERT INTO jr2ray_run (id, workflow, digest, input, status, created_at, updated_at, value) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING id",
                (r.id, r.workflow, r.digest, json.dumps(r.input), r.status, r.created_at, r.updated_at,
                 json.dumps(value) if lifecycle(r.status) == "finished" else None)).fetchone()
            if made is None:
                return False
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO jr2ray_snapshot (run_id, digest, status, data, at) "
                                "VALUES (%s, %s, %s, %s, %s)",
                                [(r.id, sn.digest, sn.status, json.dumps(sn.data, default=str), sn.at)
                                 for sn in image.snapshots])
                cur.executemany("INSERT INTO jr2ray_ledger (run_id, kind, key, digest, data, at) "
                                "VALUES (%s, %s, %s, %s, %s, %s)",
                                [(r.id, e.kind, e.key, e.digest, json.dumps(e.data, default=str), e.at)
                                 for e in image.ledger])
        return True
