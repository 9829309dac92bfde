"""Runs: start one, list them, read one, cancel it, its model telemetry and its live event feed."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from jr2ray.run.errors import RunError
from jr2ray.run.handles import VirtualActorRef
from jr2ray.run.models import listed_presence

from ...graph import render_svg
from .. import listing, refusals, sse
from ..context import ApiContext, Ctx
from ..refusals import NotLive
from ..schemas import BAD, NOT_FOUND, TOO_LARGE, InputSummary, RunSummary, RunView, StartRun, Telemetry, TurnCache

router = APIRouter()
LIST_TIMEOUT_S = 5.0


KEY_DOC = ("Makes the start safe to retry (a request cut by a restart, say): the run's id follows from the workflow "
           "and this key, so a retry with the same key and input answers 200 with the run the first one started, "
           "and starts nothing; the same key with another input is refused (409).")
KEY_PATTERN = r"^[\x21-\x7e]{1,200}$"  # 1-200 visible ASCII characters


def keyed_run_id(workflow: str, key: str) -> str:
    """The id of the run an `Idempotency-Key` starts: the same for every retry, distinct across workflows."""
    return hashlib.sha256(f"{workflow}\0{key}".encode()).hexdigest()[:12]


def _started_input(ctx: ApiContext, run_id: str) -> tuple[bool, Any]:
    """(whether the run exists, its input), from its journal."""
    store = ctx.client().store
    if not store.exists(run_id):
        return False, None
    j = store.open(run_id)
    try:
        row = j.run()
    finally:
        j.close()
    return row is not None, row.input if row is not None else None


@router.post("/workflows/{name}/runs", status_code=201, response_model=RunView,
             responses={**NOT_FOUND, **BAD, **TOO_LARGE,
                        200: {"model": RunView, "description": "A retry: the run this Idempotency-Key started."},
                        409: {"description": "The Idempotency-Key started a run with another input."}},
             tags=["runs"])
async def start_run(name: str, body: StartRun, response: Response, ctx: Ctx,
                    idempotency_key: Annotated[str | None, Header(pattern=KEY_PATTERN, description=KEY_DOC)] = None,
                    ) -> RunView:
    """Start a run: its input is checked against the size limit (413) and the door schema (400 names the error)."""
    m = ctx.machine(name)
    size = len(json.dumps(body.input, ensure_ascii=False, separators=(",", ":")).encode())
    if size > ctx.config.max_input:
        raise refusals.input_too_large(size, ctx.config.max_input)
    try:
        m.validate_input(body.input)
    except ValueError as exc:
        raise refusals.bad_input(str(exc)) from None
    client = ctx.client()
    run_id = keyed_run_id(name, idempotency_key) if idempotency_key is not None else None
    if run_id is not None:
        exists, started_with = await asyncio.to_thread(_started_input, ctx, run_id)
        if exists:  # a retry: the run its first request started, whatever became of that request
            if started_with != body.input:
                raise refusals.key_reused(str(idempotency_key), run_id)
            response.status_code = 200
            response.headers["location"] = f"/runs/{run_id}"
            return await ctx.live_or_journal(run_id)
    handle = await asyncio.to_thread(functools.partial(client.submit, name, body.input, run_id, env=ctx.run_env()))
    response.headers["location"] = f"/runs/{handle.id}"
    if not client.virtual:
        return ctx.view(await ctx.status(handle.actor))
    if not handle.admitted:  # `queued` until admission gives it a slot: its journal says so
        return await asyncio.to_thread(ctx.journal_view, handle.id)
    try:
        return ctx.view(await ctx.status(VirtualActorRef(handle.id, client.registry())))
    except refusals.RunUnavailable:  # started (journaled) but its host is slow to come up: the journal answers
        return await asyncio.to_thread(ctx.journal_view, handle.id)


NEXT_CURSOR = "x-next-cursor"
LIST_DOC: dict[int | str, dict[str, Any]] = {
    200: {"description": "One page of runs, newest first. When more follow, the `x-next-cursor` header holds the "
                         "`cursor` of the next page (and `link` names it, rel=next).",
          "headers": {NEXT_CURSOR: {"description": "The cursor of the next page; absent on the last one.",
                                    "schema": {"type": "string"}}}}}


@router.get("/runs", response_model=list[RunSummary], responses={**LIST_DOC, **BAD}, tags=["runs"])
async def runs(ctx: Ctx, response: Response,
               limit: int = Query(200, ge=1, le=1000, description="At most this many runs."),
               cursor: str | None = Query(None, max_length=200, description="Page on after this (from the "
                                          "previous page's x-next-cursor header)."),
               status: str | None = Query(None, pattern="^[a-z]{1,16}$", description="Only runs with this status "
                                          "(e.g. active, queued, done)."),
               where: str | None = Query(None, max_length=40, description="Only runs that are `live`, `parked` "
                                         "or `queued`."),
               workflow: str | None = Query(None, max_length=200, description="Only runs of this workflow."),
               prefix: str | None = Query(None, max_length=200, description="Only runs whose id starts so (find a "
                                          "run by the start of its id).")) -> list[RunSummary]:
    """Runs, newest first, one page at a time from the store's run index (no journal is opened for a page):
    status and presence; parked ones where they wait (`waiting`), queued ones their `place` when known, live ones
    their value, open Gates and Turns. With `where`, `workflow` or `prefix` a page may hold fewer than `limit` runs
    (at most 5,000 are looked at per request) and still name a next page: page on until no cursor comes."""
    filt = listing.RunFilter.checked(status, where, workflow, prefix)
    client = ctx.client()
    page = await listing.scan_async(client, limit, cursor, filt)
    if page.next_cursor is not None:
        response.headers[NEXT_CURSOR] = page.next_cursor
        response.headers["link"] = f'<{_next_link(limit, page.next_cursor, filt)}>; rel="next"'
    return list(await asyncio.gather(*(_summary(ctx, r, client.virtual) for r in page.rows)))


def _next_link(limit: int, cursor: str, filt: listing.RunFilter) -> str:
    params = {"limit": str(limit), "cursor": cursor, "status": filt.status, "where": filt.where,
              "workflow": filt.workflow, "prefix": filt.prefix}
    return "/runs?" + urlencode({k: v for k, v in params.items() if v is not None})


async def _summary(ctx: ApiContext, row: dict[str, Any], virtual: bool) -> RunSummary:
    """One listed run. A live one is asked for its view (a run that does not answer in time is listed from its row
    alone); with virtual runs, every other one is listed from its index row, so listing wakes nothing."""
    view: RunView | None = None
    if row["presence"] == "live" or (not virtual and row["lifecycle"] not in ("lost", "corrupt")):
        view = await live_view(ctx, row["id"])
    parked = row["presence"] == "parked"
    status = view.status if view else row["status"]
    return RunSummary(id=row["id"], workflow=row["workflow"], digest=row["digest"],
                      status=status, created_at=row["created_at"],
                      updated_at=row["updated_at"], input=InputSummary.of(row["input"]),
                      value=view.value if view else row.get("value"), active=view.active if view else [],
                      gates=view.gates if view else [], turns=view.turns if view else [],
                      presence=listed_presence(status, row["presence"]), error=row.get("error"),
                      waiting=row.get("waiting") if parked else None,
                      place=row.get("place") if row["presence"] == "queued" else None)


async def live_view(ctx: ApiContext, run_id: str) -> RunView | None:
    """A live run's view, or None when it does not answer within LIST_TIMEOUT_S (a list must not hang on one)."""
    try:
        return await asyncio.wait_for(ctx.live_or_journal(run_id), timeout=LIST_TIMEOUT_S)
    except (RunError, TimeoutError):
        return None


@router.get("/runs/{run_id}", response_model=RunView, responses=NOT_FOUND, tags=["runs"])
async def run(run_id: str, ctx: Ctx) -> RunView:
    """Status, value, context, and the open Gates with `accepts` and `accepts_now`."""
    return await ctx.live_or_journal(run_id)


@router.post("/runs/{run_id}/cancel", response_model=RunView, responses=NOT_FOUND, tags=["runs"])
async def cancel(run_id: str, ctx: Ctx) -> RunView:
    """End the run as `cancelled` and abort its Turns; a run already over is returned unchanged."""
    try:
        actor = await ctx.writable(run_id)
    except NotLive:  # over (or lost, or damaged): its journal says so, unchanged
        return await asyncio.to_thread(ctx.journal_view, run_id)
    return ctx.view(await ctx.call(actor.cancel.remote()))


@router.get("/runs/{run_id}/graph.svg", responses=NOT_FOUND, tags=["runs"], response_class=Response)
async def run_graph(run_id: str, ctx: Ctx) -> Response:
    """The run's chart, drawn from its own version (the Console lights its states by their data-path)."""
    name, machine = await asyncio.to_thread(ctx.run_machine, run_id)
    return Response(render_svg(machine, name), media_type="image/svg+xml")


@router.get("/runs/{run_id}/telemetry", response_model=Telemetry, responses=NOT_FOUND, tags=["runs"])
async def telemetry(run_id: str, ctx: Ctx) -> Telemetry:
    """Per-request model telemetry, and per Turn the cached against the prefilled prompt tokens. Every row is
    journaled as it is recorded, so a parked run's come from its journal: opening its page wakes nothing."""
    async def parked() -> list[dict[str, Any]] | None:
        return None if await ctx.parked_status(run_id) is None else await asyncio.to_thread(ctx.journal_telemetry,
                                                                                              run_id)
    rows: list[dict[str, Any]]
    try:
        rows = await ctx.read_run(run_id, lambda actor: ctx.call(actor.telemetry.remote()), parked)
    except NotLive:
        rows = await asyncio.to_thread(ctx.journal_telemetry, run_id)
    return Telemetry(rows=rows, turns=summarise_telemetry(rows))


def summarise_telemetry(rows: list[dict[str, Any]]) -> list[TurnCache]:
    turns: dict[str, TurnCache] = {}
    for r in rows:
        iid = str(r.get("iid", "?"))
        t = turns.get(iid)
        if t is None:
            t = turns[iid] = TurnCache(iid=iid, slot=str(r.get("slot", "")), state=str(r.get("state", "")),
                                       requests=0, prompt_tokens=0, cached_tokens=0, prefilled_tokens=0)
        prompt, cached = int(r.get("prompt_tokens") or 0), int(r.get("cached_tokens") or 0)
        t.requests += 1
        t.prompt_tokens += prompt
        t.cached_tokens += cached
        t.prefilled_tokens += max(0, prompt - cached)
    return list(turns.values())


SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {"description": "A `text/event-stream` of `status`, `turn`, `pick`, `receipt`, `admission`, `gate`, "
                         "`telemetry`, `timer` (a timer fired), `park` (the run parked) and a final `end` event, "
                         "with `: keep-alive` comments (and `gap` when "
                         "events were trimmed before they could be sent).",
          "content": {sse.MEDIA_TYPE: {"schema": {"type": "string"}}}},
    **NOT_FOUND}


@router.get("/runs/{run_id}/events", responses={**SSE_DOC, **BAD}, tags=["runs"], response_class=StreamingResponse)
async def events(run_id: str, request: Request, ctx: Ctx,
                 since: int = Query(0, ge=0, description="Replay history from this event number (an SSE id; "
                                                         "Last-Event-ID wins when sent).")
                 ) -> StreamingResponse:
    """Server-Sent Events: status, picks and receipts, admissions, Gates, Turns and telemetry, live.

    Replays the run's history from `since` (or Last-Event-ID), then follows it; ends when the run ends.
    """
    last = request.headers.get("last-event-id")
    if last is not None and not (last.isascii() and last.isdigit() and len(last) <= 18):
        raise refusals.bad_last_event_id(last)
    start = int(last) if last else max(0, since)
    return await sse.stream(ctx, run_id, request, start)
