"""An instance recorded in instance.json that does not answer: `connect()` raises InstanceDown naming its home,
its address and `jr2ray up`, and starts no private Ray beside it; a head whose GCS port answers but whose raylet
is gone counts as down too; `jr2ray down` of a dead joined instance says so in one line (no traceback, no
minute-long join) and forgets it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from jr2ray.instance_record import Instance, write_instance
from jr2ray.run.head import head_state

ray = pytest.importorskip("ray")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("RAY_ADDRESS", "JR2RAY_STORE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def listening() -> Iterator[int]:
    """A port that answers, as a GCS whose node died would."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_connect_to_a_recorded_instance_that_does_not_answer_raises_and_starts_no_ray(home: Path) -> None:
    import jr2ray
    from jr2ray.run.client import InstanceDown

    address = f"127.0.0.1:{_dead_port()}"
    write_instance(home, Instance(api="http://127.0.0.1:1", ray_address=address, started_ray=True,
                                  temp_dir=str(home / "no-such-ray")))
    assert not ray.is_initialized()
    with pytest.raises(InstanceDown) as caught:
        jr2ray.connect(launcher=None)
    text = str(caught.value)
    assert str(home.resolve()) in text and address in text and "`jr2ray up`" in text
    assert not ray.is_initialized()  # no private Ray was started


def test_a_head_whose_gcs_answers_but_whose_raylet_is_gone_is_down(home: Path, listening: int) -> None:
    import jr2ray
    from jr2ray.run.client import InstanceDown

    inst = Instance(api="", ray_address=f"127.0.0.1:{listening}", started_ray=True,
                    temp_dir=str(home / "ray-temp-with-no-processes"))
    got = head_state(inst)
    assert got.state == "broken" and "raylet" in got.reason and "gcs_server" in got.reason
    write_instance(home, inst)
    with pytest.raises(InstanceDown, match="raylet"):
        jr2ray.connect(launcher=None)
    assert not ray.is_initialized()
    # a joined cluster (not started here) is judged by its GCS alone: we own none of its processes
    assert head_state(inst.model_copy(update={"started_ray": False})).state == "up"


def test_down_of_a_dead_joined_instance_forgets_it_in_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    address = f"127.0.0.1:{_dead_port()}"
    write_instance(home, Instance(api="http://127.0.0.1:1", ray_address=address, started_ray=False))
    assert main(["down"]) == 0
    err = capsys.readouterr().err
    assert address in err and "does not answer" in err and "Traceback" not in err
    assert not ray.is_initialized() and not (home / "instance.json").exists()
