"""A driver's reads of parked runs' standings from the store, gathered: the reads a loop asks for in one of its steps
go to worker threads in a few jobs (at most `READ_BATCH` runs each), not as one thread job a run.

Why: a watch of a parked run reads how it stands from the store (nothing is woken), and a script that waits on 1,000
parked runs at once (`finished()` after answering every Gate) asked for 1,000 thread jobs. Each is a hand-over to a
worker thread and back (a write to the loop's pipe, a fight for the GIL): py-spy put a seventh of the driver's
samples in a burst of wakes in those hand-overs, and the GIL fights were where a loaded driver's loop stalled.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from .loops import PerLoop
from .models import Standing
from .standing import journal_standing
from .store import JournalStore

# Runs read in one thread job at most. A job reads its runs one after another (on PostgreSQL, two round trips a run),
# so a smaller job lets the executor's threads share a burst and keeps the first answers from waiting on the last.
READ_BATCH = 50

Pending = tuple[JournalStore, str, "asyncio.Future[Standing | None]"]


class StandingReads:
    """The gathered store reads of one event loop (used on that loop only)."""

    def __init__(self, _loop: asyncio.AbstractEventLoop) -> None:
        self.pending: list[Pending] = []
        self.armed = False

    @staticmethod
    def of(loop: asyncio.AbstractEventLoop) -> StandingReads:
        return _READS.of(loop)

    def read(self, store: JournalStore, run_id: str) -> asyncio.Future[Standing | None]:
        """How `run_id` stands in `store` (`standing.journal_standing`: None while it is hosted), read with the
        other reads asked in this step of the loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Standing | None] = loop.create_future()
        self.pending.append((store, run_id, fut))
        if not self.armed:  # once this step's ready callbacks have run: every read they asked goes in one job
            self.armed = True
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self.armed = False
        batch, self.pending = self.pending, []
        loop = asyncio.get_running_loop()
        for at in range(0, len(batch), READ_BATCH):
            part = batch[at:at + READ_BATCH]
            try:
                job = loop.run_in_executor(None, _read_all, [(store, rid) for store, rid, _ in part])
            except Exception as exc:  # noqa: BLE001 - no thread to read in (the executor is shut down)
                for _store, _rid, fut in batch[at:]:  # this callback has no caller: each reader hears it
                    if not fut.done():
                        fut.set_exception(_failed(exc))
                return
            job.add_done_callback(functools.partial(_settle, part))


def _read_all(reads: list[tuple[JournalStore, str]]) -> list[Standing | None | BaseException]:
    """In a worker thread: each run's standing, or the error its read raised (that run's reader hears it)."""
    out: list[Standing | None | BaseException] = []
    for store, run_id in reads:
        try:
            out.append(journal_standing(store, run_id))
        except Exception as exc:  # noqa: BLE001 - raised to the one waiter it concerns
            out.append(exc)
    return out


def _failed(exc: BaseException) -> RuntimeError:
    """What one reader hears when its whole job failed: its own error (one object raised in many tasks would
    gather all their tracebacks), chained to the job's."""
    err = RuntimeError(f"reading parked runs' standings from the store failed: {exc!r}")
    err.__cause__ = exc
    return err


def _settle(part: list[Pending], job: asyncio.Future[list[Any]]) -> None:
    failed = None if job.cancelled() else job.exception()
    for i, (_store, _rid, fut) in enumerate(part):
        if fut.done():  # its reader stopped waiting
            continue
        if job.cancelled():
            fut.cancel()
        elif failed is not None:
            fut.set_exception(_failed(failed))
        elif isinstance(answer := job.result()[i], BaseException):
            fut.set_exception(answer)
        else:
            fut.set_result(answer)


_READS: PerLoop[StandingReads] = PerLoop(StandingReads)
