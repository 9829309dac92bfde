"""One store suite, both backends: the `backend` fixture gives each test a fresh SQLite directory or a fresh
PostgreSQL database (on one throwaway server for the whole session), with the few hooks a test needs to damage a
journal the way each backend can be damaged.

Without PostgreSQL's server binaries the postgresql half skips locally and fails in CI (CI is set there).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import pg_server  # noqa: E402


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A running throwaway PostgreSQL server's URL, stopped and removed after the session."""
    if not pg_server.available():
        msg = "PostgreSQL's initdb/pg_ctl are missing (.ci/install installs Debian's postgresql)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    server = pg_server.PgServer().start()
    try:
        yield server.url
    finally:
        from jr2ray.run.store.postgresql import close_pools

        close_pools()
        server.stop()


class Backend:
    """A fresh store of one kind, and how to break one of its journals."""

    name = ""

    def make(self) -> Any:
        raise NotImplementedError

    def remove(self, store: Any, run_id: str) -> None:
        """The run's journal vanishes (a deleted file, deleted rows)."""
        raise NotImplementedError

    def damage(self, store: Any, run_id: str) -> None:
        """The run's journal is there but cannot be read."""
        raise NotImplementedError

    def backdate(self, store: Any, run_id: str, at: float) -> None:
        """Pretend the run was last written at `at`."""
        raise NotImplementedError

    def dump(self, store: Any, run_id: str) -> bytes:
        """Everything the backend keeps of one run, as bytes: what a refusal must leave identical."""
        raise NotImplementedError

    def location(self) -> str:
        """The JR2RAY_STORE value that names this store."""
        raise NotImplementedError


class SqliteBackend(Backend):
    name = "sqlite"

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    def make(self) -> Any:
        from jr2ray.run.store import Store

        return Store(self.tmp / "runs")

    def location(self) -> str:
        return str(self.tmp / "runs")

    def remove(self, store: Any, run_id: str) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(str(store.path(run_id)) + suffix).unlink(missing_ok=True)

    def damage(self, store: Any, run_id: str) -> None:
        path = store.path(run_id)
        for suffix in ("-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        with open(path, "r+b") as f:
            f.truncate(1000)

    def backdate(self, store: Any, run_id: str, at: float) -> None:
        j = store.open(run_id)
        j._db.execute("UPDATE run SET updated_at = ?", (at,))
        j.close()

    def dump(self, store: Any, run_id: str) -> bytes:
        from jr2ray.run.store import journal_bytes

        return journal_bytes(store.path(run_id))


class PgBackend(Backend):
    name = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url

    def make(self) -> Any:
        from jr2ray.run.store.postgresql import PgStore

        store = PgStore(self.url)
        with store.pool.connection() as conn:
            conn.execute("TRUNCATE jr2ray_run, jr2ray_snapshot, jr2ray_ledger, jr2ray_lost, jr2ray_timer, "
                         "jr2ray_version")
        return store

    def location(self) -> str:
        return self.url

    def _sql(self, store: Any, q: str, args: tuple[Any, ...]) -> None:
        with store.pool.connection() as conn:
            conn.execute(q, args)

    def remove(self, store: Any, run_id: str) -> None:
        self._sql(store, "DELETE FROM jr2ray_run WHERE id = %s", (run_id,))

    def damage(self, store: Any, run_id: str) -> None:
        self._sql(store, "UPDATE jr2ray_run SET input = '{\"changes\": ' WHERE id = %s", (run_id,))
        self._sql(store, "UPDATE jr2ray_ledger SET data = left(data, 3) WHERE run_id = %s", (run_id,))

    def backdate(self, store: Any, run_id: str, at: float) -> None:
        self._sql(store, "UPDATE jr2ray_run SET updated_at = %s WHERE id = %s", (at, run_id))

    def dump(self, store: Any, run_id: str) -> bytes:
        out = []
        with store.pool.connection() as conn:
            for table, key in (("jr2ray_run", "id"), ("jr2ray_snapshot", "run_id"), ("jr2ray_ledger", "run_id"),
                               ("jr2ray_lost", "id")):
                rows = conn.execute(f"SELECT * FROM {table} WHERE {key} = %s ORDER BY 1, 2", (run_id,)).fetchall()
                out.append(repr((table, rows)))
        return "\n".join(out).encode()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return SqliteBackend(tmp_path)
    return PgBackend(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.make()


@pytest.fixture
def now() -> float:
    return time.time()
