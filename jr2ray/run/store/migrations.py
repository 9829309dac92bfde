"""The PostgreSQL journal's schema, as numbered migrations applied in order, each once.

Every run lives in the same few tables, keyed by run id (SQLite keeps one file per run instead). `migrate` runs at
store open under a transaction-scoped advisory lock, so several processes opening one database at once apply each
step exactly once. A new schema change is a new entry at the end of `MIGRATIONS`; an applied entry is never edited.
"""

from __future__ import annotations

import psycopg

# One fixed key for the schema lock (any 64-bit number no other user of the database takes).
_LOCK_KEY = 0x6A72327261790001

MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "runs, snapshots and ledger", """
CREATE TABLE jr2ray_run (
  id TEXT PRIMARY KEY,
  workflow TEXT NOT NULL,
  digest TEXT NOT NULL,
  input TEXT,
  status TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL,
  updated_at DOUBLE PRECISION NOT NULL,
  epoch BIGINT NOT NULL DEFAULT 0,
  holder TEXT
);
CREATE INDEX jr2ray_run_status_updated ON jr2ray_run (status, updated_at);
CREATE TABLE jr2ray_snapshot (
  run_id TEXT NOT NULL REFERENCES jr2ray_run (id) ON DELETE CASCADE,
  seq BIGSERIAL,
  digest TEXT NOT NULL,
  status TEXT NOT NULL,
  data TEXT NOT NULL,
  at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE TABLE jr2ray_ledger (
  run_id TEXT NOT NULL REFERENCES jr2ray_run (id) ON DELETE CASCADE,
  seq BIGSERIAL,
  kind TEXT NOT NULL,
  key TEXT,
  digest TEXT NOT NULL,
  data TEXT NOT NULL,
  at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE INDEX jr2ray_ledger_kind_key ON jr2ray_ledger (run_id, kind, key);
CREATE TABLE jr2ray_lost (
  id TEXT PRIMARY KEY,
  error TEXT NOT NULL,
  at DOUBLE PRECISION NOT NULL
);
"""),
    (2, "timers of parked runs", """
CREATE TABLE jr2ray_timer (
  run_id TEXT PRIMARY KEY REFERENCES jr2ray_run (id) ON DELETE CASCADE,
  due_ms DOUBLE PRECISION NOT NULL
);
CREATE INDEX jr2ray_timer_due ON jr2ray_timer (due_ms);
"""),
    (3, "the run list's index (newest first, and by status) and whether a run is parked", """
CREATE INDEX jr2ray_run_newest ON jr2ray_run (created_at DESC, id DESC);
CREATE INDEX jr2ray_run_status_newest ON jr2ray_run (status, created_at DESC, id DESC);
ALTER TABLE jr2ray_run ADD COLUMN parked BOOLEAN NOT NULL DEFAULT false;
"""),
    (4, "how a parked run stood when it parked: its value, where it waits, and its whole standing", """
ALTER TABLE jr2ray_run ADD COLUMN value TEXT;
ALTER TABLE jr2ray_run ADD COLUMN waiting TEXT;
ALTER TABLE jr2ray_run ADD COLUMN standing TEXT;
"""),
    (5, "Workflow versions (the source each run is pinned to) and each run's version", """
CREATE TABLE jr2ray_version (
  workflow TEXT NOT NULL,
  version TEXT NOT NULL,
  target TEXT NOT NULL,
  source TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (workflow, version)
);
ALTER TABLE jr2ray_run ADD COLUMN version TEXT NOT NULL DEFAULT '';
CREATE INDEX jr2ray_run_version ON jr2ray_run (workflow, version);
"""),
]


def migrate(conn: psycopg.Connection) -> int:
    """Bring the database to the newest schema; returns the version it is at. Safe to call from many processes."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute("CREATE TABLE IF NOT EXISTS jr2ray_schema (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                     "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM jr2ray_schema").fetchone()
        current = int(row[0]) if row else 0
        for version, name, sql in MIGRATIONS:
            if version <= current:
                continue
            conn.execute(sql)
            conn.execute("INSERT INTO jr2ray_schema (version, name) VALUES (%s, %s)", (version, name))
            current = version
    return current


def schema_version(conn: psycopg.Connection) -> int:
    """The version the database is at (0 for a database no jr2ray store has opened)."""
    row = conn.execute("SELECT to_regclass('jr2ray_schema') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    got = conn.execute("SELECT COALESCE(MAX(version), 0) FROM jr2ray_schema").fetchone()
    return int(got[0]) if got else 0
