"""The registry's run gauges, set every beat from what only it knows (which runs are live, which wait in line) and
the run index's counts by status."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

from . import telemetry
from .admission import Slots
from .store import JournalStore

GAUGES_S = 10.0  # how often the run gauges' counts by status are read from the run index
GAUGE_BEAT_S = 1.0  # how often the run gauges are set (Ray's export interval is at least 1 s)


async def keep_gauges(store: JournalStore, live: dict[str, Any], slots: Slots) -> None:
    """Set the run gauges every GAUGE_BEAT_S: runs by workflow and status (the run index, read in a thread every
    GAUGES_S), and the active or queued ones by where they are (this registry knows which are live and queued;
    the rest are parked). Set again each beat, not only on a change: Ray's agent drops a gauge whose process
    has not reported it for two export intervals."""
    rows: list[tuple[str, str, str]] = []
    read_at = -GAUGES_S
    while True:
        try:
            if time.monotonic() - read_at >= GAUGES_S:
                read_at = time.monotonic()
                rows = await asyncio.to_thread(store.run_states)
            by_status: dict[tuple[str, str], int] = defaultdict(int)
            by_where: dict[tuple[str, str], int] = defaultdict(int)
            for rid, workflow, status in rows:
                by_status[(workflow, status)] += 1
                if status in ("active", "queued"):
                    where = "queued" if rid in slots.queued else "live" if rid in live else "parked"
                    by_where[(workflow, where)] += 1
            telemetry.run_counts(by_status, by_where, len(slots.queued), slots.max_live)
        except Exception as exc:  # noqa: BLE001 - a store that does not answer now: the next round tries again
            telemetry.log("registry.gauges_failed", reason=f"{type(exc).__name__}: {exc}")
        await asyncio.sleep(GAUGE_BEAT_S)
