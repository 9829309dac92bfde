"""Fixtures of the conformance tier: one recording model server per session, reset for every test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conformance_fakes import FakeModelServer
from jr2ray.harness import Conversation, Limits, ProviderConfig, ProviderRegistry, TurnSpec


@pytest.fixture(scope="session")
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def llm(model_server: FakeModelServer) -> Iterator[FakeModelServer]:
    model_server.reset()
    yield model_server
    model_server.reset()


@pytest.fixture
def conversation(llm: FakeModelServer) -> Callable[..., Conversation]:
    """A Conversation whose `local/...` models are the fake server, through the real openai SDK."""

    def make(port: Any = None, **limits: Any) -> Conversation:
        config = ProviderConfig(local_base_url=llm.url, local_api_key="test", max_retries=0, timeout_s=10)
        return Conversation(port, providers=ProviderRegistry(config), limits=Limits(**limits))

    return make


@pytest.fixture
def spec() -> Callable[..., TurnSpec]:
    def make(**over: Any) -> TurnSpec:
        values: dict[str, Any] = {
            "run_id": "run-1",
            "iid": "run-1/writer",
            "slot": "writer",
            "state": "notes.writing",
            "prompt": "Write the release notes for these changes:\n- faster start",
            "model": "local/tiny",
            "instructions": "You write short release notes.",
        }
        values.update(over)
        return TurnSpec(**values)

    return make
