"""One setting picks the backend: JR2RAY_STORE (or `jr2ray up --store`) is a directory for SQLite or a
postgresql:// URL; a URL's password never prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from jr2ray.cli.main import build_parser
from jr2ray.settings import ENV_NAMES, load_settings, masked


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for env in [*ENV_NAMES.values(), "JR2RAY_ENV_FILE"]:
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))


def test_a_directory_is_the_sqlite_store(tmp_path: Path) -> None:
    s = load_settings(store=str(tmp_path / "journals"))
    assert s.store_url() is None
    assert s.store_dir() == (tmp_path / "journals").resolve()
    assert s.store_location() == str((tmp_path / "journals").resolve())
    default = load_settings()
    assert default.store_url() is None and default.store_dir() == (tmp_path / "home" / "runs").resolve()


def test_a_postgresql_url_is_the_postgresql_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JR2RAY_STORE", "postgresql://jr:s3cret@db.lan:5433/jr2ray")
    s = load_settings()
    assert s.store_url() == s.store_location() == "postgresql://jr:s3cret@db.lan:5433/jr2ray"
    assert s.store_dir() == (tmp_path / "home" / "runs").resolve()  # node-local files stay in the home
    assert not Path("postgresql:").exists()
    assert masked(s, "store") == "postgresql://jr:********@db.lan:5433/jr2ray"
    assert load_settings(store="postgres://h/db").store_url() == "postgres://h/db"


def test_up_takes_the_store_as_a_flag() -> None:
    args = build_parser().parse_args(["up", "--store", "postgresql://h/db"])
    assert args.store == "postgresql://h/db"
    from jr2ray.cli.main import load

    args.home, args.api, args.env_file = None, None, None
    assert load(args).store_url() == "postgresql://h/db"


def test_up_on_a_postgresql_store_refuses_rather_than_journal_to_sqlite(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    assert main(["up", "--store", "postgresql://jr:s3cret@db.lan/jr2ray"]) == 2
    err = capsys.readouterr().err
    assert "does not run runs on it yet" in err and "s3cret" not in err and "jr:********@db.lan" in err
    assert not (tmp_path / "home" / "token").exists() and not (tmp_path / "home" / "instance.json").exists()
