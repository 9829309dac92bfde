"""`jr2ray supervise`'s decisions, without Ray: a head that is gone is cleared and started again, and when the `up`
that started it fails after the head came up (the API not deployed), the next check runs `up` again on that head
instead of taking the running head for a healthy instance."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from jr2ray.cli import supervise
from jr2ray.run.head import HeadState
from jr2ray.settings import Instance, load_settings


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
    (None, {"gcs_server": [], "raylet": [7]}, "this supervisor never saw the GCS run"),
    ("seen", {"gcs_server": [5], "raylet": [7]}, "the GCS process [5] still runs"),
    ("seen", {"gcs_server": [], "raylet": []}, "the raylet is gone too"),
])
def test_a_gcs_not_restarted_alone_says_why(launch: str | None, vital: dict[str, list[int]], why: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """With its state in Redis, a dead GCS is started again alone; when it is not, the log says why before the
    whole head is restarted (a CI run once restarted the head with no word of the reason)."""
    inst = Instance(api="http://127.0.0.1:1", ray_address="127.0.0.1:2", started_ray=True, temp_dir="/tmp/jr2ray-x",
                    gcs_redis="127.0.0.1:3")
    keeper = supervise.GcsKeeper()
    keeper.launch = None if launch is None else supervise.GcsLaunch(pid=5, cmdline=["gcs_server"], env={}, cwd="/")
    monkeypatch.setattr(supervise, "vital_pids", lambda _temp: vital)
    started: list[Any] = []
    monkeypatch.setattr(supervise.subprocess, "Popen", lambda *a, **k: started.append(a))
    assert keeper.restart(inst) is False
    assert started == [], "nothing was started"
    assert f"the GCS is not restarted alone: {why}" in capsys.readouterr().err
