"""The CLI's client of the jr2ray HTTP API: requests, the run's SSE feed (through httpx-sse), run-id prefixes.

Why through HTTP: the API is the one place that checks tokens and input, so the CLI gets exactly the behaviour a
webhook or the Console gets, and a command costs one request instead of joining Ray (seconds) each time.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import SSEError, connect_sse

from jr2ray.cli import errors
from jr2ray.cli.format import say
from jr2ray.cli.instance import INSTANCE_FILE, read_instance
from jr2ray.settings import Settings

MIN_PREFIX = 4
_ID_CHARS = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what the API's prefix filter takes


GET_RETRIES_503 = 5  # a read that gets "restarting, retry" (503) is retried this often before the CLI reports it


def retry_after(r: httpx.Response, default: float = 2.0) -> float:
    """The wait a 503 asks for (`Retry-After` seconds), kept between 0.5 and 10 s."""
    try:
        return min(max(float(r.headers.get("retry-after", default)), 0.5), 10.0)
    except ValueError:
        return default


class _Restarting(Exception):
    """The API answered the stream's request with 503 (its replica restarting): a break to resume after."""


def _detail(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return r.text


class Api:
    """A thin httpx wrapper: base URL and token from flags, settings or the home dir; API errors become CliError."""

    def __init__(self, home: Path, url: str | None, settings: Settings) -> None:
        settings = settings.model_copy(update={"home": str(home)})
        inst = read_instance(home)
        base = url or settings.api or (inst.api if inst and inst.api else None)
        if not base:
            raise errors.no_instance_recorded(home / INSTANCE_FILE)
        self.url = base.rstrip("/")
        token = settings.instance_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(60.0, connect=5.0))

    def request(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        return _detail(self._send(method, path, body, ok))

    def optional(self, path: str) -> Any:
        """GET a route an older API may not have: its answer, or None where that API answers 404."""
        r = self._send("GET", path, None, (200, 404))
        return _detail(r) if r.status_code == 200 else None

    def runs(self, limit: int | None = None, page: int = 500, status: str | None = None, where: str | None = None,
             workflow: str | None = None, prefix: str | None = None) -> Iterator[dict[str, Any]]:
        """Runs newest first, page by page (each page one request; the next page's cursor comes in a header). With
        filters a page may come back short, even empty, with a cursor: the list goes on until no cursor comes."""
        cursor: str | None = None
        left = limit
        filters = {"status": status, "where": where, "workflow": workflow, "prefix": prefix}
        while left is None or left > 0:
            params: dict[str, Any] = {"limit": page if left is None else min(page, left)}
            if cursor:
                params["cursor"] = cursor
            params |= {k: v for k, v in filters.items() if v}
            r = self._send("GET", "/runs", None, (200,), params)
            rows = r.json()
            yield from rows
            left = None if left is None else left - len(rows)
            nxt = r.headers.get("x-next-cursor")
            if not nxt or nxt == cursor:
                return
            cursor = nxt

    def _send(self, method: str, path: str, body: Any, ok: tuple[int, ...],
              params: dict[str, Any] | None = None) -> httpx.Response:
        """One request; a GET answered 503 (the API restarting) is retried after its Retry-After. Anything else
        that is refused, a 503 to a POST included (its reason says how to retry it safely), is a CliError."""
        for attempt in range(GET_RETRIES_503 + 1):
            try:
                r = self.http.request(method, path, json=body, params=params)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                raise errors.no_api(self.url) from None
            except httpx.HTTPError as exc:
                raise errors.http_failed(method, path, exc) from None
            if r.status_code == 503 and method == "GET" and attempt < GET_RETRIES_503:
                wait = retry_after(r)
                say(f"(the API is not answering yet: retrying {method} {path} in {wait:g} s)")
                time.sleep(wait)
                continue
            break
        if r.status_code not in ok:
            raise errors.api_refused(r.status_code, _detail(r))
        return r

    def events(self, run_id: str, retries: int = 5) -> Iterator[tuple[str, Any]]:
        """The run's SSE feed as (event, data) pairs, until the `end` event.

        A stream that breaks off (a proxy restart, a dropped connection) is resumed after the last event id it
        delivered, so nothing is shown twice or lost; `retries` broken streams in a row without progress give up.
        """
        since, failures = 0, 0
        while True:
            progressed = False
            try:
                with connect_sse(self.http, "GET", f"/runs/{run_id}/events", params={"since": since},
                                 timeout=httpx.Timeout(None, connect=5.0)) as source:
                    r = source.response
                    if r.status_code == 503:
                        r.read()
                        time.sleep(max(retry_after(r) - 1.0, 0.0))  # and 1 s more below, as after any break
                        raise _Restarting(str(errors.api_refused(503, _detail(r))))
                    if r.status_code != 200:
                        r.read()
                        raise errors.api_refused(r.status_code, _detail(r))
                    for sse in source.iter_sse():
                        if sse.id.isdigit():
                            since = int(sse.id)
                        if not sse.data:  # a bare `retry:` or id-only block carries no event
                            continue
                        progressed = True
                        yield sse.event, json.loads(sse.data)
                        if sse.event == "end":
                            return
                error: str = "the stream closed before the run ended"
            except (httpx.ConnectError, httpx.ConnectTimeout):
                if since == 0 and not progressed:
                    raise errors.no_api(self.url) from None
                error = "the API went away"
            except (httpx.HTTPError, SSEError) as exc:
                error = repr(exc)
            except _Restarting as exc:
                error = str(exc)
            failures = 0 if progressed else failures + 1
            if failures >= retries:
                raise errors.stream_keeps_breaking(run_id, error)
            say(f"(the event stream broke off: {error}; resuming after event {since})")
            time.sleep(1.0)

    def resolve(self, prefix: str) -> str:
        """A full run id from an id or an unambiguous prefix of at least 4 characters."""
        ids = [r["id"] for r in self.runs(prefix=prefix if _ID_CHARS.match(prefix) else None)]
        if prefix in ids:
            return prefix
        if len(prefix) < MIN_PREFIX:
            raise errors.prefix_too_short(prefix, MIN_PREFIX)
        hits = [i for i in ids if i.startswith(prefix)]
        if not hits:
            raise errors.no_run_matches(prefix)
        if len(hits) > 1:
            raise errors.prefix_ambiguous(prefix, hits)
        return hits[0]
