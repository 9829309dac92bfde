"""One priority for every thread of a run's process.

Ray lowers a worker's priority (`nice` 15) so that drivers, the raylet and the GCS come first, but it does so only
on the worker's Python thread: the threads its core worker started before that (gRPC's pollers, the io service,
the task event buffer) stay at 0. On a busy node those threads of thirty run hosts outbid the driver script that
feeds them, whose event loop then waits for a core (a parked-run wake bench saw 130 ms gaps in a driver whose own
threads used one scheduler tick of CPU in them). A run host evens its threads out to its Python thread's priority
when it starts, which is what Ray's setting asks for. Linux only: elsewhere, and for a thread that has ended, it
does nothing.
"""

from __future__ import annotations

import os
import sys

_TASKS = "/proc/self/task"


def thread_nices() -> dict[int, int]:
    """The nice value of each thread of this process, by thread id ({} where threads cannot be listed)."""
    if not sys.platform.startswith("linux"):
        return {}
    out: dict[int, int] = {}
    for name in os.listdir(_TASKS):
        try:
            out[int(name)] = os.getpriority(os.PRIO_PROCESS, int(name))
        except (OSError, ValueError):  # ended since it was listed
            continue
    return out


def even_out() -> int:
    """Lower every thread of this process that runs ahead of the calling thread to its priority (raising `nice`
    needs no privilege). The number of threads changed."""
    if not sys.platform.startswith("linux"):
        return 0
    mine = os.getpriority(os.PRIO_PROCESS, 0)  # on Linux, 0 is the calling thread
    changed = 0
    for tid, nice in thread_nices().items():
        if nice < mine:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, mine)
            except OSError:  # ended since it was listed
                continue
            changed += 1
    return changed
