"""`up`'s choices are kept in <home>/config.json, which `down` keeps: a plain `up` after `down` comes back on the same
store, ports, workflows and launcher, a flag given to `up` replaces the kept value, and `jr2ray settings` says each
value came from the kept config. Resolved without starting anything (`resolve_up`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jr2ray.cli.config import keep, resolve_up
from jr2ray.cli.main import build_parser, load
from jr2ray.instance_config import read_config


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("JR2RAY_STORE", "JR2RAY_LAUNCHER", "JR2RAY_WORKFLOWS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _up(*argv: str) -> object:
    """What `up` would run with: its argv parsed, the settings read, and the kept config applied (then kept)."""
    args = build_parser().parse_args(["up", *argv])
    args.settings = load(args)
    config = resolve_up(args, args.settings)
    keep(args.settings.home_dir(), config)
    return args


def test_a_plain_up_after_down_comes_back_as_the_last_up_left_it(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "journals"
    first = _up("--store", str(other), "--port", "8123", "--launcher", "none", "--workflows", "mypkg.flows",
                "--num-cpus", "6")
    assert (home / "config.json").stat().st_mode & 0o777 == 0o600
    (home / "instance.json").unlink(missing_ok=True)  # what `down` removes; config.json stays
    again = _up()
    for key in ("port", "launcher", "workflows", "num_cpus", "host", "llm"):
        assert getattr(again, key) == getattr(first, key), key
    assert again.settings.store_location() == str(other.resolve())  # type: ignore[attr-defined]


def test_a_flag_given_to_up_replaces_the_kept_value(home: Path, tmp_path: Path) -> None:
    _up("--store", str(tmp_path / "a"), "--port", "8123")
    _up("--store", str(tmp_path / "b"))
    kept = read_config(home)
    assert kept is not None
    assert kept.store == str((tmp_path / "b").resolve()) and kept.port == 8123
    # both stores are remembered, in the order they were served: `up` checks the others for runs left behind
    assert kept.stores == [str((tmp_path / "a").resolve()), str((tmp_path / "b").resolve())]


def test_the_environment_wins_over_the_kept_launcher(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _up("--launcher", "none")
    monkeypatch.setenv("JR2RAY_LAUNCHER", "auto")
    assert _up().launcher == "auto"  # type: ignore[attr-defined]
    monkeypatch.delenv("JR2RAY_LAUNCHER")
    assert _up().launcher == "auto"  # type: ignore[attr-defined]  # and was kept in its turn


def test_defaults_apply_when_nothing_was_kept(home: Path) -> None:
    args = _up()
    assert (args.host, args.port, args.num_cpus, args.llm, args.cluster) == (  # type: ignore[attr-defined]
        "127.0.0.1", 8000, 4, "none", False)
    assert read_config(home).launcher == "auto"  # type: ignore[union-attr]


def test_settings_says_which_values_the_kept_config_gave(home: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    _up("--store", str(tmp_path / "kept"), "--port", "8124", "--launcher", "none")
    assert main(["settings", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    where = f"config {home.resolve() / 'config.json'}"
    assert rows["store"]["value"] == str((tmp_path / "kept").resolve()) and rows["store"]["source"] == where
    assert rows["launcher"]["value"] == "none" and rows["launcher"]["source"] == where
    assert rows["port"]["value"] == 8124 and rows["port"]["source"] == where
    assert rows["retention_days"]["source"] == "default"


def test_a_store_copy_refuses_to_copy_onto_itself_and_changes_nothing(home: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    _up("--store", str(tmp_path / "same"))
    before = (home / "config.json").read_bytes()
    assert main(["store", "copy", "--to", str(tmp_path / "same")]) == 2
    assert "is the one copied from" in capsys.readouterr().err
    assert (home / "config.json").read_bytes() == before


def test_a_store_copy_is_refused_while_the_instance_is_up_on_its_store(home: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A live instance keeps writing its store: `store copy` refuses, and the target is left as it was."""
    import socket

    from jr2ray.cli import main
    from jr2ray.instance_record import Instance, write_instance

    _up("--store", str(tmp_path / "src"))
    with socket.socket() as gcs:  # a Ray this home joined, answering
        gcs.bind(("127.0.0.1", 0))
        gcs.listen()
        write_instance(home, Instance(api="http://127.0.0.1:1", ray_address=f"127.0.0.1:{gcs.getsockname()[1]}",
                                      started_ray=False))
        assert main(["store", "copy", "--to", str(tmp_path / "dst")]) == 1
    assert "run `jr2ray down` first" in capsys.readouterr().err
    assert not (tmp_path / "dst").exists()


def test_up_names_another_store_that_still_holds_active_runs(tmp_path: Path) -> None:
    from jr2ray.cli.stores import left_behind
    from jr2ray.run.store import NewRun, Store

    old, new = Store(tmp_path / "old"), Store(tmp_path / "new")
    old.create_runs([NewRun(id="left-1", workflow="deploy", digest="d", status="active"),
                     NewRun(id="moved-1", workflow="deploy", digest="d", status="active"),
                     NewRun(id="over-1", workflow="deploy", digest="d", status="done")])
    new.create_runs([NewRun(id="moved-1", workflow="deploy", digest="d", status="active")])
    notes = left_behind(new.location, [old.location, new.location])
    assert len(notes) == 1 and old.location in notes[0] and "1 active run(s)" in notes[0]
    assert left_behind(new.location, [new.location]) == []
    assert left_behind(new.location, [str(tmp_path / "never-made"), new.location]) == []


def test_every_command_that_loads_the_catalog_reads_the_kept_workflows(home: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`up --workflows keptflows.kept_notes` once; then `reload`, `workflows`, `migrate`, `gc` and a driver's client
    (what `jr2ray.connect()` returns) find `kept_notes` with no JR2RAY_WORKFLOWS set."""
    from jr2ray.cli import main
    from jr2ray.run.client import Client
    from jr2ray.settings import load_settings

    root = tmp_path / "code" / "keptflows"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    notes = Path(__file__).resolve().parents[2] / "workflows" / "notes.py"
    (root / "kept_notes.py").write_text(notes.read_text())
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    assert main(["migrate", "kept_notes", "--to", "current", "--dry-run"]) == 2  # nothing kept yet: not found
    assert "no workflow 'kept_notes'" in capsys.readouterr().err

    _up("--workflows", "keptflows.kept_notes")
    assert main(["reload"]) == 0
    said = capsys.readouterr()
    assert "workflow kept_notes: new runs start on version" in said.out + said.err
    assert main(["workflows", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert any(r["workflow"] == "kept_notes" and r["current"] for r in rows), rows
    assert main(["migrate", "kept_notes", "--to", "current", "--dry-run"]) == 0
    assert "would move 0 run(s) of kept_notes" in capsys.readouterr().out
    assert main(["gc", "--json"]) == 0
    capsys.readouterr()
    client = Client(settings=load_settings())  # what connect() builds once it has joined Ray
    assert client.modules == ["keptflows.kept_notes"]
    version, machine = client._machine("kept_notes", None)
    assert version and machine.id == "notes"


@pytest.mark.parametrize("port", ["12000", "10002", "19999", "70000"])
def test_up_with_a_ray_port_ray_cannot_take_is_a_usage_error_before_anything_starts(
        home: Path, port: str, capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    assert main(["up", "--ray-port", port]) == 2
    err = capsys.readouterr().err
    assert f"--ray-port {port}" in err and "nothing was started" in err and "Traceback" not in err
    assert not (home / "instance.json").exists() and not (home / "config.json").exists()  # nothing kept either
