"""The same app driven in-process through httpx's ASGITransport (no server, no socket), against real Run actors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from serve.auth import harness_token

from .api_helpers import NOTES_INPUT, observe, run_ids

pytestmark = pytest.mark.ray


def _client(app: FastAPI, token: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://jr2ray.test", headers=headers,
                             timeout=60)


async def _gate(c: httpx.AsyncClient, rid: str) -> dict[str, Any]:
    """The run's open Gate, once it has one."""
    for _ in range(1200):
        gates = (await c.get(f"/runs/{rid}")).json()["gates"]
        if gates:
            return gates[0]
        await asyncio.sleep(0.05)
    raise AssertionError("the Gate never opened")


async def test_notes_in_process(asgi_app: FastAPI, token: str) -> None:
    async with _client(asgi_app, token) as c:
        assert (await c.get("/healthz")).json()["ok"] is True
        r = await c.post("/workflows/notes/runs", json={"input": NOTES_INPUT})
        assert r.status_code == 201, r.text
        rid, iid = r.json()["id"], r.json()["turns"][0]["iid"]
        assert (await c.get(f"/agents/{iid}/surface")).json()["allowed"] == ["ask"]

        pick = asyncio.create_task(c.post(f"/agents/{iid}/picks", json={"name": "ask", "args": {"question": "?"}}))
        gate = await _gate(c, rid)
        assert not pick.done() and gate["accepts_now"] == ["reply"]
        conflict = await c.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "done",
                                                                               "input": {"notes": "x"}})
        assert conflict.status_code == 409 and conflict.json()["accepts_now"] == ["reply"]
        sent = await c.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply", "input": {"text": "t"}})
        assert sent.status_code == 200
        receipt = (await asyncio.wait_for(pick, 60)).json()
        assert receipt["answer"] == "The editor replied: t" and receipt["allowed"] == ["ask", "done"]
        done = (await c.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "n"}})).json()
        assert done["turn_complete"]
        for _ in range(600):
            view = (await c.get(f"/runs/{rid}")).json()
            if view["status"] == "done":
                break
            await asyncio.sleep(0.05)
        assert view["status"] == "done" and view["output"] == {"notes": "n"}


async def _start_notes(app: FastAPI, token: str) -> tuple[str, str, Path, Any, Any]:
    """A fresh notes run, and what its refusal checks compare against: (run, iid, store, journal view, run ids)."""
    async with _client(app, token) as c:
        r = await c.post("/workflows/notes/runs", json={"input": NOTES_INPUT})
    rid, iid = r.json()["id"], r.json()["turns"][0]["iid"]
    store = app.state.ctx.home / "runs"
    return rid, iid, store, observe(store, rid), run_ids(store)


async def test_auth_in_process(asgi_app: FastAPI, token: str) -> None:
    rid, iid, store, before, ids = await _start_notes(asgi_app, token)
    async with _client(asgi_app, None) as anon:
        assert (await anon.get(f"/runs/{rid}")).status_code == 401
        assert (await anon.post(f"/agents/{iid}/picks", json={"name": "ask", "args": {"question": "?"}})
                ).status_code == 401
    async with _client(asgi_app, harness_token(token, iid)) as h:
        assert (await h.get(f"/agents/{iid}/surface")).status_code == 200
        assert (await h.get(f"/agents/{rid}.t7/surface")).status_code == 403
        assert (await h.post("/workflows/notes/runs", json={"input": NOTES_INPUT})).status_code == 403
        assert (await h.post(f"/runs/{rid}/cancel")).status_code == 403
    assert observe(store, rid) == before and run_ids(store) == ids
    async with _client(asgi_app, token) as c:
        assert (await c.post(f"/runs/{rid}/cancel")).json()["status"] == "cancelled"
    ended = observe(store, rid)
    async with _client(asgi_app, harness_token(token, iid)) as h:  # cancelling the run ended the Turn
        late = await h.get(f"/agents/{iid}/surface")
        assert late.status_code == 401 and iid in late.json()["detail"] and "no longer works" in late.json()["detail"]
        assert late.headers["www-authenticate"].startswith("Bearer")
    # Its host may have let the ended run go meanwhile: read again, it lists no Turns (they are in its history).
    after = observe(store, rid)
    assert {**after, "status": {**after["status"], "turns": None}} == {**ended, "status": {**ended["status"],
                                                                                          "turns": None}}


async def test_a_chunked_body_over_the_limit_is_413_in_process(asgi_app: FastAPI, token: str) -> None:
    rid, iid, store, before, ids = await _start_notes(asgi_app, token)
    async with _client(asgi_app, token) as c:
        async def body() -> AsyncIterator[bytes]:  # no content-length: the limit is found while reading
            data = json.dumps({"name": "ask", "args": {"question": "q" * (2 * 1024 * 1024)}}).encode()
            for i in range(0, len(data), 256 * 1024):
                yield data[i:i + 256 * 1024]

        r = await c.post(f"/agents/{iid}/picks", content=body(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "body over 1048576 bytes" in r.json()["detail"]
        assert observe(store, rid) == before and run_ids(store) == ids
        r = await c.post("/workflows/notes/runs", content=body(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and run_ids(store) == ids
        small = json.dumps({"name": "ask", "args": {"question": "fine"}}).encode()

        async def small_body() -> AsyncIterator[bytes]:
            for i in range(0, len(small), 7):
                yield small[i:i + 7]

        task = asyncio.create_task(c.post(f"/agents/{iid}/picks", content=small_body(),
                                          headers={"content-type": "application/json"}))
        gate = await _gate(c, rid)  # a small chunked body is reassembled and delivered
        assert gate["meta"] == {"question": "fine"}
        assert (await c.post(f"/runs/{rid}/cancel")).json()["status"] == "cancelled"
        assert (await asyncio.wait_for(task, 60)).json()["refused"] == "unfinished"


async def test_a_runs_live_turns_carry_the_allowed_line_the_model_reads(asgi_app: FastAPI, token: str) -> None:
    """The run view's `allowed_now` is the surface's line (texts.allowed_line), read without consuming the surface."""
    from jr2ray.menu import texts

    rid, iid, *_ = await _start_notes(asgi_app, token)
    async with _client(asgi_app, token) as c:
        (turn,) = (await c.get(f"/runs/{rid}")).json()["turns"]
        surface = (await c.get(f"/agents/{iid}/surface")).json()
        assert turn["allowed_now"] == surface["allowed_now"] == texts.allowed_line(["ask"])
        cancelled = (await c.post(f"/runs/{rid}/cancel")).json()  # the run's last live view
        assert cancelled["status"] == "cancelled"
        (ended,) = cancelled["turns"]
        assert not ended["active"] and ended["allowed_now"] is None


async def test_a_harness_tokens_pick_is_one_call_to_the_run_and_its_ended_turn_a_401(
        asgi_app: FastAPI, token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Harness token is good while its Turn lasts. For a pick, the pick itself says whether it does: one call to
    the run, no status call first. Once the run says the Turn is over the pick is a 401 with the reason (nothing
    written), and the API remembers it: the next pick is refused without calling the run."""
    rid, iid, store, _before, _ids = await _start_notes(asgi_app, token)
    ctx = asgi_app.state.ctx
    calls: list[str] = []
    real_call, real_over = ctx.call, ctx.turn_over

    async def call(ref: Any) -> Any:
        calls.append("call")
        return await real_call(ref)

    async def turn_over(i: str) -> Any:
        calls.append("turn_over")
        return await real_over(i)

    monkeypatch.setattr(ctx, "call", call)
    monkeypatch.setattr(ctx, "turn_over", turn_over)
    too_soon = {"name": "done", "args": {"notes": "too soon"}}  # refused by the writer's guard: delivered, unmoved
    async with _client(asgi_app, harness_token(token, iid)) as h:
        await h.get(f"/agents/{iid}/surface")  # the API now remembers the run's host
        calls.clear()
        r = await h.post(f"/agents/{iid}/picks", json=too_soon)
        assert r.status_code == 200 and r.json()["delivered"] and not r.json()["moved"], r.text
        assert calls == ["call"]
        async with _client(asgi_app, token) as c:
            assert (await c.post(f"/runs/{rid}/cancel")).json()["status"] == "cancelled"
        before, ids = observe(store, rid), run_ids(store)
        for _ in range(2):
            calls.clear()
            late = await h.post(f"/agents/{iid}/picks", json=too_soon)
            assert late.status_code == 401, late.text
            assert late.json()["detail"] == f"the Harness token of Turn {iid} no longer works: its Turn has ended"
            assert late.headers["www-authenticate"].startswith("Bearer")
            assert observe(store, rid) == before and run_ids(store) == ids
        assert "call" not in calls, calls  # the second: remembered, refused before any call to the run
