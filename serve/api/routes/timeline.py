"""A run's timeline: its steps, Turns, model requests, Gate waits, Effects, parked periods and timer firings on one
time axis, read from its journal (`jr2ray.run.timeline`). Reading it wakes nothing."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from jr2ray.run.timeline import Timeline, timeline

from .. import refusals
from ..context import ApiContext, Ctx
from ..schemas import NOT_FOUND

router = APIRouter()


def journal_timeline(ctx: ApiContext, run_id: str) -> Timeline:
    client = ctx.client()
    if not client.store.exists(run_id):
        raise refusals.unknown_run(run_id)
    j = client.store.open(run_id)
    try:
        if j.run() is None:
            raise refusals.unknown_run(run_id)
        return timeline(run_id, j.ledger())
    finally:
        j.close()


@router.get("/runs/{run_id}/timeline", response_model=Timeline, responses=NOT_FOUND, tags=["runs"])
async def run_timeline(run_id: str, ctx: Ctx) -> Timeline:
    """The run on one time axis (epoch seconds), from its journal: bars (the run, Turns, model requests with cached
    and prefilled tokens, Gate waits, Effects, parked periods) and marks (steps, picks, Gate events, timer firings)."""
    return await asyncio.to_thread(journal_timeline, ctx, run_id)
