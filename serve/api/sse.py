"""The run's Server-Sent Events feed: its history from a point, a status whenever it changes, keep-alives, `end`.

Each history event's SSE id is its number + 1, so a reconnect with Last-Event-ID resumes right after it. Every other
event (status, gap, end) carries the id of the point the stream has reached, so a client that reconnects after any
event resumes where it was, and never replays from the start for want of an id. A run with no live actor (a
finished run's has exited) gets its journal's status, its journaled feed from that point, and `end`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from jr2ray.run.errors import RunError

from .context import ApiContext
from .refusals import NotLive
from .schemas import RunView

MEDIA_TYPE = "text/event-stream"
EVENT_KINDS = ("status", "turn", "pick", "receipt", "admission", "gate", "telemetry", "timer", "park", "end")


def sse(kind: str, data: Any, event_id: int) -> bytes:
    body = json.dumps(data, default=str, separators=(",", ":"))
    return f"id: {event_id}\nevent: {kind}\ndata: {body}\n\n".encode()


def signature(v: RunView) -> str:
    """What a status event would say; a new one is sent only when this changes."""
    return json.dumps([v.status, v.value, v.context, [(g.id, g.accepts_now) for g in v.gates],
                       [(t.iid, t.active, t.outstanding, t.allowed_now) for t in v.turns]], sort_keys=True,
                      default=str)


async def stream(ctx: ApiContext, run_id: str, request: Request, since: int) -> StreamingResponse:
    """The response for GET /runs/{id}/events (a journal-only run gets its last status and `end`)."""
    try:
        actor = await ctx.actor(run_id)
    except NotLive:
        view = await asyncio.to_thread(ctx.journal_view, run_id)
        journaled = await asyncio.to_thread(_journal_feed, ctx, run_id, since)

        async def once() -> AsyncIterator[bytes]:  # no actor (a finished run's exits): the journal's feed
            at = since
            yield sse("status", view.model_dump(mode="json"), at)
            for item in journaled:
                at = max(at, item["seq"] + 1)
                if item["kind"] != "status":
                    yield sse(item["kind"], dict(item["data"], at=item["at"]), item["seq"] + 1)
            yield sse("end", {"status": view.status}, at)

        return StreamingResponse(once(), media_type=MEDIA_TYPE)
    headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    client = ctx.client()
    if client.virtual:  # pushed, not polled: following a parked run keeps it parked
        handle = client.handle(run_id)
        handle.host = getattr(actor, "host", None)
        parked = await ctx.parked_status(run_id)  # a parked run's is in the store; a live one's has a deadline
        first = ctx.view(parked if parked is not None else await ctx.status(actor))
        return StreamingResponse(PushedFeed(ctx, handle, since).run(request, first), media_type=MEDIA_TYPE,
                                 headers=headers)
    first = ctx.view(await ctx.status(actor))
    return StreamingResponse(Feed(ctx, actor, since).run(request, first), media_type=MEDIA_TYPE, headers=headers)


def _journal_feed(ctx: ApiContext, run_id: str, since: int) -> list[dict[str, Any]]:
    j = ctx.client().store.open(run_id)
    try:
        return j.feed(since)
    finally:
        j.close()


class Feed:
    """One subscriber's follow of one live run."""

    def __init__(self, ctx: ApiContext, actor: Any, since: int) -> None:
        self.ctx = ctx
        self.actor = actor
        self.since = since

    async def drain(self) -> AsyncIterator[bytes]:
        """The history events after `since`; a `gap` where the Run trimmed some before they could be read."""
        items: list[dict[str, Any]] = await self.ctx.call(self.actor.history.remote(self.since))
        for item in items:
            seq = int(item.get("seq", self.since))
            if seq > self.since:  # trimmed before we read them: say so rather than skip silently
                yield sse("gap", {"missed": seq - self.since, "from": self.since + 1, "to": seq}, seq)
            self.since = seq + 1
            if item["kind"] == "status":  # the engine's end note: the full status event says it, with the value
                continue
            yield sse(item["kind"], dict(item["data"], at=item["at"]), self.since)

    async def run(self, request: Request, first: RunView) -> AsyncIterator[bytes]:
        """The body: poll history every `poll_s`, the status at least every second, until the run is over."""
        cfg = self.ctx.config
        yield b"retry: 2000\n\n"
        yield sse("status", first.model_dump(mode="json"), self.since)
        last_sig, status = signature(first), first
        last_write = last_status = time.monotonic()
        while not await request.is_disconnected():
            wrote = False
            try:
                async for chunk in self.drain():
                    wrote = True
                    yield chunk
                if wrote or time.monotonic() - last_status > 1.0:
                    last_status = time.monotonic()
                    status = self.ctx.view(await self.ctx.status(self.actor))
            except RunError:
                yield sse("end", {"status": "unavailable"}, self.since)
                return
            if wrote:
                last_write = time.monotonic()
            if signature(status) != last_sig:
                last_sig = signature(status)
                yield sse("status", status.model_dump(mode="json"), self.since)
                last_write = time.monotonic()
            if status.status != "active":
                async for chunk in self.finish(status):
                    yield chunk
                return
            if time.monotonic() - last_write >= cfg.keepalive_s:
                yield b": keep-alive\n\n"
                last_write = time.monotonic()
            await asyncio.sleep(cfg.poll_s)

    async def finish(self, status: RunView) -> AsyncIterator[bytes]:
        """The run is over: what history is left, then `end`."""
        try:
            async for chunk in self.drain():
                yield chunk
        except RunError:
            pass
        yield sse("end", {"status": status.status}, self.since)


class PushedFeed(Feed):
    """One subscriber's follow of one virtual run, driven by the run's own changes (`standings`): nothing is polled,
    a parked run is followed from the store without waking, and its history is read from its journal meanwhile."""

    def __init__(self, ctx: ApiContext, handle: Any, since: int) -> None:
        super().__init__(ctx, handle, since)
        self.handle = handle

    async def drain(self) -> AsyncIterator[bytes]:
        items: list[dict[str, Any]] = await self.handle.history_async(self.since)
        for chunk in self._events(items):
            yield chunk

    def _events(self, items: list[dict[str, Any]]) -> list[bytes]:
        out: list[bytes] = []
        for item in items:
            seq = int(item.get("seq", self.since))
            if seq < self.since:
                continue
            if seq > self.since:
                out.append(sse("gap", {"missed": seq - self.since, "from": self.since + 1, "to": seq}, seq))
            self.since = seq + 1
            if item["kind"] != "status":
                out.append(sse(item["kind"], dict(item["data"], at=item["at"]), self.since))
        return out

    async def run(self, request: Request, first: RunView) -> AsyncIterator[bytes]:
        cfg = self.ctx.config
        yield b"retry: 2000\n\n"
        yield sse("status", first.model_dump(mode="json"), self.since)
        last_sig = signature(first)
        last_write = time.monotonic()
        watch = self.handle.standings()
        nxt: asyncio.Future[Any] | None = None
        try:
            while not await request.is_disconnected():
                nxt = nxt or asyncio.ensure_future(watch.__anext__())
                left = max(0.0, cfg.keepalive_s - (time.monotonic() - last_write))
                done, _ = await asyncio.wait({nxt}, timeout=left)
                if not done:
                    yield b": keep-alive\n\n"
                    last_write = time.monotonic()
                    continue
                got, nxt = nxt, None
                try:
                    standing = got.result()
                    status = self.ctx.view(standing.status)
                except StopAsyncIteration:
                    status = self.ctx.view(await self.handle.status_async())
                except RunError:
                    yield sse("end", {"status": "unavailable"}, self.since)
                    return
                async for chunk in self.drain():
                    last_write = time.monotonic()
                    yield chunk
                if signature(status) != last_sig:
                    last_sig = signature(status)
                    last_write = time.monotonic()
                    yield sse("status", status.model_dump(mode="json"), self.since)
                if status.status not in ("active", "queued"):
                    async for chunk in self.finish(status):
                        yield chunk
                    return
        finally:
            if nxt is not None:
                nxt.cancel()
            await watch.aclose()
