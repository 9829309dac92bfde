"""The journal store: one narrow interface (`base`), backends registered by URL scheme (`backends`), picked by one
setting.

- `sqlite` (the default, embedded): a directory with one SQLite file per run, so each file has one writer.
- `postgresql`: every run in one PostgreSQL database (psycopg 3 and a connection pool; the schema comes from the
  numbered migrations in `migrations`), so a run's actor may live on any node.

`JR2RAY_STORE` (or `jr2ray up --store`) is a directory or a URL (`postgresql://...`); `open_store` turns it into a
store, `is_shared` says whether several nodes can use it, `ping` whether it answers. Nothing outside this package
reads the setting's form. The PostgreSQL backend's module is imported only when a `postgresql://` store is opened,
so the SQLite path needs no database driver loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backends import (
    DIRECTORY,
    StoreBackend,
    UnknownStoreScheme,
    backend_for,
    is_shared,
    open_store,
    ping,
    register_backend,
    registered_backends,
    scheme_of,
)
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
    VersionRow,
)
from .sqlite import SCHEMA, RunJournal, SqliteBackend, Store, journal_bytes

if TYPE_CHECKING:
    from jr2ray.settings import Settings

    from .postgresql import PgRunJournal, PgStore


class PostgresqlBackend:
    """`postgresql://` (or `postgres://`) URLs: every run in one database. Its module (and psycopg) loads on the
    first open or ping, so registering it costs nothing."""

    name = "postgresql"
    schemes = ("postgresql", "postgres")
    shared = True  # any process on any node that reaches the database reads and writes the same runs

    def open(self, location: str, settings: Settings | None) -> JournalStore:
        from .postgresql import PgStore

        if settings is None:
            return PgStore(location)
        return PgStore(location, pool_min=settings.store_pool_min, pool_max=settings.store_pool_max)

    def ping(self, location: str, timeout_s: float) -> None:
        from .postgresql import ping as pg_ping

        pg_ping(location, timeout_s)


register_backend(SqliteBackend())
register_backend(PostgresqlBackend())


def __getattr__(name: str) -> Any:  # PgStore and PgRunJournal load psycopg only when first named
    if name in ("PgStore", "PgRunJournal"):
        from . import postgresql

        return getattr(postgresql, name)
    raise AttributeError(name)


__all__ = ["DIRECTORY", "RETENTION_S", "SCHEMA", "Entry", "Journal", "JournalStore", "LedgerEntry", "LedgerKind",
           "Loaded", "NewRun", "PgRunJournal", "PgStore", "PostgresqlBackend", "RunImage", "RunJournal", "RunListing",
           "RunRow", "SnapshotRow", "SqliteBackend", "Store", "StoreBackend", "TimerIndex", "UnknownStoreScheme",
           "VersionRow", "backend_for", "is_shared", "journal_bytes", "open_store", "ping", "register_backend",
           "registered_backends", "scheme_of"]
