"""The store seam: a setting's scheme picks its backend in jr2ray/run/store/ alone, an unknown scheme is refused
with the schemes that are served, and a scheme cannot be taken over by a second backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jr2ray.run.store import (
    DIRECTORY,
    UnknownStoreScheme,
    backend_for,
    is_shared,
    open_store,
    register_backend,
    registered_backends,
    scheme_of,
)
from jr2ray.settings import ENV_NAMES


def test_a_setting_s_scheme_picks_its_backend(tmp_path: Path) -> None:
    assert scheme_of("postgresql://jr:pw@h/db") == "postgresql" and scheme_of("POSTGRES://h/db") == "postgres"
    assert scheme_of(tmp_path / "runs") == scheme_of("./a://b") == scheme_of("runs") == DIRECTORY
    assert backend_for("postgres://h/db").name == backend_for("postgresql://h/db").name == "postgresql"
    assert is_shared("postgresql://h/db") and not is_shared(str(tmp_path))
    store = open_store(tmp_path / "runs")
    assert store.location == str(tmp_path / "runs") and store.shared is False
    assert {"sqlite", "postgresql", "memory"} <= set(registered_backends())  # memory: conftest registered it


def test_an_unknown_scheme_is_refused_naming_the_served_ones(tmp_path: Path) -> None:
    with pytest.raises(UnknownStoreScheme, match=r"no journal store serves redis:// URLs .*postgresql://"):
        open_store("redis://h/0")
    assert not Path("redis:").exists()


def test_a_scheme_is_served_by_one_backend() -> None:
    class Other:
        name, schemes, shared = "other", ("other", "postgresql"), True

        def open(self, location: str, settings: Any) -> Any:
            raise AssertionError("never opened")

        def ping(self, location: str, timeout_s: float) -> None:
            return None

    before = registered_backends()
    with pytest.raises(ValueError, match="already served by the 'postgresql' backend"):
        register_backend(Other())
    assert registered_backends() == before and backend_for("postgresql://h/db").name == "postgresql"
    with pytest.raises(UnknownStoreScheme):
        backend_for("other://x")  # nothing of it was registered


def test_up_refuses_a_store_no_backend_serves_before_anything_starts(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    for env in [*ENV_NAMES.values(), "JR2RAY_ENV_FILE"]:
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    assert main(["up", "--store", "redis://:s3cret@h/0"]) == 2
    err = capsys.readouterr().err
    assert "no journal store serves redis://" in err and "nothing was started" in err and "s3cret" not in err
    assert not (tmp_path / "home" / "instance.json").exists() and not (tmp_path / "home" / "token").exists()
