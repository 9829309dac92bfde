"""`up` keeps its launcher in config.json; `instance_launcher(settings)` reads it back for `jr2ray.connect()`."""

from __future__ import annotations

from pathlib import Path

import pytest

from jr2ray.instance_config import InstanceConfig, write_config
from jr2ray.settings import instance_launcher, launcher_setting, load_settings


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
