"""One APIRouter per resource. A new route goes in the module of the resource it reads or changes.

Each router reaches its app's state through the `get_ctx` dependency, so the routers hold no state and can be
included in any number of apps.
"""

from __future__ import annotations

from fastapi import APIRouter

from . import admission, agents, console, gates, model, open_gates, runs, timeline, workflows

ROUTERS: tuple[APIRouter, ...] = (workflows.router, runs.router, gates.router, open_gates.router, agents.router,
                                  console.router, model.router, timeline.router, admission.router)
