"""The Console: one public page with the workflows' seats and charts inlined, and its static files.

The page carries no run data (it is public); the Console reads runs over the API with the token the user gives it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from ...graph import render_svg
from ..context import Ctx
from .workflows import summary

CONSOLE_DIR = Path(__file__).resolve().parents[2] / "console"
router = APIRouter()


def json_for_script(data: Any) -> str:
    """JSON safe inside <script>: no `</script>` or `<!--` can end the element early."""
    return json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def console(ctx: Ctx) -> HTMLResponse:
    """The Console page, with the workflows' seats and graphs inlined."""
    catalogue = [{**summary(n, m).model_dump(mode="json"), "svg": render_svg(m, n)} for n, m in ctx.workflows()]
    page = (CONSOLE_DIR / "index.html").read_text()
    page = page.replace("/*CATALOGUE*/null", json_for_script(catalogue))
    return HTMLResponse(page, headers={"cache-control": "no-store"})


def mount_static(app: FastAPI) -> None:
    """The Console's JS and CSS (a router cannot mount, so the app builder calls this)."""
    app.mount("/console", StaticFiles(directory=CONSOLE_DIR), name="console")
