"""Where one watch of a driver's handle stands, its name across the instance (see `VirtualRunHandle._watch`), and
how a write's answer reaches that watch even when its caller stopped waiting."""

from __future__ import annotations

import asyncio
from typing import Any

from .models import Carried, FirstAnswer, Standing


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


async def answer_of(handle: Any, ref: Any) -> Any:
    """A write's answer. If the caller stops waiting first, a standing the host carried with it is still taken
    (`handle.landed`) when it comes: the host noted it as told to the handle's watch, which would otherwise wait past
    news the driver never had."""
    fut = asyncio.ensure_future(ref)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(lambda f: _land_late(handle, f))
        raise


def _land_late(handle: Any, fut: asyncio.Future[Any]) -> None:
    if fut.cancelled() or fut.exception() is not None:
        return
    got = fut.result()
    if isinstance(got, list) and len(got) > 1 and isinstance(got[1], FirstAnswer):  # an activation's answer
        got = got[1].value
    if isinstance(got, Carried):
        handle.landed(got)
