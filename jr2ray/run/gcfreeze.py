"""The driver and Python's cyclic GC: a full (generation 2) pass stops every thread, the caller's loop included, for
as long as it takes to walk every object the collector tracks. A driver waiting on thousands of runs keeps a few
dozen objects a run for minutes (its handles, their standings, the caller's own tasks), and each full pass walked all
of them again: 0.3 s with 1,000 runs waiting, 2.3 s with 10,000 on a loaded 2-core box (benchmarks/runs_scale.py).

What survives a full pass while many runs wait is long-lived, so it is moved out of the collector's generations
(`gc.freeze()`) right after that pass; the next pass walks only what was made since. A frozen object is still freed
when its last reference goes; only a reference cycle among frozen objects that becomes garbage is not reclaimed,
and the driver makes almost none (0 to 44 objects freed per full pass with 2,000 runs waiting). Below `MANY` runs
waited on, nothing is frozen after a pass. Only `connect()` turns this on (`connect(freeze_gc=False)` does not)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

MANY = 500  # runs a driver waits on at once from which a full pass's survivors are frozen

_lock = threading.Lock()
_counts: list[Callable[[], int]] = []  # each driver loop's count of the runs it waits on
_on = False
frozen_passes = 0  # full passes whose survivors were frozen (for tests and benchmarks)


def waiting() -> int:
    """About how many runs this process's drivers wait on now (a run may be counted once per kind of wait)."""
    return sum(count() for count in list(_counts))


def count(fn: Callable[[], int]) -> None:
    """A driver loop's count of the runs it waits on; read only at the end of a full pass."""
    with _lock:
        _counts.append(fn)


def enable() -> None:
    """Freeze what is alive now (modules, Ray, the client: they live as long as the driver), and from now on the
    survivors of each full pass taken while `MANY` or more runs are waited on."""
    global _on
    gc.freeze()
    with _lock:
        if not _on:
            gc.callbacks.append(_after_pass)
            _on = True


def disable() -> None:
    """Undo `enable()`: no more freezing after full passes, and every frozen object back in the collector's care."""
    global _on
    with _lock:
        if _on:
            gc.callbacks.remove(_after_pass)
            _on = False
    gc.unfreeze()


def _after_pass(phase: str, info: dict[str, Any]) -> None:
    global frozen_passes
    if phase == "stop" and info["generation"] == 2 and waiting() >= MANY:
        gc.freeze()
        frozen_passes += 1


__all__ = ["MANY", "count", "disable", "enable", "waiting"]
