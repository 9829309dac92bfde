"""How many Ray calls a caller's own event loop sends straight from its thread in one step of that loop.

A driver's pick to a run whose host it knows is sent straight from the caller's thread (one Ray call, no hop). A
script driving thousands of runs wakes hundreds of its tasks in one step of its loop (a wave of Turns opening), and
each then sends its pick: submitting a Ray call costs the caller's thread a fraction of a millisecond, so one step
that sends 1,000 of them holds the loop for hundreds of milliseconds, and every other task on it (a heartbeat, a web
server) waits. On a loaded box it is worse than the count says: a send lets go of the GIL while Ray takes the call,
and the loop's thread may then wait a whole switch interval (5 ms) to get it back from the driver's other threads.
So once a step of the loop has spent `STEP_S` sending (wall time from its first send, its tasks' own work between
included), the rest of that step's calls go by the driver's own loop, one hop more, and the caller's loop moves on.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable

from .loops import PerLoop

STEP_S = 0.005  # wall time one step of a loop may spend sending Ray calls straight from it


class LoopBudget:
    """One event loop's sending time per step. Only that loop's thread calls it."""

    __slots__ = ("clock", "loop", "since", "step_s", "used")

    def __init__(self, loop: asyncio.AbstractEventLoop, step_s: float = STEP_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.loop = weakref.ref(loop)  # not the loop itself: the table it is kept in is keyed weakly by it
        self.step_s, self.clock = step_s, clock
        self.used = 0  # calls sent straight in this step
        self.since = 0.0  # when this step's first one was sent

    @staticmethod
    def of(loop: asyncio.AbstractEventLoop) -> LoopBudget:
        """The one budget of `loop`."""
        return _BUDGETS.of(loop)

    def take(self) -> bool:
        """May one more call be sent straight from this step? The first of a step always may."""
        if self.used == 0:
            loop = self.loop()
            if loop is None:
                return True
            self.since = self.clock()
            loop.call_soon(self._next_step)  # runs in the loop's next step: the budget starts again there
        elif self.clock() - self.since >= self.step_s:
            return False
        self.used += 1
        return True

    def _next_step(self) -> None:
        self.used = 0


_BUDGETS: PerLoop[LoopBudget] = PerLoop(LoopBudget)
