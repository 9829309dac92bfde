"""The PostgreSQL schema comes from numbered migrations: applied in order, once, however many processes open it."""

from __future__ import annotations

import threading

import psycopg

from jr2ray.run.store.migrations import MIGRATIONS, migrate, schema_version


def test_migrations_apply_once_in_order_and_are_safe_to_race(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE mig_race")
    url = pg_url.rsplit("/", 1)[0] + "/mig_race"
    with psycopg.connect(url, autocommit=True) as conn:
        assert schema_version(conn) == 0
    got: list[int] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            with psycopg.connect(url, autocommit=True) as c:
                got.append(migrate(c))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    newest = MIGRATIONS[-1][0]
    assert errors == [] and got == [newest] * 4
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT version, name FROM jr2ray_schema ORDER BY version").fetchall()
        assert rows == [(v, n) for v, n, _ in MIGRATIONS]
        assert migrate(conn) == newest and schema_version(conn) == newest
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'jr2ray_%'")}
        assert {"jr2ray_run", "jr2ray_snapshot", "jr2ray_ledger", "jr2ray_lost", "jr2ray_schema"} <= tables
    assert [v for v, _, _ in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
