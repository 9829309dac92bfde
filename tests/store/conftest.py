"""One store suite, every registered backend: the `backend` fixture runs each test once per backend the store
seam has registered (`jr2ray.run.store.registered_backends()`), giving it a fresh store of that kind (a SQLite
directory, a PostgreSQL database on one throwaway server for the whole session, a `memory://` store) with the few
hooks a test needs to damage a journal the way that backend can be damaged (a `Backend`, one per registered name).

The `memory` backend is registered here, by the tests alone (memory_backend.py): it proves that a backend joins the
product and this suite by registration, with no edit outside jr2ray/run/store/.

Without PostgreSQL's server binaries the postgresql part skips locally and fails in CI (CI is set there).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import memory_backend  # noqa: E402
import pg_server  # noqa: E402

from jr2ray.run.store import open_store, register_backend, registered_backends  # noqa: E402

register_backend(memory_backend.MemoryBackend())


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

    def journal_class(self) -> type:
        """The class of this backend's per-run journal handles (a test counts the journals a listing opens)."""
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

    def journal_class(self) -> type:
        from jr2ray.run.store.sqlite import RunJournal

        return RunJournal


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

    def journal_class(self) -> type:
        from jr2ray.run.store.postgresql import PgRunJournal

        return PgRunJournal


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self) -> None:
        self.url = f"memory://{uuid.uuid4().hex}"  # a fresh store for each test

    def make(self) -> Any:
        return open_store(self.url)

    def location(self) -> str:
        return self.url

    def remove(self, store: Any, run_id: str) -> None:
        with store.lock:
            del store.runs[run_id]

    def damage(self, store: Any, run_id: str) -> None:
        with store.lock:
            r = store.runs[run_id]
            r.input = '{"changes": '
            r.ledger = [(*e[:4], e[4][:3], e[5]) for e in r.ledger]

    def backdate(self, store: Any, run_id: str, at: float) -> None:
        with store.lock:
            store.runs[run_id].updated_at = at

    def dump(self, store: Any, run_id: str) -> bytes:
        with store.lock:
            return repr((store.runs.get(run_id), store.lost.get(run_id))).encode()

    def journal_class(self) -> type:
        return memory_backend.MemoryJournal


# The test hooks of each backend the store seam registers, by its name: a backend registered without one fails here.
BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Backend]] = {
    "sqlite": lambda request, tmp: SqliteBackend(tmp),
    "postgresql": lambda request, tmp: PgBackend(request.getfixturevalue("pg_url")),
    "memory": lambda request, tmp: MemoryBackend(),
}


@pytest.fixture(params=registered_backends())
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    hooks = BACKENDS.get(request.param)
    if hooks is None:
        pytest.fail(f"store backend {request.param!r} is registered but tests/store/conftest.py has no hooks for it")
    return hooks(request, tmp_path)


@pytest.fixture
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Backend]:
    """A backend's test hooks by name, for a test that needs two at once (a store copy). Test modules take them
    through this fixture, never `from conftest import ...`: the whole suite has several conftest modules."""
    return lambda name: BACKENDS[name](request, tmp_path)


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.make()


@pytest.fixture
def now() -> float:
    return time.time()
