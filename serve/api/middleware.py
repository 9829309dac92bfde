"""ASGI middleware: the Bearer token check and the body-size limit.

Why middleware and not dependencies: a caller without the right token is refused (401/403) before its body is even
read, a body over the limit before any route sees it, and no route can forget either check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from jr2ray.run import tracing
from jr2ray.run.errors import RunError

from ..auth import authenticate
from . import refusals, strict_json
from .context import ApiContext
from .refusals import Refusal

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Public without a token: liveness, the Console's and /docs' own files, and the API's description (no run data).
PUBLIC_EXACT = frozenset({"/healthz", "/", "/docs", "/docs/oauth2-redirect", "/openapi.json"})
PUBLIC_PREFIX = ("/console/", "/docs/assets/")
_HARNESS_ROUTE = re.compile(r"^/agents/(?P<iid>[^/]+)/(?P<what>surface|picks)$")
_HARNESS_MAY = (("GET", "surface"), ("POST", "picks"))


# Answered with "no model is served here" (routes/model.py) to a model client of any method: it sends no jr2ray token.
MODEL_PREFIX = "/v1/"


def is_public(method: str, path: str) -> bool:
    if path.startswith(MODEL_PREFIX):
        return True
    return method in ("GET", "HEAD") and (path in PUBLIC_EXACT or path.startswith(PUBLIC_PREFIX))


def route_path(scope: Scope) -> str:
    """The path inside the app: behind a route prefix (Serve's `route_prefix`, a proxy's root path) the scope's path
    may still carry the prefix, and the public list and Harness scopes are written without it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "").rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root):] or "/"
    return path


async def reply(send: Send, refusal: Refusal) -> None:
    raw = json.dumps(refusal.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in refusal.headers().items()]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


class AuthMiddleware:
    """401 without a valid Bearer token or with the token of an ended Turn; 403 for a Harness token anywhere but its own
    Turn's surface and picks."""

    def __init__(self, app: ASGIApp, ctx: ApiContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_public(scope["method"], route_path(scope)):
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], route_path(scope)
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
        token = self.ctx.token()
        principal = authenticate(header, token) if token else None
        if principal is None:
            await reply(send, refusals.bad_token() if token else refusals.no_token_yet())
            return
        if principal.kind == "harness":
            m = _HARNESS_ROUTE.match(path)
            if m is None or m.group("iid") != principal.iid or (method, m.group("what")) not in _HARNESS_MAY:
                await reply(send, refusals.harness_out_of_scope(principal.iid))
                return
            # Scoped in time as well as in place: only while its Turn lasts. A pick finds that out itself (its
            # route answers 401 when the run says the Turn is over): one Ray call a pick, not a status call first.
            if m.group("what") != "picks" or self.ctx.known_ended(m.group("iid")):
                try:
                    over = await self.ctx.turn_over(m.group("iid"))
                except RunError as exc:  # e.g. the Run actor is not answering: the caller may retry
                    over = refusals.run_error(exc)
                if over is not None:
                    await reply(send, over)
                    return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a body over the limit, whether it declares its length or streams it chunked; 400 for a JSON body
    that could not be stored and read back as standard UTF-8 JSON (see `strict_json`), before any route sees it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await reply(send, refusals.body_too_large(self.limit))
            return
        body = await self._read(receive, send)
        if body is None:
            return
        problem = strict_json.problem(body)
        if problem is not None:
            await reply(send, refusals.not_strict_json(problem))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive, send: Send) -> bytes | None:
        """The whole body (at most limit + one chunk), so nothing acts on a body we then refuse; None if refused."""
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await reply(send, refusals.body_too_large(self.limit))
                return None
            chunks.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(chunks)


CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = ((b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"),
                    (b"x-content-type-options", b"nosniff"))


def host_name(header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8000" -> "::1")."""
    if header.startswith("["):
        return header[1:].partition("]")[0].lower()
    return header.rpartition(":")[0].lower() if header.count(":") == 1 else header.lower()


class HostMiddleware:
    """400 for a Host header that names none of the configured names (DNS rebinding: a page on another origin
    whose name now resolves to 127.0.0.1 sends its own name); every response gets the Console's security headers
    (a CSP allowing only same-origin script, no framing, no referrer). A route that sets its own CSP keeps it."""

    def __init__(self, app: ASGIApp, hosts: list[str]) -> None:
        self.app = app
        self.any = "*" in hosts
        self.hosts = frozenset(host_name(h) if h.count(":") <= 1 or h.startswith("[") else h.lower()
                               for h in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in SECURITY_HEADERS if k not in names]
                if b"content-security-policy" not in names:
                    headers.append((b"content-security-policy", CSP.encode()))
                message = {**message, "headers": headers}
            await send(message)

        raw = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        if not self.any and host_name(raw) not in self.hosts:
            await reply(send_with_headers, refusals.unknown_host(raw))
            return
        await self.app(scope, receive, send_with_headers)


class TraceMiddleware:
    """A span per request when tracing is on (jr2ray.run.tracing), a child of the request's `traceparent` header;
    a Gate event the request sends carries it to the run. Off, it passes every request straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled():
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"traceparent"), None)
        path = route_path(scope)
        with tracing.server_span(f"{scope['method']} {path}", header,
                                 {"http.request.method": scope["method"], "url.path": path}):
            await self.app(scope, receive, send)
