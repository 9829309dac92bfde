"""The driver and Python's cyclic GC: a full (generation 2) pass stops every thread, the caller's loop included, for
as long as it takes to walk every object the collector tracks. A driver waiting on thousands of runs keeps a few
dozen objects a run for minutes (its handles, their standings, the caller's own tasks), and each full pass walked all
of them again: 0.3 s with 1,000 runs waiting, 2.3 s with 10,000 on a loaded 2-core box (benchmarks/runs_scale.py).

While many runs are waited on, what survives a full pass is moved out of the collector's generations
(`gc.freeze()`) as that pass ends; from then on, so is what survives each pass of the middle generation (a few ms:
it walks only the young), until a pass finds few runs waited on. The oldest generation then never fills up between
full passes: with 3,000 runs driven, the longest full pass fell from 139 ms of CPU (270,000 objects walked, all made
since the last one) to 5.5 ms. A burst of starts arms this at once with one full pass (`starting`), before it makes
its objects. Freezing after a middle pass waits for a full one so that no garbage already in the oldest generation
is frozen. A frozen object is still freed when its last reference goes; only a reference cycle among frozen objects
that becomes garbage is never reclaimed, so the driver's own code breaks the cycles it made (`many.AllOf` keeps no
future, a failed send's future is made outside the frame that caught its error, a watch's task), and the scale
bench counts what is left at its end. Only `connect()` turns this on (`connect(freeze_gc=False)` does not). With
Python 3.14's incremental collector, only full passes freeze.

The young passes are also paced (`_pace`). CPython 3.11-3.13 starts one when allocations outnumber frees by 700,
and a driver waiting on thousands of runs mostly makes objects in place of ones it lets go (a run's new standing for
its old one, a new waiter for a finished one): the count barely moves while the youngest generation grows. Measured
with 10,000 runs driven, young passes that began at the usual count took 68-89 ms of CPU (one left 253,000 objects
in the middle generation), and the middle pass after one walked them again: the loop's longest stalls, 100-146 ms.
So while many runs are waited on, a thread of this module makes a young pass every `YOUNG_EVERY_S` and a middle one
every `MIDDLE_EVERY` of those, as the thresholds would if frees did not count: each walks what was made since the
last. Each middle pass freezes what survives it (above), so more is frozen than before, some of it young: at
N=10,000, 36 objects a run against 12, with the cyclic garbage left frozen at the end the same (59 objects). Not on
3.14 (incremental) nor on a build without the GIL (no generations)."""

from __future__ import annotations

import contextlib
import gc
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from typing import Any

MANY = 500  # runs waited on at once from which passes' survivors are frozen (a run watched and parked counts twice)
_MIDDLE = sys.version_info < (3, 14)  # three generations, the middle one a pass of its own (3.14: incremental)
_PACED = _MIDDLE and not sysconfig.get_config_var("Py_GIL_DISABLED")  # a build without the GIL has no generations
YOUNG_EVERY_S = 0.05  # while many runs are waited on, a young pass about this often (`_pace`)
MIDDLE_EVERY = 10  # and every this many of them a middle-generation one (CPython's own ratio)

_lock = threading.Lock()
_counts: list[Callable[[], int]] = []  # each driver loop's count of the runs it waits on
_watched = 0  # runs whose standing a driver watches now (their until_gate, until_turn, finished)
_on = False
_pacing: tuple[threading.Event, threading.Thread] | None = None  # the pacing thread (`_pace`) and what stops it
_armed = False  # a full pass froze since many runs came to be waited on: middle passes' survivors may be frozen
frozen_passes = 0  # full passes whose survivors were frozen (for tests and benchmarks)
frozen_middle_passes = 0  # middle-generation passes whose survivors were frozen


def waiting() -> int:
    """About how many runs this process's drivers wait on now (a run may be counted once per kind of wait)."""
    return _watched + sum(count() for count in list(_counts))


def watching(n: int) -> None:
    """A driver starts (`n` = 1) or stops (`n` = -1) watching a run's standing: a run in line or live is waited on
    as much as a parked one, and a burst of starts makes most of its objects while its runs are in line."""
    global _watched
    with _lock:
        _watched += n


@contextlib.contextmanager
def starting(n: int) -> Iterator[None]:
    """`n` runs being started count as waited on while their starts and handles are made. If that makes many, one
    full pass now (before the burst makes its objects) arms freezing after the middle passes that follow."""
    watching(n)
    try:
        if _on and not _armed and waiting() >= MANY:
            gc.collect()  # it holds the GIL, every loop's too, for one pass over what was made since the last freeze
        yield
    finally:
        watching(-n)


def count(fn: Callable[[], int]) -> None:
    """A driver loop's count of the runs it waits on; read at the end of each pass of the two older generations."""
    with _lock:
        _counts.append(fn)


def enable() -> None:
    """Freeze what is alive now (modules, Ray, the client: they live as long as the driver), and from now on the
    survivors of each full pass taken while `MANY` or more runs are waited on, and of each middle-generation pass
    after such a full pass (see the module doc)."""
    global _on, _pacing
    gc.freeze()
    with _lock:
        if not _on:
            gc.callbacks.append(_after_pass)
            _on = True
        if _PACED and _pacing is None:
            stop = threading.Event()
            _pacing = (stop, threading.Thread(target=_pace, args=(stop,), name="jr2ray-gc-pace", daemon=True))
            _pacing[1].start()


def disable() -> None:
    """Undo `enable()`: no more freezing after passes, and every frozen object back in the collector's care."""
    global _on, _armed, _pacing
    with _lock:
        if _on:
            gc.callbacks.remove(_after_pass)
            _on = _armed = False
        pacing, _pacing = _pacing, None
    if pacing is not None:
        pacing[0].set()
        if pacing[1] is not threading.current_thread():
            pacing[1].join(timeout=5.0)  # a pass it had begun ends before this returns: none lands after it
    gc.unfreeze()


def _pace(stop: threading.Event) -> None:
    """While many runs are waited on, a young pass every `YOUNG_EVERY_S`, every `MIDDLE_EVERY`th a middle one (see
    the module doc). Not while the collector is switched off (Ray turns it off while it deserializes an answer), nor
    while automatic passes are (a young threshold of 0)."""
    young = 0
    while not stop.wait(YOUNG_EVERY_S):
        if waiting() < MANY or not gc.isenabled() or gc.get_threshold()[0] == 0:
            continue
        young += 1
        gc.collect(1 if young % MIDDLE_EVERY == 0 else 0)


def _after_pass(phase: str, info: dict[str, Any]) -> None:
    # Runs inside a pass, in whatever thread made it: it takes no lock, so a pass made while `_lock` is held (in
    # `watching`, `count`) cannot wait on it.
    global frozen_passes, frozen_middle_passes, _armed
    generation = info["generation"]
    if phase != "stop" or generation == 0:
        return
    if waiting() < MANY:
        _armed = False
    elif generation == 2:
        gc.freeze()
        frozen_passes += 1
        _armed = True
    elif _armed and _MIDDLE:
        gc.freeze()
        frozen_middle_passes += 1


__all__ = ["MANY", "MIDDLE_EVERY", "YOUNG_EVERY_S", "count", "disable", "enable", "frozen_middle_passes",
           "frozen_passes", "starting", "waiting", "watching"]
