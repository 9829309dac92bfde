"""Turn admission, read-only: is it on for the runs this API starts, and what does the LLM app's KV budget hold.

The budget is the named actor the LLM app's deploy made (`jr2ray.harness.budget_actor`), found in the runs'
namespace as their launchers find it. Reading it changes nothing: no run is reached, no share is asked or given back.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from jr2ray.harness.admission import BudgetStats
from jr2ray.harness.budget_actor import find_budget

from ..context import ApiContext, Ctx
from ..schemas import AdmissionView

router = APIRouter()


def _find(ctx: ApiContext) -> Any:
    """The budget actor's handle, or None. Blocking (`ray.get_actor` asks the GCS): called in a thread."""
    ctx.client()  # joins Ray, as any route that reaches runs does (lazily: an app serving only /docs never does)
    return find_budget(ctx.config.turn_admission_app, ctx.config.namespace)


async def budget_of(ctx: ApiContext) -> BudgetStats | None:
    """The stats of the app's budget actor; None when there is none (never deployed with admission on, or killed
    between the lookup and the call)."""
    from ray.exceptions import ActorDiedError

    handle = await asyncio.to_thread(_find, ctx)
    if handle is None:
        return None
    try:
        return BudgetStats.model_validate(await handle.stats.remote())
    except ActorDiedError:
        return None


@router.get("/admission", response_model=AdmissionView, tags=["admission"])
async def admission(ctx: Ctx) -> AdmissionView:
    """Turn admission: `on` for the runs this API starts, the LLM app it names, and that app's KV budget as it
    stands (capacity, tokens held, who holds and who waits), or null when no budget actor exists."""
    return AdmissionView(on=ctx.config.turn_admission, app=ctx.config.turn_admission_app, budget=await budget_of(ctx))
