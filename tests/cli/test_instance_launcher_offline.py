"""`up` records its launcher in instance.json (and keeps it in config.json for the next `up`);
`instance_launcher(settings)` reads it back for `jr2ray.connect()`, the running instance's first."""

from __future__ import annotations

from pathlib import Path

import pytest

from jr2ray.instance_config import InstanceConfig, write_config
from jr2ray.instance_record import launcher_setting
from jr2ray.settings import instance_launcher, load_settings


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path))
    return tmp_path


def _up(home: Path, launcher: str | None) -> None:
    write_config(home, InstanceConfig(launcher=launcher_setting(launcher)))


@pytest.mark.parametrize(("given", "recorded", "read"), [
    ("auto", "auto", "auto"),
    ("none", "none", None),
    ("external", "none", None),
    (None, "none", None),
    ("mypkg.launch:make", "mypkg.launch:make", "mypkg.launch:make"),
])
def test_the_launcher_up_was_given_is_read_back(home: Path, given: str | None, recorded: str,
                                                read: str | None) -> None:
    _up(home, given)
    assert (home / "config.json").read_text().count(f'"launcher": "{recorded}"') == 1
    assert instance_launcher(load_settings()) == read


def test_no_instance_means_auto(home: Path) -> None:
    assert instance_launcher(load_settings()) == "auto"


def test_an_instance_file_from_before_config_json_is_still_read(home: Path) -> None:
    """An `up` from before config.json kept its launcher in instance.json: it is read from there."""
    (home / "instance.json").write_text('{"api": "http://127.0.0.1:8000", "ray_address": "127.0.0.1:6379", '
                                        '"started_ray": true, "launcher": "none"}')
    assert instance_launcher(load_settings()) is None


def test_an_instance_file_from_before_the_field_means_auto(home: Path) -> None:
    (home / "instance.json").write_text('{"api": "http://127.0.0.1:8000", "ray_address": "127.0.0.1:6379", '
                                        '"started_ray": true}')
    assert instance_launcher(load_settings()) == "auto"


def _running(home: Path, launcher: str | None) -> None:
    """What `up` writes once Ray is up: the instance, with the launcher its runs start with."""
    from jr2ray.instance_record import Instance, write_instance

    write_instance(home, Instance(api="http://127.0.0.1:8000", ray_address="127.0.0.1:6379", started_ray=True,
                                  launcher=None if launcher is None else launcher_setting(launcher)))


@pytest.mark.parametrize(("running", "kept", "read"), [
    ("none", "auto", None),
    ("auto", "none", "auto"),
    ("mypkg.launch:make", "none", "mypkg.launch:make"),
])
def test_the_running_instance_launcher_wins_over_the_kept_one(home: Path, running: str, kept: str,
                                                              read: str | None) -> None:
    """config.json says what the next `up` starts with; instance.json what the running one does. A driver joins
    the running one, so it starts runs as that instance's API does."""
    _up(home, kept)
    _running(home, running)
    assert instance_launcher(load_settings()) == read


def test_an_instance_down_falls_back_to_the_kept_launcher(home: Path) -> None:
    _up(home, "none")
    _running(home, "auto")
    (home / "instance.json").unlink()  # what `down` does; config.json stays
    assert instance_launcher(load_settings()) is None


def test_an_instance_recorded_before_the_field_takes_the_kept_launcher(home: Path) -> None:
    """instance.json without a launcher (an `up` from before it recorded one): config.json's is read."""
    _up(home, "none")
    (home / "instance.json").write_text('{"api": "http://127.0.0.1:8000", "ray_address": "127.0.0.1:6379", '
                                        '"started_ray": true}')
    assert instance_launcher(load_settings()) is None


def test_a_config_is_read_from_an_older_instance_file_only_when_it_kept_the_store(home: Path) -> None:
    """Before config.json, `up` wrote its store (and launcher) into instance.json: with no config.json, that is the
    kept config. Every instance.json now has a launcher and never a store: it is not mistaken for one."""
    from jr2ray.instance_config import read_config

    older = '{"api": "", "ray_address": "", "started_ray": true, "store": "/srv/runs", "launcher": "none"}'
    (home / "instance.json").write_text(older)
    kept = read_config(home)
    assert kept is not None and kept.store == "/srv/runs" and kept.launcher == "none"
    _running(home, "none")  # what `up` writes now
    assert read_config(home) is None
