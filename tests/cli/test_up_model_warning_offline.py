"""`jr2ray up` without --llm warns when the workflows it serves have Agents the Harness plays with a `local/` model:
their model calls would go to the default base URL, where nothing serves a model."""

from __future__ import annotations

import pytest

from jr2ray.cli.instance import model_warning
from jr2ray.settings import DEFAULT_LOCAL_BASE_URL, load_settings


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.delenv("JR2RAY_LOCAL_BASE_URL", raising=False)
    return load_settings()


def test_up_without_llm_names_the_workflows_whose_runs_will_fault(settings) -> None:  # noqa: ANN001
    got = model_warning("none", settings, ["notes", "deploy"], [])
    assert got is not None and got.startswith("warning: no model is served")
    assert DEFAULT_LOCAL_BASE_URL in got and "--llm cpu" in got and "JR2RAY_LOCAL_BASE_URL" in got
    # notes' writer is played by the Harness with local/tiny; deploy's operator is external by default.
    assert "Runs of notes will fault" in got


def test_no_warning_when_a_model_is_served_or_configured(settings) -> None:  # noqa: ANN001
    assert model_warning("cpu", settings, ["notes"], []) is None
    elsewhere = settings.model_copy(update={"local_base_url": "http://gpu-box:8000/v1"})
    assert model_warning("none", elsewhere, ["notes"], []) is None


def test_no_warning_when_no_agent_needs_a_local_model(settings) -> None:  # noqa: ANN001
    assert model_warning("none", settings, ["deploy"], []) is None


def test_runs_of_a_model_less_up_call_this_apis_own_v1(settings) -> None:  # noqa: ANN001
    """Not whatever else listens on the default port: this API's /v1 answers "no model is served here"."""
    import argparse

    from jr2ray.cli.instance import _run_env

    args = argparse.Namespace(llm="none", settings=settings, host="127.0.0.1", port=8123)
    env, llm = _run_env(args, [])
    assert llm is None and env is not None and env["JR2RAY_LOCAL_BASE_URL"] == "http://127.0.0.1:8123/v1"
    got = model_warning("none", settings, ["notes"], [], "http://127.0.0.1:8123/v1")
    assert got is not None and "calls http://127.0.0.1:8123/v1," in got


def test_a_configured_model_url_is_left_to_the_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from jr2ray.cli.instance import _run_env

    monkeypatch.setenv("JR2RAY_LOCAL_BASE_URL", DEFAULT_LOCAL_BASE_URL)  # named on purpose, even as the default
    args = argparse.Namespace(llm="none", settings=load_settings(), host="127.0.0.1", port=8123)
    env, _ = _run_env(args, [])
    assert env is None  # the runs read the URL the user named, from their own settings
    assert model_warning("none", load_settings(), ["notes"], []) is None


@pytest.mark.parametrize("launcher", ["none", "external", None])
def test_no_model_warning_when_the_launcher_starts_no_harness(settings, launcher: str | None) -> None:  # noqa: ANN001
    """`up --launcher none`: no Harness is started, so no run here calls a model and none can fault on it."""
    assert model_warning("none", settings, ["notes"], [], launcher=launcher) is None


def test_the_model_warning_stays_with_the_auto_launcher(settings) -> None:  # noqa: ANN001
    got = model_warning("none", settings, ["notes"], [], launcher="auto")
    assert got is not None and "Runs of notes will fault" in got


def test_launcher_none_says_who_plays_the_harness_seats(settings) -> None:  # noqa: ANN001
    from jr2ray.cli.instance import launcher_note

    got = launcher_note("none", ["notes", "deploy"], [])
    assert got is not None and got.startswith("note: runs here start no Harness (--launcher none)")
    assert "(in notes)" in got and "deploy" not in got  # deploy's operator is external: nothing changes for it
    assert launcher_note("auto", ["notes"], []) is None
    assert launcher_note("none", ["deploy"], []) is None


def test_auto_without_the_harness_installed_is_launcher_none(settings, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    import jr2ray.run.client as client

    monkeypatch.setattr(client, "resolve_launcher", lambda spec: None)  # what "auto" gives when it does not import
    assert model_warning("none", settings, ["notes"], [], launcher="auto") is None
    from jr2ray.cli.instance import launcher_note

    got = launcher_note("auto", ["notes"], [])
    assert got is not None and "(--launcher auto)" in got
