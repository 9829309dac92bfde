"""ASGI middleware: the Bearer token check and the body-size limit.

Why middleware and not dependencies: a caller without the right token is refused (401/403) before its body is even
read, a body over the limit before any route sees it, and no route can forget either check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..auth import authenticate
from . import refusals
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


def is_public(method: str, path: str) -> bool:
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
    if refusal.challenge:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


class AuthMiddleware:
    """401 without a valid Bearer token; 403 for a Harness token anywhere but its own Turn's surface and picks."""

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
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a body over the limit, whether it declares its length or streams it chunked."""

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
