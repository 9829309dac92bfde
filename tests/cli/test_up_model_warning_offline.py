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
