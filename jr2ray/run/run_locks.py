"""Per-run locks that cost nothing while nobody uses them (the registry's: 10,000 parked runs keep none)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class RunLocks:
    """One asyncio.Lock per run, kept only while a caller holds or waits for it: 10,000 parked runs keep none."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # run id -> (its lock, [callers in it])

    @contextlib.asynccontextmanager
    async def __call__(self, run_id: str) -> AsyncIterator[None]:
        got = self._held.get(run_id)
        if got is None:
            got = self._held[run_id] = (asyncio.Lock(), [0])
        lock, users = got
        users[0] += 1  # counted before the wait, so a waiter's lock is never dropped under it
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._held[run_id]

    def busy(self, run_id: str) -> bool:
        """Is the run's lock held, or waited for, now (say, while a host adopts it)?"""
        return run_id in self._held

    def __len__(self) -> int:
        return len(self._held)
