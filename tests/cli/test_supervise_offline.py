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
