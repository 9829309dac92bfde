"""Where one watch of a driver's handle stands, and its name across the instance (see `VirtualRunHandle._watch`)."""

from __future__ import annotations

import asyncio
from typing import Any

from .models import Standing


def watch_name(wake_id: str, pump: asyncio.Task[None]) -> str:
    """A handle's watch, named across the instance: this driver's wake id and its pump task's name (asyncio numbers
    tasks once per process; a later watch of the same handle is another task, so another name)."""
    return f"{wake_id}:{pump.get_name()}"


class WatchState:
    """Where one `_watch` of a run is: the host it asked, that host's `version` count (each host counts its own),
    the standing it last yielded, and whether the run is over."""

    def __init__(self) -> None:
        self.version = -1
        self.asked: Any = None
        self.last: Standing | None = None
        self.over = False
        self.told: str | None = None  # the handle's name for this watch, when its writes carry standings to it

    def changed(self, st: Standing) -> bool:
        """`st` is news (not the last one yielded): note it as the last."""
        if st == self.last:
            return False
        self.last = st
        return True
