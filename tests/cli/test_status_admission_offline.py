"""`jr2ray status` (no run) carries the API's `GET /admission` answer as `turn_admission`, and null where an older
API has no such route (404), rather than failing the whole status."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from jr2ray.cli import EXIT_OK, Api, CliError, commands
from jr2ray.settings import load_settings

ADMISSION = {"on": True, "app": "llm", "budget": {"capacity_tokens": 1280, "used_tokens": 300,
                                                  "high_water_tokens": 300, "peak_holders": 1, "held": {"c1": 300},
                                                  "waiting": [], "grants": 1, "waits": 0, "over_capacity_grants": 0,
                                                  "grown": 0, "given_back": 0, "kinds": {}}}


def _status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            admission: httpx.Response) -> dict[str, Any]:
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("JR2RAY_STORE", raising=False)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/healthz":
            return httpx.Response(200, json={"ok": True, "version": "0.1.0"})
        if request.url.path == "/runs":
            return httpx.Response(200, json=[{"id": "r1", "status": "active", "presence": "parked"}])
        if request.url.path == "/admission":
            return admission
        return httpx.Response(404, json={"detail": "Not Found"})

    settings = load_settings()
    api = Api(tmp_path, "http://jr2ray.test", settings)
    api.http = httpx.Client(base_url="http://jr2ray.test", transport=httpx.MockTransport(handler))
    monkeypatch.setattr(commands, "_api", lambda args: api)
    assert commands.cmd_status(argparse.Namespace(run=None, settings=settings)) == EXIT_OK
    return dict(json.loads(capsys.readouterr().out))


def test_status_shows_the_apis_admission_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    got = _status(tmp_path, monkeypatch, capsys, httpx.Response(200, json=ADMISSION))
    assert got["turn_admission"] == ADMISSION
    assert got["runs"] == {"active": 1} and got["where"] == {"parked": 1}  # the rest of status as before


def test_an_older_api_without_the_route_shows_null(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    got = _status(tmp_path, monkeypatch, capsys, httpx.Response(404, json={"detail": "Not Found"}))
    assert "turn_admission" in got and got["turn_admission"] is None


def test_any_other_refusal_is_still_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CliError):
        _status(tmp_path, monkeypatch, capsys, httpx.Response(500, json={"detail": "boom"}))
