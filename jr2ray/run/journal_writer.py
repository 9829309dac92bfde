"""The one writer of a run's journal and feed: it stages ledger entries, commits them, and emits feed events.

Every part of a run (Turns, Gates, Effects, transcripts, the engine's chart hooks) writes through this object, so
the order of a run's writes and the rule "one transaction per step, before any side effect" (R3.1) live in one
place. A quiet macrostep's snapshot is held here until the receipt it leads to is staged, so both go in one
transaction; a journal that goes bad stops the run here, before any effect.
"""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from jr2ray.chart import Event

from . import telemetry
from .engine_state import RunState
from .errors import RunCorrupt, RunError, RunFenced, RunLost
from .loops import running_loop
from .models import PickEvent
from .store import Journal, LedgerKind

FEED_KEEP = 2000  # feed events held in memory; older ones are trimmed 1000 at a time
EPHEMERAL_MAX = 100  # unjournaled feed events (refusals) in a row; a restart skips this many numbers


def snapshot_text(snapshot: dict[str, Any]) -> str:
    """A snapshot as JSON text that compares equal only for equal JSON (1, 1.0 and true differ; key order does not)."""
    return json.dumps(snapshot, sort_keys=True, default=str)


class JournalWriter:
    """Stages, flushes and emits for one run. `on_broken` is told when a commit finds the journal fenced, lost or
    corrupt (the writer has already stopped writing); the error is then raised to the caller."""

    def __init__(self, state: RunState, journal: Journal | None, *,
                 on_event: Callable[[PickEvent], None] | None = None,
                 on_broken: Callable[[RunError], None] | None = None) -> None:
        self.state = state
        self.journal = journal
        self.on_event = on_event
        self.on_broken = on_broken
        self.staged: list[tuple[str, str | None, dict[str, Any]]] = []
        # A quiet macrostep's snapshot (see `hold`), not yet written: the next `flush` carries it.
        self.held: dict[str, Any] | None = None
        # The pick's event being sent now: its quiet macrostep, or the chart ignoring it, waits for its receipt.
        self.delivering: Event | None = None
        # The event feed: (number, event), newest FEED_KEEP in memory. Numbers never shift or repeat, across
        # restarts too: journaled events come back with theirs, and a restart skips EPHEMERAL_MAX numbers for
        # the refusals that were shown but (changing nothing) never journaled.
        self.history: list[tuple[int, PickEvent]] = []
        self.feed_next = 0
        self._ephemeral_run = 0
        self._flush_soon = False
        # A restored run's journal ends with this status and snapshot (as JSON text, taken when it was loaded, so
        # nothing done to the objects since changes it): its first flush writes nothing if it would write only
        # that again (`restored`). Cleared at that first flush: the check costs one encoding an activation.
        self.restored: tuple[str, str] | None = None

    # ---- the journal ---------------------------------------------------------------------------------------
    def stage(self, kind: LedgerKind | str, key: str | None, data: dict[str, Any]) -> None:
        """One ledger entry for the next transaction (none once the run is broken)."""
        if self.state.broken is None:
            self.staged.append((str(getattr(kind, "value", kind)), key, data))

    def drop(self) -> None:
        """Forget what is staged and held: the run stopped on a bad journal and writes nothing more."""
        self.staged, self.held = [], None

    def hold(self, snapshot: dict[str, Any]) -> None:
        """Keep a quiet macrostep's snapshot for the next flush (nothing left the process since it was taken)."""
        self.held = snapshot

    @contextmanager
    def delivering_pick(self, event: Event) -> Iterator[None]:
        """While a pick's event is sent: a quiet macrostep, or an ignored pick, is written with its receipt."""
        self.delivering = event
        try:
            yield
        finally:
            self.delivering = None

    def flush(self, snapshot: dict[str, Any] | None = None) -> None:
        """Write what is staged (and a held snapshot, unless a newer one is given) as one transaction. A journal that
        went bad stops the run here, before any effect."""
        held, self.held = self.held, None
        snapshot = held if snapshot is None else snapshot
        entries, self.staged = self.staged, []
        if self.journal is None or self.state.broken is not None or not (entries or snapshot is not None):
            return
        status = self.state.status_name()
        restored, self.restored = self.restored, None
        if not entries and snapshot is not None and restored == (status, snapshot_text(snapshot)):
            return  # a wake's restore changed nothing: its journal ends with this already
        since = time.perf_counter()
        try:
            self.journal.commit(self.state.machine.digest, status, snapshot, entries)
            telemetry.journal_committed(self.state, since)
        except RunFenced as exc:  # a newer activation writes this run now: stop here, writing nothing more
            telemetry.store_error(self.state, exc)
            self.state.broken = str(exc)
            self.staged = []
            self._broken(exc)
            raise
        except (RunLost, RunCorrupt) as exc:
            telemetry.store_error(self.state, exc)
            self.emit("status", {"status": "lost" if isinstance(exc, RunLost) else "corrupt", "error": str(exc)})
            self._broken(exc)
            raise

    def _broken(self, exc: RunError) -> None:
        if self.on_broken is not None:
            self.on_broken(exc)

    # ---- the feed ------------------------------------------------------------------------------------------
    def emit(self, kind: str, data: dict[str, Any], durable: bool = True) -> None:
        """One feed event. Durable ones are journaled (with the next transaction, or one made soon); refusals are
        not, since a refusal changes nothing, the journal included."""
        ev = PickEvent(kind=kind, at=time.time(), data=data)  # type: ignore[arg-type]
        if self.on_event is not None:
            self.on_event(ev)
        if durable:
            self._ephemeral_run = 0
        elif self._ephemeral_run >= EPHEMERAL_MAX:  # a flood of refusals: shown to callers, not to the feed
            return
        else:
            self._ephemeral_run += 1
        seq, self.feed_next = self.feed_next, self.feed_next + 1
        self.history.append((seq, ev))
        if len(self.history) > FEED_KEEP:
            del self.history[:FEED_KEEP // 2]
        if durable and self.journal is not None and self.state.broken is None:
            self.stage(LedgerKind.FEED, str(seq), ev.model_dump(mode="json"))
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Feed events emitted between macrosteps are written once this step of the loop is over, all in one go."""
        if self._flush_soon:
            return
        loop = running_loop()
        if loop is None:
            return  # no loop: they go with the next transaction
        self._flush_soon = True
        loop.call_soon(self._flush_staged)

    def flush_staged(self) -> None:
        """Write what is staged now, not at the end of this step of the loop (the host is letting the run go)."""
        self._flush_staged()

    def _flush_staged(self) -> None:
        self._flush_soon = False
        if (self.staged or self.held is not None) and self.state.broken is None:
            try:
                self.flush(None)
            except RunError:
                pass  # the run is now lost or corrupt, and says so

    def restore_feed(self, feed: Sequence[tuple[int, dict[str, Any]]], never_ran: bool) -> None:
        """The journaled feed, with numbering past any number an earlier life may have shown unjournaled; a run
        admission queued never ran, so it showed none and starts at 0."""
        self.history = [(seq, PickEvent.model_validate(ev)) for seq, ev in feed]
        self.feed_next = 0 if never_ran else (feed[-1][0] + 1 if feed else 0) + EPHEMERAL_MAX

    def feed(self, since: int = 0) -> list[dict[str, Any]]:
        """Feed events numbered `since` and later still held, each with its number as `seq`."""
        start = bisect.bisect_left(self.history, since, key=lambda h: h[0])
        return [{**ev.model_dump(), "seq": seq} for seq, ev in self.history[start:]]
