"""The middleware in Serve's HTTP proxy, in-process against stand-ins for the proxy: the proxy's own errors (no
response at all, a text 500/408/503) become the API's JSON 503 with Retry-After; the app's own answers pass as they
are; an event stream goes to Serve with its end-to-end timeout off and a bound on its first byte instead."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from serve.api.proxy import (
    CALLBACK_ENV,
    PROXY_CALLBACK,
    TIMEOUT_ENV,
    ProxyErrorsMiddleware,
    proxy_env,
    proxy_middlewares,
)


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


def _text(status: int, text: str) -> Any:
    """What Serve's proxy sends for its own errors (convert_object_to_asgi_messages: a text/plain body)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
        await send({"type": "http.response.body", "body": text.encode(), "more_body": False})

    return app


async def _silent(scope: Any, receive: Any, send: Any) -> None:
    """The proxy when the replica died mid-request: it returns without a response (uvicorn would send text 500)."""


def _assert_json_503(r: httpx.Response, *words: str) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.headers["retry-after"] == "2" and r.json()["retry_after"] == 2
    for w in words:
        assert w in r.json()["detail"], r.json()["detail"]


@pytest.mark.parametrize(("inner", "words"), [
    (_silent, ("replica stopped", "same delivery_id")),
    (_text(500, "Internal Server Error"), ("replica stopped",)),
    (_text(408, "Request abc timed out after 8.0s."), ("did not answer within 8 s", "waiting for Rest")),
    (_text(503, "Deployment(name='jr2ray-api', app='jr2ray') is unavailable because it failed to deploy."),
     ("not available",)),
    (_text(404, "Path '/runs' not found. Ping http://127.0.0.1:8000/-/routes for available routes."),
     ("not available", "no route")),
])
async def test_the_proxys_own_errors_become_json_503_with_retry_after(inner: Any, words: tuple[str, ...]) -> None:
    async with _client(ProxyErrorsMiddleware(inner, timeout_s=8.0)) as c:
        r = await c.post("/agents/r1.t1/picks", json={"name": "ask"})
    _assert_json_503(r, *words)
    assert "Internal Server Error" not in r.text and "timed out" not in r.text


async def test_a_proxy_failure_before_any_answer_is_json_503() -> None:
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("the proxy lost its handle")

    async with _client(ProxyErrorsMiddleware(broken, timeout_s=8.0)) as c:
        _assert_json_503(await c.get("/runs"), "replica stopped")


async def test_the_apps_own_answers_pass_unchanged() -> None:
    """The app's JSON 500 and 503 are its own words (a Run actor restarting, a bug): never rewritten."""

    def app_json(status: int, body: bytes) -> Any:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body, "more_body": False})
        return app

    for status, body in [(200, b'{"ok":true}'), (500, b'{"detail":"internal error (KeyError)"}'),
                         (503, b'{"detail":"the Run actor is not answering","retry_after":2}'), (404, b"{}")]:
        async with _client(ProxyErrorsMiddleware(app_json(status, body), timeout_s=8.0)) as c:
            r = await c.get("/runs/x")
        assert (r.status_code, r.content) == (status, body)


async def test_the_proxys_health_route_is_left_alone() -> None:
    async with _client(ProxyErrorsMiddleware(_text(503, "draining"), timeout_s=8.0)) as c:
        r = await c.get("/-/healthz")
    assert (r.status_code, r.text) == (503, "draining")


def _recording(seen: list[dict[bytes, bytes]]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(dict(scope["headers"]))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})
    return app


async def test_each_api_request_gets_serves_timeout_and_a_stream_none() -> None:
    seen: list[dict[bytes, bytes]] = []
    hostile = {"x-request-timeout-seconds": "0", "x-request-disconnect-disabled": "?1"}
    async with _client(ProxyErrorsMiddleware(_recording(seen), timeout_s=8.0)) as c:
        await c.get("/runs/r1/events")
        await c.post("/agents/r1.t1/picks", json={}, headers=hostile)
        await c.get("/runs/r1/events", headers={"x-request-timeout-seconds": "3600"})
        await c.get("/")
    stream, pick, stream2, console = seen
    assert stream[b"x-request-timeout-seconds"] == b"0" == stream2[b"x-request-timeout-seconds"]
    assert pick[b"x-request-timeout-seconds"] == b"8" and b"x-request-disconnect-disabled" not in pick
    assert console[b"x-request-timeout-seconds"] == b"8"


async def test_another_apps_requests_on_the_proxy_pass_untouched() -> None:
    """The model under /llm may generate for longer than the API's bound, and its errors are its own."""
    seen: list[dict[bytes, bytes]] = []
    async with _client(ProxyErrorsMiddleware(_recording(seen), timeout_s=8.0)) as c:
        await c.post("/llm/v1/chat/completions", json={}, headers={"x-request-timeout-seconds": "900"})
    assert seen[0][b"x-request-timeout-seconds"] == b"900"
    async with _client(ProxyErrorsMiddleware(_text(500, "Internal Server Error"), timeout_s=8.0)) as c:
        r = await c.post("/llm/v1/chat/completions", json={})
    assert (r.status_code, r.text) == (500, "Internal Server Error")


def test_the_api_roots_are_every_route_of_the_app(tmp_path: Any) -> None:
    from serve.api import ApiConfig, build_app
    from serve.api.proxy import API_ROOTS

    app = build_app(ApiConfig(home=str(tmp_path), launcher="none"))
    roots = {getattr(r, "path", "/").split("/", 2)[1] for r in app.routes}
    assert roots == API_ROOTS


async def test_a_stream_that_sends_nothing_within_the_bound_is_503_and_its_request_cancelled() -> None:
    cancelled = asyncio.Event()

    async def waits_for_a_replica(scope: Any, receive: Any, send: Any) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with _client(ProxyErrorsMiddleware(waits_for_a_replica, timeout_s=0.3)) as c:
        r = await asyncio.wait_for(c.get("/runs/r1/events"), timeout=10)
    _assert_json_503(r, "did not answer within 0.3 s")
    assert cancelled.is_set()


async def test_a_stream_that_started_is_not_cut_by_the_bound() -> None:
    async def slow_stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for i in range(3):
            await asyncio.sleep(0.2)
            await send({"type": "http.response.body", "body": f"id: {i}\n\n".encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async with _client(ProxyErrorsMiddleware(slow_stream, timeout_s=0.3)) as c:
        r = await c.get("/runs/r1/events")
    assert r.status_code == 200 and r.text == "id: 0\n\nid: 1\n\nid: 2\n\n"


def test_the_callback_serve_loads_reads_the_bound_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = proxy_env(12.5)
    assert env == {CALLBACK_ENV: PROXY_CALLBACK, TIMEOUT_ENV: "12.5"}
    monkeypatch.setenv(TIMEOUT_ENV, env[TIMEOUT_ENV])
    from ray.serve._private.http_util import validate_http_proxy_callback_return
    from ray.serve._private.utils import call_function_from_import_path

    (mw,) = validate_http_proxy_callback_return(call_function_from_import_path(PROXY_CALLBACK))
    assert mw.cls is ProxyErrorsMiddleware and mw.kwargs == {"timeout_s": 12.5}
    monkeypatch.delenv(TIMEOUT_ENV)
    assert proxy_middlewares()[0].kwargs == {"timeout_s": 60.0}  # the setting's default


def _restarting(health: int | None, calls: list[str], cancelled: list[str]) -> Any:
    """The proxy with a replica dead or restarting (`health` None: /healthz waits too, as Serve queues it) or alive
    with every other request waiting for Rest (`health` 200): nothing but /healthz answers."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope["path"])
        try:
            if scope["path"] == "/healthz" and health is not None:
                await send({"type": "http.response.start", "status": health,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b'{"ok": true}', "more_body": False})
                return
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(scope["path"])
            raise

    return app


async def test_a_request_queued_for_a_dead_replica_is_503_once_healthz_is_silent_too() -> None:
    calls: list[str] = []
    cancelled: list[str] = []
    mw = ProxyErrorsMiddleware(_restarting(None, calls, cancelled), timeout_s=60.0, probe_after_s=0.1,
                               probe_timeout_s=0.2)
    async with _client(mw) as c:
        got = await asyncio.wait_for(asyncio.gather(*(c.get(f"/runs/r{i}") for i in range(4)),
                                                    c.post("/agents/r1.t1/picks", json={"name": "ask"})), 10)
    for r in got:
        _assert_json_503(r, "not answering", "same delivery_id")
    assert calls.count("/healthz") == 1  # the waiting requests shared one health check
    assert sorted(cancelled) == sorted(calls)  # nothing left waiting inside the proxy


async def test_a_pick_waiting_for_rest_is_not_cut_while_healthz_answers() -> None:
    calls: list[str] = []
    cancelled: list[str] = []
    mw = ProxyErrorsMiddleware(_restarting(200, calls, cancelled), timeout_s=60.0, probe_after_s=0.1,
                               probe_timeout_s=0.2)
    async with _client(mw) as c:
        pick = asyncio.ensure_future(c.post("/agents/r1.t1/picks", json={"name": "ask"}))
        await asyncio.sleep(0.8)
        assert not pick.done() and "/healthz" in calls and cancelled == []  # still waiting, as it should
        pick.cancel()
