"""Agents: one Turn's surface, its picks, and the scoped token a Harness plays it with.

A Harness token reaches only the first two, for its own Turn (the middleware refuses the rest; `run_id_of` checks
the Turn again). Whether that Turn still lasts is the middleware's check for a surface, and the pick's own (below).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from fastapi import APIRouter, Request

from jr2ray.menu import Receipt, Surface
from jr2ray.run.errors import UnknownRun, UnknownTurn
from jr2ray.run.handles import StaleHost

from ...auth import Principal, harness_token
from .. import refusals
from ..context import ApiContext, Ctx
from ..refusals import NotLive
from ..schemas import BAD, NOT_FOUND, HarnessToken, Pick

router = APIRouter()
_IID = re.compile(r"^(?P<run>[A-Za-z0-9_-]+)\.t(?P<seq>\d+)$")


def _principal(request: Request) -> Principal | None:
    """Who the middleware let through (None in-process, where no middleware ran)."""
    got: Principal | None = request.scope.get("state", {}).get("principal")
    return got


def run_id_of(request: Request, iid: str) -> str:
    """The run an Agent id names, once the caller may act for that Agent."""
    principal = _principal(request)
    if principal is not None and principal.kind == "harness" and principal.iid != iid:
        raise refusals.harness_acts_for_other(principal.iid)
    m = _IID.match(iid)
    if not m:
        raise refusals.bad_iid(iid)
    return m.group("run")


async def _actor(ctx: ApiContext, run_id: str, iid: str, hot: bool = False) -> Any:
    """The run's live actor; a run that does not exist is an Agent that does not exist. `hot`: a run whose host is
    known is reached without reading the store (see `ApiContext.actor`)."""
    try:
        return await ctx.actor(run_id, hot=hot)
    except UnknownRun:
        raise refusals.unknown_agent(iid) from None


async def _ended(ctx: ApiContext, run_id: str, iid: str) -> tuple[str, str]:
    """A Turn of a run that is over (a virtual run's host has gone back to the pool): (workflow, slot), as the
    journal tells it; else the NotLive refusal stands."""
    got = await asyncio.to_thread(ctx.ended_turn, run_id, iid)
    if got is None:
        raise NotLive(run_id)
    return got


@router.get("/agents/{iid}/surface", response_model=Surface, responses=NOT_FOUND, tags=["agents"])
async def surface(iid: str, request: Request, ctx: Ctx) -> Surface:
    """The Turn's fixed Menu and its Allowed picks now; `turn_over` once the Turn has ended."""
    run_id = run_id_of(request, iid)
    try:  # from the host that held the run last, else as it parked (from the store), else from its actor
        got: Surface = await ctx.read_run(run_id, lambda actor: ctx.call(actor.surface.remote(iid)),
                                          lambda: ctx.parked_surface(run_id, iid),
                                          lambda hot: _actor(ctx, run_id, iid, hot=hot))
    except NotLive:
        workflow, slot = await _ended(ctx, run_id, iid)
        menu = ctx.machine(workflow).menu(slot)  # type: ignore[attr-defined]
        return Surface(menu=menu, allowed=[], turn_over=True)
    return got


@router.post("/agents/{iid}/token", response_model=HarnessToken, responses=NOT_FOUND, tags=["agents"])
async def agent_token(iid: str, request: Request, ctx: Ctx) -> HarnessToken:
    """Mint the scoped token for one Turn, to hand to the Harness that plays it (instance token only).

    With it the Harness may read that Turn's surface and pick for it, nothing else: no other Turn, no run, and
    never a Gate. A Harness token asking here gets 403 from the middleware.
    """
    run_id = run_id_of(request, iid)
    actor = await _actor(ctx, run_id, iid)
    status = await ctx.status(actor)  # read-only: surface() would consume notices
    if not any(t.iid == iid and t.active for t in status.turns):
        raise refusals.no_live_turn(iid, run_id)
    token = ctx.token()
    assert token is not None  # the middleware let an instance token through
    return HarnessToken(iid=iid, token=harness_token(token, iid))


@router.post("/agents/{iid}/picks", response_model=Receipt, responses={**NOT_FOUND, **BAD}, tags=["agents"])
async def pick(iid: str, body: Pick, request: Request, ctx: Ctx) -> Receipt:
    """One pick, answered by its receipt; a pick that starts work is answered when the Agent is at Rest.

    With a Harness token, good while its Turn lasts: on a run whose host this replica knows, the pick's own answer
    says whether the Turn does (one Ray call); otherwise the Turn is checked first as `turn_over` checks it, from
    how the run parked when it is parked, so a stale token wakes nothing."""
    run_id = run_id_of(request, iid)
    refusals.no_sender(body.args, refusals.WHERE_PICK_ARGS)
    principal = _principal(request)
    token = principal is not None and principal.kind == "harness"  # its Turn's end is a 401, not a receipt
    checked = False
    for hot in (True, False):  # first the host that held the run last (one Ray call); if it let the run go, anew
        if token and not checked and not (hot and ctx.remembers(run_id)):
            checked = True
            if (over := await ctx.turn_over(iid)) is not None:
                raise refusals.TokenOver(over.detail)
        try:
            actor = await _actor(ctx, run_id, iid, hot=hot)
        except NotLive:  # the run is over: the pick gets the receipt an ended Turn gives
            await _ended(ctx, run_id, iid)
            return Receipt(delivered=False, moved=False, turn_complete=True, allowed=[], refused="turn_over",
                           pick=body.name)
        try:
            receipt: Receipt = await ctx.call(actor.pick.remote(iid, body.name, body.args, body.delivery_id))
        except StaleHost:
            continue
        except UnknownTurn:
            if token:  # a live run has every Turn that has not ended (a woken one starts them again)
                raise ctx.token_over(iid, run_live=True) from None
            raise
        if token and receipt.refused == "turn_over":
            raise ctx.token_over(iid, run_live=True)
        return receipt
    raise AssertionError("a fresh actor never answers StaleHost")
