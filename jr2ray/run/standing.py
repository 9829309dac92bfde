"""How a driver reads a run's standing: from the store while it is parked (nothing is woken), and what a waiter
on it is told (`settle`): what it wanted, or that the run ended first (`RunEnded`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from jr2ray.menu import MenuItem, Surface

from .errors import RunEnded, UnknownRun, UnknownTurn
from .handles import journal_status
from .models import RunStatus, Standing, Waiting
from .store import JournalStore

if TYPE_CHECKING:
    from .engine import RunEngine


def standing_of(engine: RunEngine, due_ms: float | None = None, parked: bool = False, version: int = 0) -> Standing:
    """How the engine's run stands now: its status and where it waits (see `Standing`)."""
    status = engine.status()
    return Standing(status=status, waiting=Waiting.of(status, None if due_ms is None else due_ms / 1000.0),
                    version=version, parked=parked, epoch=engine.journal.epoch if engine.journal else None)


def settle(entry: tuple[Callable[[Standing], bool], str, asyncio.Future[Standing]], st: Standing, run_id: str,
            ended: bool = False) -> bool:
    """Resolve a waiter with `st` if it wants it, or with RunEnded if the run is over; True if resolved."""
    want, what, fut = entry
    if fut.done():
        return True
    if want(st):
        fut.set_result(st)
        return True
    if ended or st.status.status not in ("active", "queued"):
        fut.set_exception(RunEnded(f"run {run_id} is {st.status.status}, so {what}", st.status))
        return True
    return False


def journal_standing(store: JournalStore, run_id: str) -> Standing | None:
    """How a run stands as the store tells it without waking it: how it parked, or (queued, finished, lost) its
    status. None when it is hosted now. The run index answers first (one small query); only a finished run's
    journal is opened, for its output."""
    line = store.indexed(run_id)
    if line is not None and line.status == "active":
        got = store.standing(run_id)
        return None if got is None else Standing.model_validate(got)
    if line is not None and line.status == "queued":
        return Standing(status=RunStatus(id=run_id, workflow=line.workflow, digest=line.digest, status="queued"),
                        waiting=Waiting())
    st = journal_status(store, run_id)
    if st is None:
        if line is None and not store.exists(run_id):
            raise UnknownRun(f"no run {run_id!r}")
        return None if line is None or line.status == "active" else Standing(
            status=RunStatus(id=run_id, workflow=line.workflow, digest=line.digest, status=line.status,  # type: ignore[arg-type]
                             error=line.error), waiting=Waiting())
    return None if st.status == "active" else Standing(status=st, waiting=Waiting())


def surface_at(st: Standing, address: str, menu_of: Callable[[str, str, str], list[MenuItem]] | None,
               run_id: str) -> Surface | None:
    """A parked run's surface at `address`, from how it stood when it parked; None when only its host can answer
    (the Turn's first read takes notices a restart left, or no Menu is known here)."""
    turns = [t for t in st.status.turns if address in (t.iid, t.slot)]
    turn = next((t for t in reversed(turns) if t.active), turns[-1] if turns else None)
    if turn is None:
        raise UnknownTurn(f"no Turn at {address!r} in run {run_id}")
    if turn.unread_notices or menu_of is None:
        return None
    menu = menu_of(st.status.workflow, turn.slot, st.status.version)
    if not turn.active:
        return Surface(menu=menu, allowed=[], turn_over=True)
    return Surface(menu=menu, allowed=list(turn.allowed or []))
