"""The journal store: one narrow interface (`base`), two backends, picked by one setting.

- `sqlite` (the default, embedded): a directory with one SQLite file per run, so each file has one writer.
- `postgresql`: every run in one PostgreSQL database (psycopg 3 and a connection pool; the schema comes from the
  numbered migrations in `migrations`), so a run's actor may live on any node.

`JR2RAY_STORE` (or `jr2ray up --store`) is a directory or a `postgresql://` URL; `open_store` turns either into a
store. The PostgreSQL backend is imported only when asked for, so the SQLite path needs no database driver loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import (
    RETENTION_S,
    Entry,
    Journal,
    JournalStore,
    LedgerEntry,
    LedgerKind,
    Loaded,
    NewRun,
    RunImage,
    RunListing,
    RunRow,
    SnapshotRow,
    TimerIndex,
)
from .sqlite import SCHEMA, RunJournal, Store, journal_bytes

if TYPE_CHECKING:
    from .postgresql import PgRunJournal, PgStore


def is_database_url(location: str | Path) -> bool:
    """Does a store setting name a PostgreSQL database rather than a directory?"""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def open_store(location: str | Path) -> JournalStore:
    """The store a setting names: a `postgresql://` URL, else a directory of SQLite journals."""
    if is_database_url(location):
        from .postgresql import PgStore

        return PgStore(str(location))
    return Store(location)


def __getattr__(name: str) -> Any:  # PgStore and PgRunJournal load psycopg only when first named
    if name in ("PgStore", "PgRunJournal"):
        from . import postgresql

        return getattr(postgresql, name)
    raise AttributeError(name)


__all__ = ["RETENTION_S", "SCHEMA", "Entry", "Journal", "JournalStore", "LedgerEntry", "LedgerKind", "Loaded", "NewRun",
           "PgRunJournal", "PgStore", "RunImage", "RunJournal", "RunListing", "RunRow", "SnapshotRow", "Store",
           "TimerIndex", "is_database_url",
           "journal_bytes", "open_store"]
