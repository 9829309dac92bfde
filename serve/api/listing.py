"""Filtered pages of the run list: `GET /runs` with where/workflow/prefix, and the open Gates across runs.

The store's index pages by status alone (see `JournalStore.list_runs`); the other filters are applied here to the
rows `Client.runs` gives (which carry `presence`), page after page. Each request looks at no more than `SCAN_BUDGET`
rows: when it stops there, its page may be short (even empty) and still carry a next cursor, after the last row it
looked at, so a caller pages on and never misses a run. Nothing here keeps state between requests.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import refusals

WHERE = ("live", "parked", "queued")
SCAN_BUDGET = 5000  # rows one request may look at before it answers with what it found and a cursor
_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_WORKFLOW = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

Row = dict[str, Any]


@dataclass(frozen=True)
class RunFilter:
    """What a caller asked to see. `statuses` is what the index is asked for (None: every status); `match` is what
    the rows it gives must also pass."""

    status: str | None = None
    where: str | None = None
    workflow: str | None = None
    prefix: str | None = None

    @classmethod
    def checked(cls, status: str | None, where: str | None, workflow: str | None, prefix: str | None) -> RunFilter:
        """The filter, or the 400 that says which value is wrong (raised before anything is read)."""
        if where is not None and where not in WHERE:
            raise refusals.bad_where(where, WHERE)
        if prefix is not None and not _PREFIX.match(prefix):
            raise refusals.bad_prefix(prefix)
        if workflow is not None and not _WORKFLOW.match(workflow):
            raise refusals.bad_workflow_filter(workflow)
        return cls(status or None, where or None, workflow or None, prefix or None)

    @property
    def plain(self) -> bool:
        """Only a status (or nothing) asked: the index alone answers, one page per request."""
        return self.where is None and self.workflow is None and self.prefix is None

    def statuses(self) -> str | None | list[str]:
        """What to ask the index for. A queued run's status is `queued`; a live or parked one's is `active`. An
        empty list: the status and the where asked for cannot both hold, so nothing matches."""
        implied = None if self.where is None else ("queued" if self.where == "queued" else "active")
        if self.status is None:
            return implied
        if implied is not None and implied != self.status:
            return []
        return self.status

    def match(self, row: Row) -> bool:
        if self.where is not None and row.get("presence") != self.where:
            return False
        if self.workflow is not None and row.get("workflow") != self.workflow:
            return False
        return self.prefix is None or str(row.get("id", "")).startswith(self.prefix)


@dataclass
class Page:
    rows: list[Row]
    next_cursor: str | None


def scan(client: Any, limit: int, cursor: str | None, filt: RunFilter,
         keep: Callable[[Row], bool] | None = None, budget: int | None = None) -> Page:
    """One page of at most `limit` rows that pass `filt` (and `keep`), newest first, after `cursor`. Blocking: the
    store and the registry are asked from the calling thread."""
    statuses = filt.statuses()
    if statuses == []:
        return Page([], None)
    budget = SCAN_BUDGET if budget is None else budget
    batch = limit + 1 if filt.plain and keep is None else min(max(limit + 1, 200), 1000, max(budget, 1))
    kept: list[Row] = []
    seen = 0
    after = cursor
    while True:
        page: list[Row] = client.runs(batch, after, statuses)
        if not page:
            return Page(kept, None)
        for row in page:
            seen += 1
            if filt.match(row) and (keep is None or keep(row)):
                kept.append(row)
                if len(kept) > limit:
                    return Page(kept[:limit], kept[limit - 1]["cursor"])
        after = page[-1]["cursor"]
        if len(page) < batch and filt.plain and keep is None:
            return Page(kept, None)
        if seen >= budget:  # enough looked at for one request: the caller pages on from here
            return Page(kept, after)


async def scan_async(client: Any, limit: int, cursor: str | None, filt: RunFilter,
                     keep: Callable[[Row], bool] | None = None, budget: int | None = None) -> Page:
    try:
        return await asyncio.to_thread(scan, client, limit, cursor, filt, keep, budget)
    except ValueError as exc:  # a cursor this instance did not make
        raise refusals.bad_cursor(str(exc)) from None
