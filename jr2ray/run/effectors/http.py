"""The `effect.http` kind: one real HTTP call. Output: {status, json} or {status, text}."""

from __future__ import annotations

from typing import Any

import httpx

from jr2ray.authoring import HttpEffect

from .registry import register, resolve_value


class HttpEffector:
    """A non-2xx status is an output the chart can route on, not an error; a transport failure raises."""

    def resolve(self, spec: HttpEffect, context: dict[str, Any], input: Any) -> dict[str, Any]:
        url = resolve_value(spec.url, context, "effect.http url")
        body = resolve_value(spec.json, context, "effect.http json")
        if isinstance(input, dict):
            url = input.get("url", url)
            body = input.get("json", body)
        return {"kind": "http", "method": spec.method, "url": url, "json": body, "timeout_s": spec.timeout_s}

    async def run(self, call: dict[str, Any]) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=call["timeout_s"]) as client:
            resp = await client.request(call["method"], call["url"], json=call.get("json"))
        try:
            return {"status": resp.status_code, "json": resp.json()}
        except ValueError:
            return {"status": resp.status_code, "text": resp.text}


register(HttpEffect.kind, HttpEffector())
