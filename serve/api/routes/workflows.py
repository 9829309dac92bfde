"""Liveness and the workflows: what can be run, its seats, its door and its chart."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from jr2ray.authoring import Jr2Machine

from ...graph import graph_of, render_svg
from ..config import VERSION
from ..context import Ctx
from ..schemas import NOT_FOUND, Health, WorkflowDetail, WorkflowSummary

router = APIRouter()


def summary(name: str, m: Jr2Machine) -> WorkflowSummary:
    return WorkflowSummary(name=name, id=m.id, digest=m.digest, agents=m.agent_slots,
                           seats=m.seats(), warnings=list(m.warnings))  # type: ignore[attr-defined]


@router.get("/healthz", response_model=Health, tags=["health"])
async def healthz() -> Health:
    """Liveness, for load balancers and `jr2ray up`; needs no token and touches no run."""
    return Health(ok=True, version=VERSION)


@router.get("/workflows", response_model=list[WorkflowSummary], tags=["workflows"])
async def workflows(ctx: Ctx) -> list[WorkflowSummary]:
    """Every workflow with its seats and load warnings."""
    return [summary(n, m) for n, m in ctx.workflows()]


@router.get("/workflows/{name}", response_model=WorkflowDetail, responses=NOT_FOUND, tags=["workflows"])
async def workflow(name: str, ctx: Ctx) -> WorkflowDetail:
    """Seats, warnings, the door schema, each Agent's Menu and the chart's graph."""
    m = ctx.machine(name)
    return WorkflowDetail(**summary(name, m).model_dump(), seats_text=m.seats_text(),  # type: ignore[attr-defined]
                          door_schema=m.input_model.model_json_schema() if m.input_model else None,
                          menus={s: m.menu(s) for s in m.agent_slots},  # type: ignore[attr-defined]
                          graph=graph_of(m))


@router.get("/workflows/{name}/graph.svg", responses=NOT_FOUND, tags=["workflows"], response_class=Response)
async def workflow_svg(name: str, ctx: Ctx) -> Response:
    """The chart drawn server-side; the Console lights states by their data-path."""
    return Response(render_svg(ctx.machine(name), name), media_type="image/svg+xml")
