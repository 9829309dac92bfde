"""The driver and Python's cyclic GC: a full (generation 2) pass stops every thread, the caller's loop included, for
as long as it takes to walk every object the collector tracks. A driver waiting on thousands of runs keeps a few
dozen objects a run for minutes (its handles, their standings, the caller's own tasks), and each full pass walked all
of them again: 0.3 s with 1,000 runs waiting, 2.3 s with 10,000 on a loaded 2-core box (benchmarks/runs_scale.py).

While many runs are waited on, what survives a pass of the middle generation (a few thousand young objects, a few
ms) is moved out of the collector's generations (`gc.freeze()`) as that pass ends, and so is what survives a full
pass. The oldest generation then never fills up between full passes: with 3,000 runs driven, the longest full pass
fell from 139 ms of CPU (270,000 objects walked, all made since the last one) to 9 ms. A frozen object is still
freed when its last reference goes; only a reference cycle among frozen objects that becomes garbage is not
reclaimed, and the driver makes almost none (0 to 44 objects freed per full pass with 2,000 runs waiting, 0 to 13
with 3,000). Below `MANY` runs waited on, nothing is frozen. Only `connect()` turns this on
(`connect(freeze_gc=False)` does not)."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

MANY = 500  # runs a driver waits on at once from which a full pass's survivors are frozen

_lock = threading.Lock()
_counts: list[Callable[[], int]] = []  # each driver loop's count of the runs it waits on
_watched = 0  # runs whose standing a driver watches now (their until_gate, until_turn, finished)
_on = False
frozen_passes = 0  # full passes whose survivors were frozen (for tests and benchmarks)


def waiting() -> int:
    """About how many runs this process's drivers wait on now (a run may be counted once per kind of wait)."""
    return _watched + sum(count() for count in list(_counts))


def watching(n: int) -> None:
    """A driver starts (`n` = 1) or stops (`n` = -1) watching a run's standing: a run in line or live is waited on
    as much as a parked one, and a burst of starts makes most of its objects while its runs are in line."""
    global _watched
    _watched += n


@contextlib.contextmanager
def starting(n: int) -> Iterator[None]:
    """`n` runs being started count as waited on while their starts and handles are made."""
    watching(n)
    try:
        yield
    finally:
        watching(-n)


def count(fn: Callable[[], int]) -> None:
    """A driver loop's count of the runs it waits on; read only at the end of a full pass."""
    with _lock:
        _counts.append(fn)


def enable() -> None:
    """Freeze what is alive now (modules, Ray, the client: they live as long as the driver), and from now on the
    survivors of each pass of the two older generations taken while `MANY` or more runs are waited on."""
    global _on
    gc.freeze()
    with _lock:
        if not _on:
            gc.callbacks.append(_after_pass)
            _on = True


def disable() -> None:
    """Undo `enable()`: no more freezing after passes, and every frozen object back in the collector's care."""
    global _on
    with _lock:
        if _on:
            gc.callbacks.remove(_after_pass)
            _on = False
    gc.unfreeze()


def _after_pass(phase: str, info: dict[str, Any]) -> None:
    global frozen_passes
    if phase == "stop" and info["generation"] >= 1 and waiting() >= MANY:
        gc.freeze()
        frozen_passes += info["generation"] == 2


__all__ = ["MANY", "count", "disable", "enable", "starting", "waiting", "watching"]
