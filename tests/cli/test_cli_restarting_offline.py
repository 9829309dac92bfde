"""The CLI while the API's replica restarts: a read answered 503 with Retry-After is retried, a write is reported
with the API's reason (it says how to retry safely), and a run's event stream resumes after a 503 where it was."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from jr2ray.cli import EXIT_ERROR, Api, CliError
from jr2ray.cli import http as cli_http
from jr2ray.settings import load_settings

SSE = {"content-type": "text/event-stream; charset=utf-8"}
RESTARTING = {"detail": "the API's replica stopped while handling this request and is restarting; retry shortly",
              "retry_after": 2}


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(cli_http.time, "sleep", slept.append)
    return slept


def _api(tmp_path: Path, handler: object) -> Api:
    api = Api(tmp_path, "http://jr2ray.test", load_settings())
    api.http = httpx.Client(base_url="http://jr2ray.test", transport=httpx.MockTransport(handler))  # type: ignore[arg-type]
    return api


def _restarting() -> httpx.Response:
    return httpx.Response(503, headers={"retry-after": "2"}, json=RESTARTING)


def test_a_read_answered_503_is_retried_after_retry_after(tmp_path: Path, no_waiting: list[float]) -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        return _restarting() if len(calls) < 3 else httpx.Response(200, json=[{"id": "r1"}])

    assert _api(tmp_path, handler).request("GET", "/runs") == [{"id": "r1"}]
    assert calls == ["GET"] * 3 and no_waiting == [2.0, 2.0]


def test_a_read_that_stays_503_is_reported_with_the_apis_reason(tmp_path: Path) -> None:
    with pytest.raises(CliError) as err:
        _api(tmp_path, lambda request: _restarting()).request("GET", "/runs")
    assert err.value.code == EXIT_ERROR and str(err.value) == f"503: {RESTARTING['detail']}"


def test_a_write_answered_503_is_not_sent_again(tmp_path: Path) -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        return _restarting()

    with pytest.raises(CliError) as err:
        _api(tmp_path, handler).request("POST", "/runs/r1/gates/g/events", {"event": "reply", "input": {}})
    assert calls == ["POST"] and "restarting" in str(err.value)


def test_the_event_stream_resumes_after_a_503(tmp_path: Path, no_waiting: list[float]) -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get("since", ""))
        if len(asked) == 1:
            return httpx.Response(200, headers=SSE, content=b'id: 3\nevent: pick\ndata: {"name": "ask"}\n\n')
        if len(asked) == 2:
            return _restarting()
        return httpx.Response(200, headers=SSE, content=b'id: 3\nevent: end\ndata: {"status": "done"}\n\n')

    got = list(_api(tmp_path, handler).events("r1"))
    assert got == [("pick", {"name": "ask"}), ("end", {"status": "done"})]
    assert asked == ["0", "3", "3"] and sum(no_waiting) >= 2.0
