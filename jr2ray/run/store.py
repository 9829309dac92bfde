"""The journal: embedded SQLite in WAL mode, one file per run so that each file has exactly one writer.

A narrow plain-data interface (Burr-style persister): the Run hands over JSON; the store knows no chart.
After every macrostep the snapshot (with its pending timers) and the ledger entries staged since the last one are
written in one transaction, before the next side effect runs.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

SCHEMA = """
CREATE TABLE IF NOT EXISTS run (
  id TEXT PRIMARY KEY, workflow TEXT NOT NULL, digest TEXT NOT NULL, input TEXT, status TEXT NOT NULL,
  created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshot (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT NOT NULL, status TEXT NOT NULL, data TEXT NOT NULL,
  at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, key TEXT, digest TEXT NOT NULL, data TEXT NOT NULL,
  at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_kind_key ON ledger(kind, key);
"""


class LedgerEntry(BaseModel):
    seq: int
    kind: str  # admission | receipt | notice | effect_started | effect_finished | turn | status
    key: str | None
    digest: str
    data: dict[str, Any]
    at: float


class RunRow(BaseModel):
    id: str
    workflow: str
    digest: str
    input: Any
    status: str
    created_at: float
    updated_at: float


class RunJournal:
    """The single writer of one run's file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    # ---- writes --------------------------------------------------------------------------------------------
    def create(self, run_id: str, workflow: str, digest: str, input: Any, status: str = "active") -> None:
        now = time.time()
        self._db.execute("INSERT INTO run (id, workflow, digest, input, status, created_at, updated_at) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (run_id, workflow, digest, json.dumps(input), status, now, now))

    def commit(self, digest: str, status: str, snapshot: dict[str, Any] | None,
               entries: list[tuple[str, str | None, dict[str, Any]]]) -> None:
        """One macrostep: the snapshot and the staged ledger entries, atomically."""
        now = time.time()
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            for kind, key, data in entries:
                cur.execute("INSERT INTO ledger (kind, key, digest, data, at) VALUES (?, ?, ?, ?, ?)",
                            (kind, key, digest, json.dumps(data, default=str), now))
            if snapshot is not None:
                cur.execute("INSERT INTO snapshot (digest, status, data, at) VALUES (?, ?, ?, ?)",
                            (digest, status, json.dumps(snapshot, default=str), now))
                cur.execute("DELETE FROM snapshot WHERE seq < (SELECT MAX(seq) FROM snapshot) - 50")
            cur.execute("UPDATE run SET status = ?, updated_at = ? ", (status, now))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    # ---- reads ---------------------------------------------------------------------------------------------
    def run(self) -> RunRow | None:
        row = self._db.execute("SELECT id, workflow, digest, input, status, created_at, updated_at FROM run"
                               ).fetchone()
        if row is None:
            return None
        return RunRow(id=row[0], workflow=row[1], digest=row[2], input=json.loads(row[3]) if row[3] else None,
                      status=row[4], created_at=row[5], updated_at=row[6])

    def latest_snapshot(self) -> tuple[str, dict[str, Any]] | None:
        row = self._db.execute("SELECT digest, data FROM snapshot ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def ledger(self, kind: str | None = None) -> list[LedgerEntry]:
        q = "SELECT seq, kind, key, digest, data, at FROM ledger"
        args: tuple[Any, ...] = ()
        if kind is not None:
            q += " WHERE kind = ?"
            args = (kind,)
        rows = self._db.execute(q + " ORDER BY seq", args).fetchall()
        return [LedgerEntry(seq=r[0], kind=r[1], key=r[2], digest=r[3], data=json.loads(r[4]), at=r[5])
                for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self._db.execute("SELECT kind, COUNT(*) FROM ledger GROUP BY kind").fetchall()
        return {k: n for k, n in rows}


class Store:
    """A directory of run journals. Readers may open any file; only the owning Run writes one."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, run_id: str) -> Path:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise ValueError(f"bad run id {run_id!r}")
        return self.directory / f"{run_id}.sqlite"

    def exists(self, run_id: str) -> bool:
        return self.path(run_id).exists()

    def open(self, run_id: str) -> RunJournal:
        return RunJournal(self.path(run_id))

    def run_ids(self) -> list[str]:
        return sorted(p.stem for p in self.directory.glob("*.sqlite"))

    def purge_finished(self, older_than_s: float = 7 * 24 * 3600) -> list[str]:
        """Finished runs are kept 7 days (R6); older ones are removed."""
        removed: list[str] = []
        cutoff = time.time() - older_than_s
        for rid in self.run_ids():
            j = self.open(rid)
            try:
                row = j.run()
            finally:
                j.close()
            if row and row.status in ("done", "error", "cancelled") and row.updated_at < cutoff:
                for suffix in ("", "-wal", "-shm"):
                    Path(str(self.path(rid)) + suffix).unlink(missing_ok=True)
                removed.append(rid)
        return removed
