"""The run index of a SQLite store: one small database beside the journals (`<store>/_index/runs.sqlite`), one row
per run, so listing runs reads one indexed table instead of opening every journal.

The journal stays the truth. A journal writes its row when the run is created and again whenever the run's status
changes, right after the commit that changed it; a lost run's row says `lost`. An index that was never filled (a
store from before it existed, or one deleted) is rebuilt from the journals once, when the store first lists.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

INDEX_FILE = "_index/runs.sqlite"  # below the store, never beside the journals (<id>.sqlite)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  id TEXT PRIMARY KEY, workflow TEXT NOT NULL, digest TEXT NOT NULL, input TEXT, status TEXT NOT NULL,
  error TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL, parked INTEGER NOT NULL DEFAULT 0, value TEXT,
  waiting TEXT, standing TEXT
);
CREATE INDEX IF NOT EXISTS runs_newest ON runs(created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS runs_status_newest ON runs(status, created_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS versions (
  workflow TEXT NOT NULL, version TEXT NOT NULL, target TEXT NOT NULL, source TEXT NOT NULL, created_at REAL NOT NULL,
  PRIMARY KEY (workflow, version)
);
"""
COLUMNS = "id, workflow, digest, input, status, error, created_at, updated_at, parked, value, waiting, version"
# columns an index made before them gets on open
_ADDED = {"waiting": "TEXT", "standing": "TEXT", "version": "TEXT NOT NULL DEFAULT ''"}

_indexes: dict[Path, RunIndex] = {}
_resolved: dict[Path, Path] = {}  # a store directory as given -> its real path
_indexes_lock = threading.Lock()


def encode_cursor(created_at: float, run_id: str) -> str:
    """The page cursor after a run: opaque to callers, `<created_at>~<id>` here."""
    return f"{created_at!r}~{run_id}"


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (created_at, id) a cursor names; ValueError for one this store did not make."""
    at, sep, run_id = cursor.partition("~")
    if not sep or not run_id:
        raise ValueError(f"bad cursor {cursor!r}")
    return float(at), run_id


class RunIndex:
    """run id -> its listing line. Any process may read or write it; every write is one short statement."""

    def __init__(self, store_dir: Path) -> None:
        self.path = store_dir / INDEX_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        have = {r[1] for r in self._db.execute("PRAGMA table_info(runs)")}
        for col, kind in _ADDED.items():
            if col not in have:
                self._db.execute(f"ALTER TABLE runs ADD COLUMN {col} {kind}")

    def built(self) -> bool:
        """Has the index been filled from the store's journals once (the store does it on first use)?"""
        with self._lock:
            return self._db.execute("SELECT 1 FROM meta WHERE key = 'built'").fetchone() is not None

    def mark_built(self) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('built', '1')")

    def put(self, row: dict[str, Any]) -> None:
        """Insert or replace a run's whole line (at create, at rebuild, when lost)."""
        self.put_many([row])

    def put_many(self, rows: list[dict[str, Any]]) -> None:
        """Insert or replace many lines in one transaction (a batch of starts)."""
        vals = [(row["id"], row.get("workflow", ""), row.get("digest", ""), json.dumps(row.get("input")),
                 row["status"], row.get("error"), row.get("created_at", 0.0), row.get("updated_at", 0.0),
                 int(row.get("parked", 0)), json.dumps(row.get("value")), None, row.get("version") or "")
                for row in rows]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(f"INSERT OR REPLACE INTO runs ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
                                     "?, ?, ?)", vals)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def set_status(self, run_id: str, status: str, updated_at: float, error: str | None = None,
                   value: Any = None) -> None:
        """The run's new status, and its value then (what a finished run lists with)."""
        with self._lock:
            self._db.execute("UPDATE runs SET status = ?, updated_at = ?, error = ?, value = ? WHERE id = ?",
                             (status, updated_at, error, json.dumps(value), run_id))

    def set_parked(self, run_id: str, parked: bool, standing: dict[str, Any] | None = None) -> None:
        """Whether the run was parked (only in its journal) when last seen: `up` wakes the active ones that were not.
        A parked run keeps how it stood (its value and where it waits are listed from it); a hosted one none."""
        if standing is None:
            with self._lock:
                self._db.execute("UPDATE runs SET parked = ?, waiting = NULL, standing = NULL WHERE id = ?",
                                 (int(parked), run_id))
            return
        value = json.dumps((standing.get("status") or {}).get("value"))
        with self._lock:
            self._db.execute("UPDATE runs SET parked = ?, value = ?, waiting = ?, standing = ? WHERE id = ?",
                             (int(parked), value, json.dumps(standing.get("waiting")), json.dumps(standing), run_id))

    def standing(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            r = self._db.execute("SELECT standing FROM runs WHERE id = ? AND parked = 1", (run_id,)).fetchone()
        return json.loads(r[0]) if r and r[0] else None

    def delete(self, run_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    def page(self, limit: int | None, after: str | None = None,
             status: str | list[str] | None = None, oldest_first: bool = False) -> list[dict[str, Any]]:
        """Rows newest first (or oldest first), after `after` (a cursor), with a status in `status` if given."""
        where: list[str] = []
        args: list[Any] = []
        if after is not None:
            at, rid = decode_cursor(after)
            where.append("(created_at, id) > (?, ?)" if oldest_first else "(created_at, id) < (?, ?)")
            args += [at, rid]
        if status is not None:
            names = [status] if isinstance(status, str) else list(status)
            where.append(f"status IN ({', '.join('?' for _ in names)})")
            args += names
        order = "ASC" if oldest_first else "DESC"
        q = f"SELECT {COLUMNS} FROM runs {'WHERE ' + ' AND '.join(where) if where else ''} " \
            f"ORDER BY created_at {order}, id {order}"
        if limit is not None:
            q += " LIMIT ?"
            args.append(limit)
        with self._lock:
            rows = self._db.execute(q, args).fetchall()
        return [_row(r) for r in rows]

    def states(self) -> list[tuple[str, str, str]]:
        """(id, workflow, status) of every row: three columns, no JSON decoded."""
        with self._lock:
            return [(r[0], r[1], r[2]) for r in self._db.execute("SELECT id, workflow, status FROM runs")]

    def one(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            r = self._db.execute(f"SELECT {COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if r is None else _row(r)

    def ids(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT id FROM runs")}

    # ---- Workflow versions ---------------------------------------------------------------------------------
    def put_version(self, workflow: str, version: str, target: str, source: str, at: float) -> None:
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO versions (workflow, version, target, source, created_at) "
                             "VALUES (?, ?, ?, ?, ?)", (workflow, version, target, source, at))

    def versions(self, workflow: str | None = None, version: str | None = None) -> list[tuple[Any, ...]]:
        where, args = [], []
        if workflow is not None:
            where.append("workflow = ?")
            args.append(workflow)
        if version is not None:
            where.append("version = ?")
            args.append(version)
        q = "SELECT workflow, version, target, source, created_at FROM versions"
        q += (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY created_at, version"
        with self._lock:
            return list(self._db.execute(q, args).fetchall())

    def drop_version(self, workflow: str, version: str) -> bool:
        with self._lock:
            cur = self._db.execute("DELETE FROM versions WHERE workflow = ? AND version = ?", (workflow, version))
        return cur.rowcount > 0

    def set_version(self, run_id: str, version: str) -> None:
        with self._lock:
            self._db.execute("UPDATE runs SET version = ? WHERE id = ?", (version, run_id))

    def version_counts(self) -> list[tuple[str, str, str, int]]:
        with self._lock:
            return list(self._db.execute("SELECT workflow, version, status, COUNT(*) FROM runs "
                                         "GROUP BY workflow, version, status").fetchall())

    def close(self) -> None:
        self._db.close()


def _row(r: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(COLUMNS.split(", "), r, strict=True)) | {"input": json.loads(r[3]) if r[3] else None,
                                                             "value": json.loads(r[9]) if r[9] else None,
                                                             "waiting": json.loads(r[10]) if r[10] else None,
                                                             "version": r[11] or ""}


def run_index(store_dir: Path) -> RunIndex:
    """This process's one connection to a store's index. The directory's real path is worked out once: a driver
    reads a parked run's standing here at every wake, and `resolve()` was a walk of system calls each time."""
    key = _resolved.get(store_dir)
    if key is None:
        key = _resolved[store_dir] = store_dir.resolve()
    with _indexes_lock:
        got = _indexes.get(key)
        if got is None or not got.path.exists():
            got = _indexes[key] = RunIndex(key)
        return got
