"""Two small facts about event loops in a process that runs more than one (a script's, the driver's, an actor's).

Kept apart from what uses them (the hand-over between loops, the sending budget, the journal writer, the harness
launcher), which need only these and nothing of each other.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class PerLoop(Generic[T]):
    """One object per event loop, made at its first use and let go with the loop (keyed weakly: a script's
    `asyncio.run` makes and ends its loop, and the driver outlives it)."""

    def __init__(self, make: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self._make = make
        self._of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, loop: asyncio.AbstractEventLoop) -> T:
        got = self._of.get(loop)  # the common case, without the lock
        if got is not None:
            return got
        with self._lock:
            got = self._of.get(loop)
            if got is None:
                got = self._of[loop] = self._make(loop)
            return got
