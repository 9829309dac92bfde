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
