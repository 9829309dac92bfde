"""`jr2ray cancel`: exit 0 when it cancelled an active run; exit 1, saying how it ended and sending no cancel, for a
run that had already ended (as `kill` of a finished process fails)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx
import pytest

from jr2ray.cli import EXIT_ERROR, EXIT_OK, Api, CliError, commands
from jr2ray.settings import load_settings

RID = "a1b2c3d4e5f6"


def _api(tmp_path: Path, status: str, after: str = "cancelled") -> tuple[Api, list[str]]:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        if request.url.path == "/runs":
            return httpx.Response(200, json=[{"id": RID}])
        if request.url.path == f"/runs/{RID}" and request.method == "GET":
            return httpx.Response(200, json={"id": RID, "status": status})
        if request.url.path == f"/runs/{RID}/cancel":
            return httpx.Response(200, json={"id": RID, "status": after if status == "active" else status})
        return httpx.Response(404, json={"detail": "no such route"})

    api = Api(tmp_path, "http://jr2ray.test", load_settings())
    api.http = httpx.Client(base_url="http://jr2ray.test", transport=httpx.MockTransport(handler))
    return api, calls


def _cancel(monkeypatch: pytest.MonkeyPatch, api: Api) -> int:
    monkeypatch.setattr(commands, "_api", lambda args: api)
    return commands.cmd_cancel(argparse.Namespace(run=RID[:6]))


def test_cancelling_an_active_run_exits_0_and_prints_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    api, calls = _api(tmp_path, "active")
    assert _cancel(monkeypatch, api) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["status"] == "cancelled"
    assert f"POST /runs/{RID}/cancel" in calls


@pytest.mark.parametrize("status", ["done", "error", "cancelled"])
def test_cancelling_a_run_that_had_ended_exits_1_and_sends_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   status: str) -> None:
    api, calls = _api(tmp_path, status)
    with pytest.raises(CliError) as err:
        _cancel(monkeypatch, api)
    assert err.value.code == EXIT_ERROR
    assert str(err.value) == f"run {RID} had already ended ({status}); nothing was cancelled"
    assert not [c for c in calls if c.startswith("POST")]


def test_a_run_that_ends_on_its_own_meanwhile_is_not_reported_cancelled(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    api, _ = _api(tmp_path, "active", after="done")
    with pytest.raises(CliError) as err:
        _cancel(monkeypatch, api)
    assert "had already ended (done)" in str(err.value)


def test_the_exit_code_through_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    api, _ = _api(tmp_path, "done")
    monkeypatch.setattr(commands, "_api", lambda args: api)
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path))
    assert main(["cancel", RID]) == EXIT_ERROR
    assert "nothing was cancelled" in capsys.readouterr().err
