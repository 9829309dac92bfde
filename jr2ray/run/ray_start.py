"""The Ray settings of every Ray instance jr2ray starts: by `jr2ray up`, and by `connect()` when it starts a private
local one (no instance recorded, or `RAY_ADDRESS=local`). One table, so a script's private Ray is sized as an
instance is, and a figure measured on one holds on the other. A variable the caller set wins.

- Ray's GCS keeps every task's events for its dashboard, 100,000 by default: about 130 MB once 10,000 virtual runs
  have woken a few times each, and 55 MB with 3,000 runs parked at their Gate (34 MB capped; measured). jr2ray
  reads none of them, so its instances keep fewer.
- The raylet warns ("N PYTHON worker processes have been started ... the maximum expected startup concurrency")
  whenever the node's Python workers reach 4 times its startup concurrency, which is its CPU count: 8 on a 2-core
  box, so the warm host pool (one host a live-run slot, 30 there) set it off on every start, on the script's
  stdout. The bound is also the raylet's real limit on worker processes starting at once, so raising it to fit the
  pool lets other bursts (a Harness actor a conversation, Serve replicas) start more at once too; it is kept at
  most 8 a core. jr2ray's pool starts its own hosts a few at a time (`pool.START_AT_ONCE`). Many live Turns (each
  Harness is a worker too) can still bring the note back."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

TASK_EVENTS_VAR = "RAY_task_events_max_num_task_in_gcs"
STARTUP_VAR = "RAY_worker_maximum_startup_concurrency"
OTHER_WORKERS = 16  # Python workers besides the hosts: registry, timers, Serve's controller, proxy, apps, replicas


def startup_concurrency(live_run_slots: int) -> int:
    """The raylet's startup concurrency for a pool of `live_run_slots` hosts: its workers stay under the 4 times it
    that the raylet warns at; never below Ray's own (the CPU count), never above 8 a core."""
    cores = os.cpu_count() or 1
    return max(cores, min(8 * cores, -(-(live_run_slots + OTHER_WORKERS) // 4) + 1))


def instance_ray_vars(live_run_slots: int) -> dict[str, str]:
    """jr2ray's Ray settings for a node whose pool keeps `live_run_slots` warm hosts."""
    return {TASK_EVENTS_VAR: "10000", STARTUP_VAR: str(startup_concurrency(live_run_slots))}


def with_instance_ray_env(env: dict[str, str], live_run_slots: int) -> dict[str, str]:
    """`env` with jr2ray's Ray settings added under it (for `ray start`, which gets a whole environment)."""
    out = dict(env)
    for k, v in instance_ray_vars(live_run_slots).items():
        out.setdefault(k, v)
    return out


@contextlib.contextmanager
def instance_ray_env(live_run_slots: int) -> Iterator[None]:
    """While `ray.init` starts a local Ray here: the GCS and raylet it spawns inherit jr2ray's Ray settings (they
    read them from their environment). The caller's own environment is as it was afterwards."""
    before = dict(os.environ)  # Ray's own RAY_* variables, not jr2ray settings: a caller's value wins
    added = {k: v for k, v in instance_ray_vars(live_run_slots).items() if k not in before}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


__all__ = ["OTHER_WORKERS", "STARTUP_VAR", "TASK_EVENTS_VAR", "instance_ray_env", "instance_ray_vars",
           "startup_concurrency", "with_instance_ray_env"]
