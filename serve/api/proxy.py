"""The ASGI middleware jr2ray puts in Ray Serve's HTTP proxy, so the proxy's own errors read like the API's.

Serve's proxy answers for the API when the API cannot: if the replica dies while it holds a request (a pick waiting
for Rest, say), the proxy ends that request without a response and uvicorn sends a bare text 500; while a replica
restarts, new requests wait for it with no end, and past a request timeout the proxy sends a text 408; a deployment
that cannot take requests is a text 503; a proxy just restarted, before its route table arrives, a text 404. To a
client all of these mean the same: the API is restarting, try again. So this middleware answers each with the API's
JSON 503 and `Retry-After` (worded in `refusals`). A response the app itself started passes through unchanged.

A request queued for a dead replica would wait until Serve has replaced it. So a request with no first byte after
`PROBE_AFTER_S` makes the middleware ask the API's /healthz through the same proxy (one check shared by every request
waiting then): if that is silent too for `PROBE_TIMEOUT_S`, the request is cancelled and answered 503, within 2 s of
being sent; if it answers, the request goes on waiting (a pick waiting for Rest).

The bound is Serve's own request timeout, set per request (Serve's `x-request-timeout-seconds` header) rather than
in `http_options`, because the proxy serves other apps too: a model's long generation under /llm must not be cut at
the API's bound. So only the API's requests get it. Serve's timeout is end to end, and would also cut a run's event
stream, so a stream goes to Serve with "no timeout" and this middleware bounds only the time to its first byte. A
client may not set Serve's headers on the API's requests: they would lift the bound.

Serve loads it through `RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH` (see `proxy_env`), which must be in the proxy
actor's environment; `start_serve` passes it in the Serve controller's runtime env, which the proxies it starts
inherit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from . import refusals

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

PROXY_CALLBACK = "serve.api.proxy:proxy_middlewares"
CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
TIMEOUT_ENV = "JR2RAY_API_REQUEST_TIMEOUT_S"
# Serve's per-request override of its end-to-end timeout (a value <= 0 turns it off for that request).
SERVE_TIMEOUT_HEADER = b"x-request-timeout-seconds"
SERVE_DISCONNECT_HEADER = b"x-request-disconnect-disabled"
# The first path segment of every API route (the API is served at "/"; a test pins this against its routes).
API_ROOTS = frozenset({"", "healthz", "workflows", "runs", "gates", "agents", "console", "docs", "openapi.json",
                       "v1", "admission"})
_STREAM = re.compile(r"^/runs/[^/]+/events/?$")
# What the proxy itself answers with: a text body, never the app's JSON (the app answers JSON or a stream).
# A request with no first byte this long makes the middleware ask the API's /healthz, which gets this long to answer
# (together under the 2 s in which a request to a restarting replica is answered 503).
PROBE_AFTER_S = 0.5
PROBE_TIMEOUT_S = 1.0
# Every 404 of the app is JSON; a text 404 is a proxy (a new one, just restarted) without its route table yet.
_PROXY_STATUSES = {404: "unrouted", 408: "timeout", 500: "gone", 502: "gone", 503: "unavailable", 504: "timeout"}

log = logging.getLogger(__name__)


def proxy_env(timeout_s: float | None) -> dict[str, str]:
    """The environment Serve's proxy needs to load this middleware with this bound (None: the proxy's settings')."""
    return {CALLBACK_ENV: PROXY_CALLBACK, **({} if timeout_s is None else {TIMEOUT_ENV: f"{timeout_s:g}"})}


def proxy_middlewares() -> list[Any]:
    """The callback Serve's proxy calls at start (`RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`)."""
    import os

    from starlette.middleware import Middleware

    from jr2ray.settings import load_settings

    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        given = float(raw) if raw else None
    except ValueError:
        given = None
        log.warning("%s=%r is not a number of seconds; using the api_request_timeout_s setting", TIMEOUT_ENV, raw)
    timeout_s = given if given is not None else load_settings().api_request_timeout_s  # this proxy's own settings
    return [Middleware(ProxyErrorsMiddleware, timeout_s=timeout_s)]


def is_api_request(scope: Scope) -> bool:
    """Is this request for the API (at "/"), rather than another app on the same proxy (the model under /llm)?"""
    path: str = scope.get("path", "")
    return path.split("/", 2)[1] in API_ROOTS if path.startswith("/") else False


def _is_stream(scope: Scope) -> bool:
    return scope.get("method") == "GET" and bool(_STREAM.match(scope.get("path", "")))


def _with_timeout(scope: Scope, timeout_s: float | None) -> Scope:
    """The request as the proxy sees it: the client's Serve headers dropped, and Serve's timeout for it set (0: off)."""
    kept = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in (SERVE_TIMEOUT_HEADER,
                                                                            SERVE_DISCONNECT_HEADER)]
    kept.append((SERVE_TIMEOUT_HEADER, f"{timeout_s or 0:g}".encode()))
    return {**scope, "headers": kept}


def _content_type(message: Message) -> bytes:
    for k, v in message.get("headers", []):
        if k.lower() == b"content-type":
            return bytes(v).lower()
    return b""


def _proxy_error(message: Message) -> str | None:
    """Which of the proxy's own errors a response start is ("gone", "timeout", "unavailable"), or None."""
    kind = _PROXY_STATUSES.get(int(message.get("status", 200)))
    return kind if kind and not _content_type(message).startswith(b"application/json") else None


async def send_refusal(send: Send, refusal: refusals.Refusal) -> None:
    body = json.dumps(refusal.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *((k.lower().encode(), v.encode()) for k, v in refusal.headers().items())]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _drop(task: asyncio.Future[Any]) -> None:
    """Cancel a task and let it finish on its own (its outcome is not wanted)."""
    if not task.done():
        task.cancel()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


class ApiHealth:
    """Does the API answer at all? The proxy's own route to the API's /healthz, asked once for every request waiting
    at that moment, and remembered briefly (a healthy answer for `fresh_s`, a silent one for half of that)."""

    def __init__(self, app: App, timeout_s: float, fresh_s: float = 1.0) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.fresh_s = fresh_s
        self._last: tuple[float, bool] | None = None
        self._asking: asyncio.Future[bool] | None = None

    async def answers(self, like: Scope) -> bool:
        loop = asyncio.get_running_loop()
        if self._last is not None:
            at, ok = self._last
            if loop.time() - at < (self.fresh_s if ok else self.fresh_s / 2):
                return ok
        if self._asking is None or self._asking.done():
            self._asking = asyncio.ensure_future(self._ask(like))
        return await asyncio.shield(self._asking)

    async def _ask(self, like: Scope) -> bool:
        status: list[int] = []
        sent = asyncio.Event()
        done = asyncio.Event()

        async def receive() -> Message:
            if not sent.is_set():
                sent.set()
                return {"type": "http.request", "body": b"", "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message.get("status", 0)))
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                done.set()

        host = [(k, v) for k, v in like.get("headers", []) if k.lower() == b"host"]
        scope = {**like, "method": "GET", "path": "/healthz", "raw_path": b"/healthz", "query_string": b"",
                 "headers": [*host, (SERVE_TIMEOUT_HEADER, f"{self.timeout_s:g}".encode())]}
        task = asyncio.ensure_future(self.app(scope, receive, send))
        try:
            await asyncio.wait_for(asyncio.shield(task), self.timeout_s)
        except Exception:  # timed out, or the proxy failed: no answer either way
            pass
        finally:
            done.set()
            _drop(task)  # the answer does not wait for Serve to finish cancelling the check
        ok = status[:1] == [200]
        self._last = (asyncio.get_running_loop().time(), ok)
        return ok


class ProxyErrorsMiddleware:
    """In Serve's proxy, for the API's requests: a bound on each, and the proxy's own 500/408/503/404 (or no response
    at all) answered as the API's JSON 503 with Retry-After.

    A request with no first byte after `probe_after_s` may be a pick waiting for Rest, or a request queued for a
    replica that is dead or restarting (Serve holds it until a replica is back, ~10 s). The API's /healthz tells the
    two apart: if it does not answer within `probe_timeout_s` either, the request is cancelled and answered 503 with
    Retry-After, so during a restart every request is answered within about `probe_after_s + probe_timeout_s`."""

    def __init__(self, app: App, timeout_s: float | None = None, probe_after_s: float = PROBE_AFTER_S,
                 probe_timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.probe_after_s = probe_after_s
        self.health = ApiHealth(app, probe_timeout_s)

    def refusal(self, kind: str) -> refusals.Refusal:
        if kind == "timeout":
            return refusals.api_timed_out(self.timeout_s)
        if kind == "unavailable":
            return refusals.api_unavailable("Serve reports the deployment unavailable")
        if kind == "unrouted":
            return refusals.api_unavailable("Serve's proxy has no route to it yet: it is starting")
        if kind == "silent":
            return refusals.api_not_answering(self.probe_after_s + self.health.timeout_s)
        return refusals.replica_gone()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_api_request(scope):  # another app, the proxy's health, a websocket
            await self.app(scope, receive, send)
            return
        stream = _is_stream(scope)
        state: dict[str, Any] = {"started": False, "answered": False}
        first = asyncio.Event()

        async def guarded(message: Message) -> None:
            if state["answered"]:
                return  # the proxy's own text body after its error start: replaced already
            if message["type"] == "http.response.start" and (kind := _proxy_error(message)) is not None:
                state["answered"] = True
                first.set()
                await send_refusal(send, self.refusal(kind))
                return
            state["started"] = state["started"] or message["type"] == "http.response.start"
            first.set()
            await send(message)

        inner = self.app(_with_timeout(scope, None if stream else self.timeout_s), receive, guarded)
        try:
            await self._watched(scope, inner, first, state, send, stream)
        except asyncio.CancelledError:
            raise
        except Exception:  # the proxy failed before answering: still a JSON answer, never a bare 500
            log.exception("Serve's proxy failed on %s %s", scope.get("method"), scope.get("path"))
        if not state["started"] and not state["answered"]:
            state["answered"] = True
            await send_refusal(send, self.refusal("gone"))

    async def _verdict(self, scope: Scope, task: asyncio.Future[None], waiter: asyncio.Future[Any],
                       first: asyncio.Event, bound: float | None) -> str | None:
        """Why to stop waiting for the proxy's answer: "timeout" (a stream's first byte later than `bound`),
        "silent" (no first byte within `probe_after_s`, and /healthz silent too), or None (let it answer)."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.wait({task, waiter}, timeout=min(self.probe_after_s, bound or self.probe_after_s),
                           return_when=asyncio.FIRST_COMPLETED)
        if first.is_set() or task.done():
            return None
        if bound is not None and loop.time() - t0 >= bound:
            return "timeout"
        if not await self.health.answers(scope):
            return "silent"
        if bound is None:
            return None
        await asyncio.wait({task, waiter}, timeout=max(bound - (loop.time() - t0), 0.0),
                           return_when=asyncio.FIRST_COMPLETED)
        return None if first.is_set() or task.done() else "timeout"

    async def _watched(self, scope: Scope, inner: Awaitable[None], first: asyncio.Event, state: dict[str, Any],
                       send: Send, stream: bool) -> None:
        """Run the proxy's handling of a request. No first byte within `probe_after_s` and no answer from /healthz:
        cancel it (Serve cancels the replica's side, or the wait for one) and answer 503. A stream also has its
        first-byte bound (Serve's own end-to-end bound is off for it)."""
        task = asyncio.ensure_future(inner)
        waiter = asyncio.ensure_future(first.wait())
        bound = self.timeout_s if stream and self.timeout_s else None
        try:
            kind = await self._verdict(scope, task, waiter, first, bound)
        except BaseException:  # the client went away: so does the proxy's request
            task.cancel()
            raise
        finally:
            waiter.cancel()
        if kind is not None and not first.is_set() and not task.done():
            if not state["started"] and not state["answered"]:
                state["answered"] = True  # answered first: Serve's cancelling of the request may take a while
                await send_refusal(send, self.refusal(kind))
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
            return
        await task
