"""Timers of parked runs (reminders): a durable index of due times, and the one service that fires them.

A run that parks with pending `after` timers records its earliest deadline in `<store>/timers.sqlite`. The timer
service, a detached Ray actor restarted by Ray, activates each run a little before its deadline; the run's engine
restores its timers from the journal and fires them on time (at once when overdue, as after a `down`/`up`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, cast

import ray

TIMERS_NAME = "jr2ray:timers"
INDEX_FILE = "_index/timers.sqlite"  # below the store, never beside the journals (<id>.sqlite)
LEAD_MS = 300.0  # activate this early: the engine then fires the timer itself, at its deadline
POLL_S = 0.1
BEAT_S = 2.0  # how often the registry hears from the timer service (a restarted one then recovers at once)


class TimerIndex:
    """run id -> earliest due time (epoch ms) of a parked run. One row per run; readers and writers in any process."""

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


def earliest_due_ms(snapshot: Any) -> float | None:
    timers = getattr(snapshot, "timers", None) or {}
    return min((t.deadline_ms for t in timers.values()), default=None)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class TimerService:
    """Fires due timers of parked runs by activating them. Catches up on overdue ones when (re)started.

    Its loop is a thread started by `__init__`, so a restart by Ray resumes it with nobody calling in."""

    def __init__(self, store_dir: str, registry: str = "") -> None:
        from .host import registry_name

        self.registry_name = registry or registry_name(store_dir)
        self.index = TimerIndex(store_dir)
        self.fired_count = 0
        threading.Thread(target=self._run, name="jr2ray-timers", daemon=True).start()

    def _run(self) -> None:
        registry = None
        beat = 0.0
        while True:
            try:
                if registry is None or time.monotonic() >= beat:  # a restarted registry wakes on this
                    registry = registry or ray.get_actor(self.registry_name)
                    registry.ping.remote()
                    beat = time.monotonic() + BEAT_S
                due = self.index.due(time.time() * 1000 + LEAD_MS)
                refs: list[tuple[str, float, Any]] = [(rid, at, registry.activate.remote(rid)) for rid, at in due]
                for rid, at, ref in refs:
                    with contextlib.suppress(Exception):  # a lost or corrupt run: its status says why
                        ray.get(ref, timeout=60)
                    self.index.fired(rid, at)
                    self.fired_count += 1
            except Exception:  # noqa: BLE001 - the registry is (re)starting: try again shortly
                registry = None
            time.sleep(POLL_S)

    def stats(self) -> dict[str, Any]:
        return {"fired": self.fired_count, "pending": len(self.index.due(float("inf")))}


def get_timer_service(store_dir: str, namespace: str) -> Any:
    actor_class = cast(Any, TimerService)  # mypy ignores @ray.remote; at run time it is an ActorClass
    from .host import registry_name

    return actor_class.options(name=f"{TIMERS_NAME}:{registry_name(store_dir).rpartition(':')[2]}",
                               namespace=namespace, lifetime="detached",
                               get_if_exists=True).remote(store_dir)
