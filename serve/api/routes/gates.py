"""Gates: a person's (or a webhook's) event into a run. An Agent never reaches these routes."""

from __future__ import annotations

from fastapi import APIRouter

from jr2ray.run import tracing
from jr2ray.run.models import SendResult

from ...graph import active_paths
from .. import refusals
from ..context import Ctx
from ..schemas import BAD, NOT_FOUND, ConflictBody, GateEvent, GateEventResult

router = APIRouter()


@router.post("/runs/{run_id}/gates/{gate:path}/events", response_model=GateEventResult,
             responses={**NOT_FOUND, **BAD, 409: {"model": ConflictBody}}, tags=["gates"])
async def gate_event(run_id: str, gate: str, body: GateEvent, ctx: Ctx) -> GateEventResult:
    """A person's (or webhook's) event through an open Gate. 409 carries what the Gate accepts now."""
    refusals.no_sender(body.input, refusals.WHERE_EVENT_INPUT)
    actor = await ctx.writable(run_id)
    res: SendResult = await ctx.call(actor.send.remote(gate, body.event, body.input, body.delivery_id,
                                                       tracing.current_traceparent()))
    machine_id = ctx.machine_id((await ctx.status(actor)).workflow)
    return GateEventResult(**res.model_dump(), active=active_paths(machine_id, res.value))
