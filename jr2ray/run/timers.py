"""Timers of parked runs (reminders): a durable index of due times, and the one service that fires them.

A run that parks with pending `after` timers records its earliest deadline in the store's timer index (a small
SQLite file below the journal directory, or a table of the PostgreSQL store: `store.timer_index`). The timer
service, a detached Ray actor restarted by Ray, activates each run a little before its deadline; the run's engine
restores its timers from the journal and fires them on time (at once when overdue, as after a `down`/`up`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import ray

from jr2ray.settings import load_settings

from . import telemetry
from .names import TIMERS_NAME, registry_name
from .placement import service_options
from .store import is_shared, open_store
from .store.timer_index import INDEX_FILE, SqliteTimerIndex

LEAD_MS = 300.0  # activate this early: the engine then fires the timer itself, at its deadline
POLL_S = 0.1
BEAT_S = 2.0  # how often the registry hears from the timer service (a restarted one then recovers at once)
DRIFT_RETRY_S = 2.0  # how often an overdue timer of a drifted run tries to load it again


TimerIndex = SqliteTimerIndex  # the SQLite store's index, by its old name
__all__ = ["INDEX_FILE", "LEAD_MS", "TIMERS_NAME", "TimerIndex", "TimerService", "earliest_due_ms", "get_timer_service"]


def earliest_due_ms(snapshot: Any) -> float | None:
    timers = getattr(snapshot, "timers", None) or {}
    return min((t.deadline_ms for t in timers.values()), default=None)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class TimerService:
    """Fires due timers of parked runs by activating them. Catches up on overdue ones when (re)started.

    Its loop is a thread started by `__init__`, so a restart by Ray resumes it with nobody calling in."""

    def __init__(self, store: str, registry: str = "") -> None:
        self.registry_name = registry or registry_name(store)
        settings = load_settings()
        self.store = open_store(store, settings)
        self.index = self.store.timer_index()
        self.fired_count = 0
        self.resting: dict[str, float] = {}  # drifted run -> when to try its overdue timer again
        telemetry.setup("timers", settings.home_dir(create=False), on=settings.telemetry)
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
                now = time.monotonic()
                due = [(rid, at) for rid, at in due if self.resting.get(rid, 0.0) <= now]
                refs: list[tuple[str, float, Any]] = [(rid, at, registry.activate.remote(rid)) for rid, at in due]
                for rid, at, ref in refs:
                    try:
                        ray.get(ref, timeout=60)
                    except Exception:  # noqa: BLE001 - a lost or corrupt run: its status says why
                        if self._drifted(rid):  # its code cannot be loaded now: its reminder waits for it
                            self.resting[rid] = time.monotonic() + DRIFT_RETRY_S
                            continue
                    self.resting.pop(rid, None)
                    self.index.fired(rid, at)
                    self.fired_count += 1
                    telemetry.timer_fired(rid, at)
                telemetry.timers_overdue(min((at for _rid, at in self.index.due(time.time() * 1000, 1)), default=None))
            except Exception:  # noqa: BLE001 - the registry is (re)starting: try again shortly
                registry = None
            time.sleep(POLL_S)

    def _drifted(self, run_id: str) -> bool:
        """A drifted run keeps its timer row: it fires once, when the run's version can be loaded again."""
        try:
            line = self.store.indexed(run_id)
        except Exception:  # noqa: BLE001 - the store is unreachable: treat the reminder as not fired
            return True
        return line is not None and line.status == "drifted"

    def stats(self) -> dict[str, Any]:
        return {"fired": self.fired_count, "pending": len(self.index.due(float("inf")))}


def get_timer_service(store: str, namespace: str) -> Any:
    """The timer service of this namespace; with SQLite on the head, beside the index file."""
    actor_class = cast(Any, TimerService)  # mypy ignores @ray.remote; at run time it is an ActorClass
    return actor_class.options(name=f"{TIMERS_NAME}:{registry_name(store).rpartition(':')[2]}",
                               namespace=namespace, lifetime="detached", get_if_exists=True,
                               **service_options(is_shared(store))).remote(store)
