"""`up --turn-admission on|off`: the flag, else JR2RAY_TURN_ADMISSION when set, else what the last `up` kept in
<home>/config.json, else off; kept whichever way it was chosen, so a plain `up` after `down` keeps it. The chosen
value reaches the settings `up` deploys with and the env its runs get. Resolved without starting Ray."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from jr2ray.cli.config import keep, resolve_up
from jr2ray.cli.main import build_parser, load
from jr2ray.instance_config import read_config
from jr2ray.instance_record import Instance
from jr2ray.settings import Settings

VAR = "JR2RAY_TURN_ADMISSION"


def _unset(monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    """Unset `var` now and again after the test, whatever the code under test exported meanwhile."""
    monkeypatch.setenv(var, "false")  # recorded first, so the teardown restores the variable's absence
    monkeypatch.delenv(var)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("JR2RAY_STORE", "JR2RAY_LAUNCHER", "JR2RAY_WORKFLOWS", "JR2RAY_ENV_FILE", "JR2RAY_TURN_ADMISSION_APP"):
        monkeypatch.delenv(var, raising=False)
    _unset(monkeypatch, VAR)
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _up(*argv: str) -> Any:
    """What `up` would run with: its argv parsed, the settings read, the kept config applied (then kept)."""
    args = build_parser().parse_args(["up", *argv])
    args.settings = load(args)
    keep(args.settings.home_dir(), resolve_up(args, args.settings))
    return args


def _kept(home: Path) -> bool | None:
    kept = read_config(home)
    assert kept is not None
    return kept.turn_admission


def test_off_by_default_and_kept_off(home: Path) -> None:
    assert _up().turn_admission is False
    assert _kept(home) is False


def test_the_flag_is_kept_so_a_plain_up_after_down_keeps_it_on(home: Path) -> None:
    assert _up("--turn-admission", "on").turn_admission is True
    assert _kept(home) is True
    (home / "instance.json").unlink(missing_ok=True)  # what `down` removes; config.json stays
    assert _up().turn_admission is True
    assert _up("--turn-admission", "off").turn_admission is False
    assert _up().turn_admission is False and _kept(home) is False


def test_the_environment_is_kept_too(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new user's case: `JR2RAY_TURN_ADMISSION=1 jr2ray up`, then a plain `up` without the variable."""
    monkeypatch.setenv(VAR, "1")
    assert _up().turn_admission is True
    monkeypatch.delenv(VAR)
    assert _up().turn_admission is True and _kept(home) is True


def test_the_environment_wins_over_the_kept_value(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _up("--turn-admission", "on")
    monkeypatch.setenv(VAR, "0")
    assert _up().turn_admission is False
    assert _kept(home) is False


def test_the_flag_wins_over_the_environment(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "1")
    assert _up("--turn-admission", "off").turn_admission is False
    monkeypatch.setenv(VAR, "0")
    assert _up("--turn-admission", "on").turn_admission is True
    assert _kept(home) is True


def test_a_value_from_the_env_file_counts_as_the_environment(home: Path, tmp_path: Path) -> None:
    env_file = tmp_path / "jr2ray.env"
    env_file.write_text(f"{VAR}=true\n")
    _up("--turn-admission", "off")
    assert _up("--env-file", str(env_file)).turn_admission is True


def test_a_bad_flag_value_is_a_usage_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["up", "--turn-admission", "yes"])
    assert exc.value.code == 2 and "--turn-admission" in capsys.readouterr().err


def test_settings_shows_the_kept_value_once_with_its_source(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    _up("--turn-admission", "on")
    assert main(["settings", "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "turn_admission"]
    assert len(rows) == 1
    assert rows[0]["value"] is True and rows[0]["source"] == f"config {home.resolve() / 'config.json'}"
    assert rows[0]["env"] == VAR


def test_up_deploys_with_the_chosen_value_and_says_so(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`cmd_up` hands `_bring_up` (which deploys the LLM app and the API) settings with the resolved value, and says
    one line about it; Ray itself is not started here."""
    from jr2ray.cli import instance, main

    seen: list[Settings] = []

    def bring_up(home_dir: Path, args: argparse.Namespace, settings: Settings, modules: list[str]) -> Instance:
        seen.append(settings)
        return Instance(api="http://127.0.0.1:1", ray_address="127.0.0.1:1", started_ray=False)

    def said() -> list[str]:
        return [line for line in capsys.readouterr().err.splitlines() if line.startswith("Turn admission")]

    monkeypatch.setattr(instance, "_bring_up", bring_up)
    assert main(["up", "--launcher", "none", "--turn-admission", "on"]) == 0
    assert seen[-1].turn_admission is True
    (line,) = said()
    assert line.startswith("Turn admission: on") and "'llm'" in line and "--turn-admission off" in line
    assert "deploys no LLM app" in line  # no --llm: nothing here makes the budget
    assert main(["up", "--launcher", "none"]) == 0  # kept
    assert seen[-1].turn_admission is True and len(said()) == 1
    assert main(["up", "--launcher", "none", "--turn-admission", "off"]) == 0
    assert seen[-1].turn_admission is False and said() == []


def test_with_a_model_served_the_line_names_the_budget_runs_wait_for() -> None:
    from jr2ray.cli.format import admission_on

    line = admission_on("llm", "cpu")
    assert "waits for room in the KV budget of 'llm'" in line and "deploys no LLM app" not in line


@pytest.mark.parametrize("on", [True, False])
def test_the_runs_env_carries_the_chosen_value(home: Path, on: bool) -> None:
    """What `_bring_up` exports before `_run_env`: the env new Run actors get (their Harnesses read it there), and
    the one resumed runs get over their journaled env."""
    from jr2ray.cli.instance import _run_env, admission_env, export_turn_admission
    from jr2ray.settings import load_settings

    export_turn_admission(on)
    args = argparse.Namespace(llm="none", settings=load_settings(), host="127.0.0.1", port=8123)
    env, _ = _run_env(args, ["mypkg.flows"])
    assert env is not None and env[VAR] == ("true" if on else "false")
    assert admission_env(on) == {VAR: env[VAR]}
    assert load_settings().turn_admission is on  # a Run actor reading that env gets the same answer


def test_kv_blocks_is_kept_and_0_gives_the_profile_its_own_cache(home: Path) -> None:
    """`up --llm cpu --kv-blocks N`: a small cache a user can see admission work on, kept like the other choices."""
    assert _up().kv_blocks == 0
    assert _up("--kv-blocks", "340").kv_blocks == 340
    kept = read_config(home)
    assert kept is not None and kept.kv_blocks == 340
    assert _up().kv_blocks == 340  # a plain `up` after `down` keeps it
    assert _up("--kv-blocks", "0").kv_blocks == 0


@pytest.mark.parametrize("bad", ["1", "-3", "many"])
def test_a_kv_cache_too_small_to_serve_a_prompt_is_a_usage_error(home: Path, bad: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["up", "--kv-blocks", bad])
    assert exc.value.code == 2 and "--kv-blocks" in capsys.readouterr().err
    assert read_config(home) is None  # nothing kept


def test_a_small_cache_cuts_the_context_to_what_it_serves() -> None:
    from serve.llm import small_cache

    profile = {"block_size": 32, "max_model_len": 32768, "dtype": "bfloat16"}
    got = small_cache(profile, 64)
    assert got == {**profile, "num_gpu_blocks_override": 64, "max_model_len": 63 * 32}  # vLLM keeps one block back
    assert small_cache(profile, 5000)["max_model_len"] == 32768  # never longer than the profile's own
    assert small_cache({}, 10)["max_model_len"] == 9 * 16  # vLLM's default block size
    assert profile["max_model_len"] == 32768  # the profile is not changed
    with pytest.raises(ValueError, match="at least 2"):
        small_cache(profile, 1)


def test_settings_shows_a_kept_kv_blocks_with_what_it_does(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from jr2ray.cli import main

    _up("--kv-blocks", "340")
    assert main(["settings", "--json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "kv_blocks"]
    assert row["value"] == 340 and row["env"] == "up --kv-blocks" and "num_gpu_blocks_override" in row["description"]
