"""`jr2ray supervise`'s decisions, without Ray: a head that is gone is cleared and started again, and when the `up`
that started it fails after the head came up (the API not deployed), the next check runs `up` again on that head
instead of taking the running head for a healthy instance."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from jr2ray.cli import supervise
from jr2ray.cli.rayproc import GCS_LAUNCH_FILE, GcsLaunch
from jr2ray.instance_record import Instance
from jr2ray.run.head import HeadState
from jr2ray.settings import load_settings

NO_LINE = ("no command line is known to start it with: this supervisor never saw it run, and `up` kept none for "
           "this head")


class _Stop(Exception):
    pass


def test_a_failed_up_is_run_again_on_the_head_it_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    inst = Instance(api="http://127.0.0.1:1", ray_address="127.0.0.1:2", started_ray=True, temp_dir="/tmp/jr2ray-x")
    states = iter(["gone", "gone", "up", "up"])
    ups: list[bool] = []
    cleared: list[int] = []

    def head_state(_inst: Any) -> HeadState:
        try:
            return HeadState(state=next(states), reason="its GCS does not answer")  # type: ignore[arg-type]
        except StopIteration:
            raise _Stop from None

    def up(_home: Path, _timeout: float) -> bool:
        ups.append(len(ups) > 0)  # the first `up` fails after its head started; the second succeeds
        return ups[-1]

    monkeypatch.setattr(supervise, "read_instance", lambda _home: inst)
    monkeypatch.setattr(supervise, "head_state", head_state)
    monkeypatch.setattr(supervise, "_up", up)
    monkeypatch.setattr(supervise, "_clear", lambda _home: cleared.append(1) or 3)
    monkeypatch.setattr(supervise.time, "sleep", lambda _s: None)
    monkeypatch.setattr(supervise.GcsKeeper, "watch", lambda self, _inst: None)
    args = argparse.Namespace(settings=load_settings(home=str(tmp_path)), interval=0.01, up_timeout=1.0, once=False)
    with pytest.raises(_Stop):
        supervise.cmd_supervise(args)
    said = capsys.readouterr().err
    assert ups == [False, True]
    assert cleared == [1]  # the running head was not stopped: `up` ran again on it
    assert "running it again on that head" in said and "the instance is up again" in said


@pytest.mark.parametrize(("launch", "vital", "why"), [
    (None, {"gcs_server": [], "raylet": [7]}, NO_LINE),
    ("earlier head's", {"gcs_server": [], "raylet": [7]}, NO_LINE),
    ("seen on an earlier head", {"gcs_server": [], "raylet": [7]}, NO_LINE),
    ("seen", {"gcs_server": [5], "raylet": [7]}, "the GCS process [5] still runs"),
    ("seen", {"gcs_server": [], "raylet": []}, "the raylet is gone too"),
])
def test_a_gcs_not_restarted_alone_says_why(launch: str | None, vital: dict[str, list[int]], why: str,
                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """With its state in Redis, a dead GCS is started again alone; when it is not, the log says why before the
    whole head is restarted (a CI run once restarted the head with no word of the reason)."""
    inst = Instance(api="http://127.0.0.1:1", ray_address="127.0.0.1:2", started_ray=True, temp_dir="/tmp/jr2ray-x",
                    gcs_redis="127.0.0.1:3", ray_started_at="2026-12-05T02:00:00.000+00:00")
    keeper = supervise.GcsKeeper(tmp_path)
    if launch == "earlier head's":  # `up` kept one, for the head before this one on the same home
        earlier = GcsLaunch(pid=4, cmdline=["gcs_server"], env={}, cwd="/", ray_started_at="2026-12-04T00:00:00Z")
        (tmp_path / GCS_LAUNCH_FILE).write_text(earlier.model_dump_json())
    if launch in ("seen", "seen on an earlier head"):  # what this supervisor saw run, and on which head
        keeper.launch = GcsLaunch(pid=5, cmdline=["gcs_server"], env={}, cwd="/",
                                  ray_started_at=inst.ray_started_at if launch == "seen" else "2026-12-04T00:00:00Z")
    monkeypatch.setattr(supervise, "vital_pids", lambda _temp: vital)
    started: list[Any] = []
    monkeypatch.setattr(supervise.subprocess, "Popen", lambda *a, **k: started.append(a))
    assert keeper.restart(inst) is False
    assert started == [], "nothing was started"
    assert f"the GCS is not restarted alone: {why}" in capsys.readouterr().err


def test_a_gcs_the_supervisor_never_saw_is_started_again_from_the_line_up_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A supervisor started after the GCS died (or whose first check came after the kill, as on a loaded CI box)
    starts it again alone from what `up` kept for this very head, the same command line, environment and cwd."""
    inst = Instance(api="http://127.0.0.1:1", ray_address="127.0.0.1:2", started_ray=True, temp_dir="/tmp/jr2ray-x",
                    gcs_redis="127.0.0.1:3", ray_started_at="2026-12-05T02:00:00.000+00:00")
    kept = GcsLaunch(pid=5, cmdline=["gcs_server", "--gcs_server_port=2"], env={"RAY_REDIS_ADDRESS": "127.0.0.1:3"},
                     cwd="/tmp", ray_started_at=inst.ray_started_at)
    (tmp_path / GCS_LAUNCH_FILE).write_text(kept.model_dump_json())
    answers = iter([False, True])  # the port: not yet, then the GCS started again answers

    class Child:
        pid = 9
        returncode = None

        def poll(self) -> None:
            return None

    started: list[tuple[Any, Any]] = []
    monkeypatch.setattr(supervise, "vital_pids", lambda _temp: {"gcs_server": [], "raylet": [7]})
    monkeypatch.setattr(supervise.subprocess, "Popen", lambda cmd, **kw: started.append((cmd, kw)) or Child())
    monkeypatch.setattr(supervise, "port_open", lambda _address, _timeout: next(answers))
    monkeypatch.setattr(supervise.time, "sleep", lambda _s: None)
    assert supervise.GcsKeeper(tmp_path).restart(inst) is True
    [(cmd, kw)] = started
    assert cmd == kept.cmdline and kw["env"] == kept.env and kw["cwd"] == kept.cwd
    assert "the GCS (pid 5) was gone; started it again (pid 9)" in capsys.readouterr().err
