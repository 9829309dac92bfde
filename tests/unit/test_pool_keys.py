"""The host pool's keys: runs a script starts with no env of their own share the pool `up` warmed for the instance
(the env its API starts runs with), so a script's first burst takes those hosts instead of starting its own."""

from __future__ import annotations

import asyncio
from typing import Any

from jr2ray.run.host import pool_key
from jr2ray.run.pool import HostPool

INSTANCE = pool_key({"env": {"JR2RAY_WORKFLOWS": "workflows.notes", "JR2RAY_HOME": "/srv/jr2ray"}, "launcher": None})
BARE = pool_key({"env": {}, "launcher": None})
OTHER = pool_key({"env": {"JR2RAY_TELEMETRY": "off"}, "launcher": None})


def _pool() -> HostPool:
    return HostPool("jr2ray:registry", "/tmp/runs", "head", idle_s=5.0, queued_idle_s=0.25, is_live=lambda _h: False)


def test_a_bare_run_takes_a_host_warmed_for_the_instance_and_gives_it_back_there() -> None:
    async def go() -> None:
        pool = _pool()
        pool.serve_bare(INSTANCE)
        host: Any = object()
        pool.put(INSTANCE, "h1", host)
        assert await pool.take(BARE) == ("h1", host)
        pool.put(BARE, "h1", host)  # its run parked: back to the one pool
        assert pool.idle[INSTANCE] == [("h1", host)] and not pool.idle[BARE]
        assert await pool.take(INSTANCE) == ("h1", host)

    asyncio.run(go())


def test_without_an_instance_key_or_with_another_env_the_pools_stay_apart() -> None:
    async def go() -> None:
        pool = _pool()
        host: Any = object()
        pool.put(INSTANCE, "h1", host)
        pool.put(BARE, "h2", host)
        assert pool.idle[BARE] == [("h2", host)], "no instance named yet: a bare run's pool is its own"
        pool.serve_bare(INSTANCE)
        pool.put(OTHER, "h3", host)
        assert pool.idle[OTHER] == [("h3", host)], "a run with an env of its own keeps its own pool"
        assert await pool.take(OTHER) == ("h3", host)

    asyncio.run(go())


def test_a_launcher_of_its_own_keeps_a_bare_run_out_of_the_instance_pool() -> None:
    async def go() -> None:
        pool = _pool()
        pool.serve_bare(pool_key({"env": {"JR2RAY_HOME": "/srv/jr2ray"}, "launcher": "auto"}))
        host: Any = object()
        pool.put(BARE, "h1", host)  # launcher None: not the instance's launcher
        assert pool.idle[BARE] == [("h1", host)]

    asyncio.run(go())
