"""The Ray settings of every Ray instance jr2ray starts: by `jr2ray up`, and by `connect()` when it starts a private
local one (no instance recorded, or `RAY_ADDRESS=local`). One table, so a script's private Ray is sized as an
instance is, and a figure measured on one holds on the other.

Ray's GCS keeps every task's events for its dashboard, 100,000 by default: about 130 MB once 10,000 virtual runs
have woken a few times each, and 55 MB with 3,000 runs parked at their Gate (measured). jr2ray reads none of them,
so its instances keep fewer. A variable the caller set wins."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

INSTANCE_RAY_ENV = {"RAY_task_events_max_num_task_in_gcs": "10000"}


def with_instance_ray_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with jr2ray's Ray settings added under it (for `ray start`, which gets a whole environment)."""
    out = dict(env)
    for k, v in INSTANCE_RAY_ENV.items():
        out.setdefault(k, v)
    return out


@contextlib.contextmanager
def instance_ray_env() -> Iterator[None]:
    """While `ray.init` starts a local Ray here: the GCS and raylet it spawns inherit jr2ray's Ray settings (they
    read them from their environment). The caller's own environment is as it was afterwards."""
    added = {k: v for k, v in INSTANCE_RAY_ENV.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


__all__ = ["INSTANCE_RAY_ENV", "instance_ray_env", "with_instance_ray_env"]
