"""The HarnessActor's behaviour, driven without starting Ray (the ray tier starts real actors)."""

from __future__ import annotations

from typing import Any

import pytest
from test_harness_fakes import FakeProvider, Port, pick, spec

from jr2ray.harness.providers import ProviderConfig, ProviderRegistry

pytest.importorskip("ray")

from jr2ray.harness.actor import HarnessActorImpl, as_port  # noqa: E402  (needs ray)


def actor(provider: FakeProvider, **kw: Any) -> HarnessActorImpl:
    impl = HarnessActorImpl(config={"local_base_url": "http://unused/v1"}, **kw)
    impl.conversation.providers = ProviderRegistry(ProviderConfig(), providers={"local": provider})
    return impl


async def test_start_turn_accepts_a_plain_spec_and_keeps_the_conversation() -> None:
    port = Port()
    provider = FakeProvider(pick(("ask", {"q": "1"})), pick(("done", {})), pick(("done", {})))
    pushed: list[Any] = []
    impl = actor(provider, telemetry_sink=pushed.append)
    plain = spec(**{"continue": True}).model_dump(by_alias=True)
    r1 = await impl.start_turn(plain, port)
    r2 = await impl.start_turn(plain, port)
    assert (r1.outcome, r2.outcome) == ("complete", "complete")
    telemetry = await impl.telemetry()
    assert [t.turn for t in telemetry] == [1, 1, 2] and pushed == telemetry
    messages = await impl.messages()
    assert [m.role for m in messages].count("user") == 2  # one conversation, two Turn parts
    assert await impl.abort() is False


def test_as_port() -> None:
    port = Port()
    assert as_port(port) is port
    with pytest.raises(TypeError):
        as_port(object())
