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


def test_up_on_a_postgresql_store_that_does_not_answer_starts_nothing(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`up --store URL` checks the database before Ray starts: unreachable, it is a usage error that names the
    store with its password masked, and leaves no token or instance file behind."""
    from jr2ray.cli import main

    assert main(["up", "--store", "postgresql://jr:s3cret@127.0.0.1:1/jr2ray"]) == 2
    err = capsys.readouterr().err
    assert "does not answer" in err and "nothing was started" in err
    assert "s3cret" not in err and "jr:********@127.0.0.1:1" in err
    assert not (tmp_path / "home" / "token").exists() and not (tmp_path / "home" / "instance.json").exists()
    assert not (tmp_path / "home" / "config.json").exists()  # a store that was refused is not kept


def test_spread_placement_on_sqlite_is_refused_by_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    monkeypatch.setenv("JR2RAY_RUN_PLACEMENT", "spread")
    assert main(["up"]) == 2
    assert "needs a shared store" in capsys.readouterr().err
    assert not (tmp_path / "home" / "instance.json").exists()


def test_the_store_up_kept_is_the_default_and_prints_masked(tmp_path: Path) -> None:
    """`up --store` keeps its store in config.json (mode 0600: the URL may hold a password), which `down` keeps;
    later commands read it when no JR2RAY_STORE is set, and `jr2ray settings` shows it masked, saying where it came
    from."""
    from jr2ray.instance_config import InstanceConfig, write_config
    from jr2ray.settings import describe, sources

    home = tmp_path / "home"
    home.mkdir()
    url = "postgresql://jr:s3cret@db.lan:5433/jr2ray"
    write_config(home, InstanceConfig(store=url, port=8123))
    assert (home / "config.json").stat().st_mode & 0o777 == 0o600
    s = load_settings()
    assert s.store_url() == url and s.store_location() == url
    rows = describe(s, sources())
    row = next(r for r in rows if r["name"] == "store")
    assert row["value"] == "postgresql://jr:********@db.lan:5433/jr2ray" and "config.json" in row["source"]
    port = next(r for r in rows if r["name"] == "port")
    assert port["value"] == 8123 and port["env"] == "up --port" and "config.json" in port["source"]
    assert load_settings(store=str(tmp_path / "j")).store_url() is None  # an explicit setting wins


def test_a_runs_env_never_carries_the_store_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store is handed to a run's actor by name; its URL (and password) is neither inherited nor journaled."""
    from jr2ray.run.actor import journaled_env
    from jr2ray.settings import run_env

    monkeypatch.setenv("JR2RAY_STORE", "postgresql://jr:s3cret@db.lan/jr2ray")
    monkeypatch.setenv("JR2RAY_NOTES_DRIVER", "external")
    assert "JR2RAY_STORE" not in run_env() and run_env()["JR2RAY_NOTES_DRIVER"] == "external"
    assert journaled_env({"JR2RAY_STORE": "postgresql://jr:s3cret@h/db", "A": "1"}) == {"A": "1"}
