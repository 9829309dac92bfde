"""The `effect.http` kind: one real HTTP call. Output: {status, json} or {status, text}."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from jr2ray.authoring import HttpEffect
from jr2ray.settings import Settings

from .hosts import HostRefused, resolve_checked
from .registry import EffectFailed, params_of, register, resolve_value

if TYPE_CHECKING:
    import httpx

MAX_REDIRECTS = 5


async def _send_pinned(client: httpx.AsyncClient, method: str, url: httpx.URL, body: Any,
                       listed: list[str]) -> httpx.Response:
    """Send to the checked address itself (the Host header and TLS name stay the URL's host)."""
    host = url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    ip = await resolve_checked(host, port, listed)
    pinned = url.copy_with(host=ip)
    headers = {"Host": url.netloc.decode("ascii")}
    extensions = {"sni_hostname": host} if url.scheme == "https" else {}
    request = client.build_request(method, pinned, json=body, headers=headers, extensions=extensions)
    return await client.send(request)


class HttpEffector:
    """A non-2xx status is an output the chart can route on, not an error; a transport failure raises, and so
    does a host the allow-list refuses, at the first hop or at any redirect."""

    def resolve(self, spec: HttpEffect, context: dict[str, Any], input: Any, workdir: Path) -> dict[str, Any]:
        params = params_of(spec, input, "effect.http")
        url = resolve_value(spec.url, context, "effect.http url", params)
        body = resolve_value(spec.json, context, "effect.http json", params)
        return {"kind": "http", "method": spec.method, "url": url, "json": body, "timeout_s": spec.timeout_s}

    async def run(self, call: dict[str, Any], settings: Settings) -> dict[str, Any]:
        import httpx  # here, not at import: every pooled host loads this module, few make HTTP calls (~5 MB each)

        listed = settings.http_effect_hosts
        method, url, body = call["method"], httpx.URL(call["url"]), call.get("json")
        if url.scheme not in ("http", "https"):
            raise EffectFailed(f"HTTP Effect URL scheme {url.scheme!r} is not http or https")
        async with httpx.AsyncClient(timeout=call["timeout_s"], follow_redirects=False) as client:
            for _ in range(MAX_REDIRECTS + 1):
                try:
                    resp = await _send_pinned(client, method, url, body, listed)
                except HostRefused as exc:
                    raise EffectFailed(str(exc), {"url": str(url)}) from None
                if not resp.is_redirect:
                    break
                url = url.join(resp.headers["location"])
                if resp.status_code in (301, 302, 303) and method not in ("GET", "HEAD"):
                    method, body = "GET", None
            else:
                raise EffectFailed(f"HTTP Effect followed more than {MAX_REDIRECTS} redirects", {"url": str(url)})
        try:
            return {"status": resp.status_code, "json": resp.json()}
        except ValueError:
            return {"status": resp.status_code, "text": resp.text}


register(HttpEffect.kind, HttpEffector())
