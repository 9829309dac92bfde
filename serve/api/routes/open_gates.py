"""Open Gates across runs: everything waiting for a person, in one list (the Console's "waiting for you" view).

A parked run's Gates come from its index line (`waiting`, written when it parked), so listing wakes nothing; a live
run is asked for its view, as `GET /runs` asks it. A Gate is answered at POST /runs/{run_id}/gates/{gate}/events.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Response

from .. import listing
from ..context import Ctx
from ..schemas import BAD, OpenGate
from .runs import LIST_DOC, NEXT_CURSOR, live_view

router = APIRouter()


def _may_wait_at_gate(row: dict[str, Any]) -> bool:
    """A live run may have Gates (it is asked); a parked one has them if its line says so; nothing else does."""
    return row.get("presence") == "live" or bool((row.get("waiting") or {}).get("gates"))


@router.get("/gates", response_model=list[OpenGate], responses={**LIST_DOC, **BAD}, tags=["gates"])
async def open_gates(ctx: Ctx, response: Response,
                     limit: int = Query(100, ge=1, le=1000, description="The Gates of at most this many runs."),
                     cursor: str | None = Query(None, max_length=200, description="Page on after this (from the "
                                                "previous page's x-next-cursor header)."),
                     workflow: str | None = Query(None, max_length=200, description="Only runs of this workflow."),
                     ) -> list[OpenGate]:
    """Every open Gate of every active run, newest run first, paged by run. A page may hold fewer Gates than runs
    (a live run that had none), or none, and still name a next page: page on until no cursor comes."""
    filt = listing.RunFilter.checked("active", None, workflow, None)
    page = await listing.scan_async(ctx.client(), limit, cursor, filt, keep=_may_wait_at_gate)
    if page.next_cursor is not None:
        response.headers[NEXT_CURSOR] = page.next_cursor
        query = {"limit": str(limit), "cursor": page.next_cursor} | ({"workflow": workflow} if workflow else {})
        response.headers["link"] = f'</gates?{urlencode(query)}>; rel="next"'
    per_run = await asyncio.gather(*(_gates_of(ctx, r) for r in page.rows))
    return [g for gates in per_run for g in gates]


async def _gates_of(ctx: Any, row: dict[str, Any]) -> list[OpenGate]:
    common = {"run_id": row["id"], "workflow": row["workflow"], "presence": row.get("presence"),
              "created_at": row["created_at"], "updated_at": row["updated_at"]}
    if row.get("presence") != "live":
        return [OpenGate(gate=str(g), **common) for g in (row.get("waiting") or {}).get("gates", [])]
    view = await live_view(ctx, row["id"])
    if view is None:  # it did not answer in time: its Gates show on a later look
        return []
    return [OpenGate(gate=g.id, accepts_now=list(g.accepts_now), **common) for g in view.gates]
