"""One settings model: what wins over what, how values are parsed, that secrets never print, and that no other module
reads the environment for a setting."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import jr2ray.harness.providers  # noqa: F401  (the built-in providers declare their settings sections)
from jr2ray.cli import main
from jr2ray.settings import ENV_NAMES, SECRETS, all_env_names, describe, load_settings, sources

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for env in [*all_env_names().values(), "JR2RAY_ENV_FILE"]:
        monkeypatch.delenv(env, raising=False)
    return monkeypatch


def test_a_flag_beats_the_environment_which_beats_the_file_which_beats_the_default(
        clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env_file = tmp_path / "jr2ray.env"
    env_file.write_text("JR2RAY_HOME=/from/file\nJR2RAY_API=http://file:1\nJR2RAY_LAUNCHER=none\n")
    clean_env.setenv("JR2RAY_API", "http://env:2")
    clean_env.setenv("JR2RAY_LAUNCHER", "pkg.mod:make")
    clean_env.setenv("JR2RAY_ENV_FILE", str(env_file))
    s = load_settings(launcher="flag.mod:make")
    assert (s.home, s.api, s.launcher, s.notes_driver) == ("/from/file", "http://env:2", "flag.mod:make", "harness")
    where = sources(flags={"launcher": "flag.mod:make"})
    assert where["launcher"] == "flag"
    assert where["api"] == "environment JR2RAY_API"
    assert where["home"] == f"file {env_file}"
    assert where["notes_driver"] == "default"


def test_home_and_store_are_resolved_from_the_one_home(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("JR2RAY_HOME", str(tmp_path / "h"))
    s = load_settings()
    assert s.home_dir() == (tmp_path / "h").resolve() and s.home_dir().is_dir()
    assert s.store_dir() == (tmp_path / "h" / "runs").resolve()
    clean_env.setenv("JR2RAY_STORE", str(tmp_path / "elsewhere"))
    assert load_settings().store_dir() == (tmp_path / "elsewhere").resolve()


def test_values_are_parsed_once_here(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("JR2RAY_RETURN_TOKEN_IDS", "")
    clean_env.setenv("JR2RAY_VLLM_METRICS_URLS", "http://a/metrics, http://b/metrics,")
    s = load_settings()
    assert s.return_token_ids is False and s.vllm_metrics_urls == ["http://a/metrics", "http://b/metrics"]
    clean_env.setenv("JR2RAY_RETURN_TOKEN_IDS", "yes")
    assert load_settings().return_token_ids is True
    clean_env.setenv("JR2RAY_NOTES_DRIVER", "robot")
    with pytest.raises(ValueError, match="notes_driver|JR2RAY_NOTES_DRIVER"):
        load_settings()


def test_a_missing_settings_file_is_an_error(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "nope.env")


def test_jr2ray_settings_prints_every_value_and_source_and_masks_secrets(
        clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean_env.setenv("JR2RAY_TOKEN", "instance-secret-1")
    clean_env.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-2")
    clean_env.setenv("JR2RAY_LOCAL_BASE_URL", "http://vllm:9/v1")
    assert main(["--home", str(tmp_path), "settings"]) == 0
    text = capsys.readouterr().out
    assert "instance-secret-1" not in text and "sk-ant-secret-2" not in text
    printed = text.splitlines()
    lines = {line.split()[0]: line for line in printed if not line.startswith(" ")}
    assert set(lines) == set(all_env_names().values()) > set(ENV_NAMES.values())
    # each setting is followed by what it does, as its field declares it
    said = {printed[k - 1].split()[0]: line.strip() for k, line in enumerate(printed) if line.startswith("    ")}
    assert set(said) >= set(ENV_NAMES.values()) | {"ANTHROPIC_API_KEY"}  # a test may register a bare provider
    assert said["JR2RAY_TURN_ADMISSION_PLACEMENT"].startswith("Turn admission over several LLM replicas")
    assert said["ANTHROPIC_API_KEY"] == "Key for `anthropic/...` models."
    assert lines["ANTHROPIC_API_KEY"].endswith("environment ANTHROPIC_API_KEY")  # a provider's own section
    assert "http://vll" in lines["JR2RAY_LOCAL_BASE_URL"] and lines["JR2RAY_LOCAL_BASE_URL"].endswith(
        "environment JR2RAY_LOCAL_BASE_URL")
    assert lines["JR2RAY_HOME"].endswith("flag") and str(tmp_path) in lines["JR2RAY_HOME"]
    assert "********" in lines["JR2RAY_TOKEN"]
    rows = describe(load_settings(), sources())
    secret = {r["name"] for r in rows if r["secret"]}  # beside these, only providers' (a test may register one)
    assert set(SECRETS) | {"anthropic.api_key"} <= secret and all("." in n for n in secret - set(SECRETS))
    assert "token" in SECRETS


_READ = re.compile(r"os\.environ\.get\(|os\.getenv\(|environ\[[^\]]+\](?!\s*=)|in os\.environ\b")


def test_no_module_but_settings_reads_a_setting_from_the_environment() -> None:
    offenders = []
    for path in [*REPO.joinpath("jr2ray").rglob("*.py"), *REPO.joinpath("workflows").rglob("*.py")]:
        if path.name == "settings.py" and path.parent.name == "jr2ray":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _READ.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []


def test_jr2ray_settings_names_the_env_file_a_value_came_from(
        clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env_file = tmp_path / "jr2ray.env"
    env_file.write_text("JR2RAY_LAUNCHER=none\nJR2RAY_NOTES_MODEL=local/other\n")
    clean_env.setenv("JR2RAY_NOTES_MODEL", "local/from-env")
    assert main(["--home", str(tmp_path), "--env-file", str(env_file), "settings", "--json"]) == 0
    rows = {r["env"]: r for r in json.loads(capsys.readouterr().out)}
    assert (rows["JR2RAY_LAUNCHER"]["value"], rows["JR2RAY_LAUNCHER"]["source"]) == ("none", f"file {env_file}")
    assert (rows["JR2RAY_NOTES_MODEL"]["value"], rows["JR2RAY_NOTES_MODEL"]["source"]) == (
        "local/from-env", "environment JR2RAY_NOTES_MODEL")


def test_the_cached_workflow_modules_follow_the_variable_and_the_env_file(
        clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from jr2ray.settings import workflow_modules

    assert workflow_modules() == tuple(load_settings().workflows) == ()
    clean_env.setenv("JR2RAY_WORKFLOWS", "a.one,b.two")
    assert workflow_modules() == ("a.one", "b.two")
    clean_env.delenv("JR2RAY_WORKFLOWS")
    env_file = tmp_path / "jr2ray.env"
    env_file.write_text("JR2RAY_WORKFLOWS=c.three\n")
    clean_env.setenv("JR2RAY_ENV_FILE", str(env_file))
    assert workflow_modules() == ("c.three",)
    env_file.write_text("JR2RAY_WORKFLOWS=c.three,d.four\n")  # the file changed: read again
    assert workflow_modules() == ("c.three", "d.four") == tuple(load_settings().workflows)
    env_file.unlink()
    with pytest.raises(FileNotFoundError):  # as load_settings: a named file that is gone is an error, not a cache hit
        workflow_modules()
