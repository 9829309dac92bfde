"""The due-time index of parked runs' timers, kept beside the journals in whichever store holds them.

SQLite: one small file below the store directory (never beside the journals, which are `<id>.sqlite`). PostgreSQL:
one table in the same database, so a host on any node records a parked run's reminder and the timer service,
wherever it runs, reads it. Both offer `set`, `due`, `fired` and `close` (`TimerIndex` in `base`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

INDEX_FILE = "_index/timers.sqlite"


class SqliteTimerIndex:
    """run id -> earliest due time (epoch ms) of a parked run. One row per run; readers and writers in any process
    of the store's node."""

    def __init__(self, store_dir: str | Path) -> None:
        self.path = Path(store_dir) / INDEX_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=10)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS due (run_id TEXT PRIMARY KEY, due_ms REAL NOT NULL)")
        self._db.execute("CREATE INDEX IF NOT EXISTS due_by_time ON due(due_ms)")

    def set(self, run_id: str, due_ms: float | None) -> None:
        if due_ms is None:
            self._db.execute("DELETE FROM due WHERE run_id = ?", (run_id,))
        else:
            self._db.execute("INSERT OR REPLACE INTO due (run_id, due_ms) VALUES (?, ?)", (run_id, due_ms))

    def due(self, before_ms: float, limit: int = 1000) -> list[tuple[str, float]]:
        rows = self._db.execute("SELECT run_id, due_ms FROM due WHERE due_ms <= ? ORDER BY due_ms LIMIT ?",
                                (before_ms, limit)).fetchall()
        return [(str(r), float(d)) for r, d in rows]

    def fired(self, run_id: str, due_ms: float) -> None:
        """Drop the row, unless the run re-parked with another due time meanwhile."""
        self._db.execute("DELETE FROM due WHERE run_id = ? AND due_ms = ?", (run_id, due_ms))

    def close(self) -> None:
        self._db.close()


class PgTimerIndex:
    """The same index as a table of the PostgreSQL store (migration 2), shared by every node."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def set(self, run_id: str, due_ms: float | None) -> None:
        with self.pool.connection() as conn:
            if due_ms is None:
                conn.execute("DELETE FROM jr2ray_timer WHERE run_id = %s", (run_id,))
            else:
                conn.execute("INSERT INTO jr2ray_timer (run_id, due_ms) VALUES (%s, %s) ON CONFLICT (run_id) "
                             "DO UPDATE SET due_ms = EXCLUDED.due_ms", (run_id, due_ms))

    def due(self, before_ms: float, limit: int = 1000) -> list[tuple[str, float]]:
        bound = min(before_ms, 1e300)  # float('inf') is not a double PostgreSQL compares as wanted here
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT run_id, due_ms FROM jr2ray_timer WHERE due_ms <= %s ORDER BY due_ms "
                                "LIMIT %s", (bound, limit)).fetchall()
        return [(str(r), float(d)) for r, d in rows]

    def fired(self, run_id: str, due_ms: float) -> None:
        with self.pool.connection() as conn:
            conn.execute("DELETE FROM jr2ray_timer WHERE run_id = %s AND due_ms = %s", (run_id, due_ms))

    def close(self) -> None:
        """Nothing to release: connections go back to the store's pool after every call."""
