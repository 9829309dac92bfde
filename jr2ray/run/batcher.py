"""A thread that takes what a hot path hands it and deals with it in batches, a moment later.

Why: a pick's telemetry (its spans, its log line, its metric records) was measured on the pick's own path. Handing
each item over here costs a deque append; the work (making the SDK's spans, formatting and writing the log lines,
recording the metrics) runs on this thread once no item has come for `delay_s` (a burst, such as a batch of starts,
is done after it, not during it), or `max_wait_s` after the first item of a batch under a steady stream.
`flush` does the waiting items at once, in the caller's thread (a test that reads them, a process about to end).
Every item is either waiting in the deque or being dealt with under the lock, so a flush never misses one.

`holding()`: while a process does work that must not share the GIL with a batch (the registry writing a start
batch's journals, whose every sqlite and file call gives the GIL up and then waits to get it back), every batcher of
the process waits longer, up to `HELD_MAX_S` in all, before it deals with its items.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

_log = logging.getLogger(__name__)
HELD_MAX_S = 10.0  # the longest a batch waits while the process holds batchers back (`holding`)
_held = 0  # how many `holding` blocks are open in this process (read by every batcher's thread)


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """Hold every batcher of this process back while the block runs (see the module's docstring)."""
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1


class Batcher:
    """Items `put` on any thread, handed to `handle` (a list, in order) on this batcher's own daemon thread."""

    def __init__(self, name: str, handle: Callable[[list[Any]], None], delay_s: float = 0.2,
                 max_wait_s: float = 2.0) -> None:
        self.name = name
        self.delay_s = delay_s
        self.max_wait_s = max_wait_s
        self._handle = handle
        self._items: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._starting = threading.Lock()
        self._wake = threading.Event()
        self._armed = False  # the thread was woken for the items waiting: no further wake is needed
        self._thread: threading.Thread | None = None
        self.closed = False

    def put(self, item: Any) -> None:
        self._items.append(item)
        if not self._armed:
            self._armed = True
            if self._thread is None:
                self._start()
            self._wake.set()

    def _start(self) -> None:
        with self._starting:  # two threads putting the first items start one thread
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self.closed:
                return
            self._settle()
            self._wake.clear()
            self._armed = False
            self.flush()

    def _settle(self) -> None:
        """Wait until no item came for `delay_s`, or `max_wait_s` in all; while the process holds batchers back
        (`holding`), on until it stops, or `HELD_MAX_S` in all."""
        since = time.monotonic()
        while True:
            seen = len(self._items)
            time.sleep(self.delay_s)
            waited = time.monotonic() - since
            if _held and waited < HELD_MAX_S:
                continue
            if len(self._items) == seen or waited >= self.max_wait_s:
                return

    def flush(self) -> None:
        """Every item waiting, handled now in the caller's thread (after a batch the thread is handling)."""
        with self._lock:
            items: list[Any] = []
            while self._items:
                items.append(self._items.popleft())
            if not items:
                return
            try:
                self._handle(items)
            except Exception:  # noqa: BLE001 - telemetry never stops the process it watches
                _log.exception("%s could not handle %d items", self.name, len(items))

    def close(self) -> None:
        """Handle what waits, then let the thread end."""
        self.flush()
        self.closed = True
        self._wake.set()
