"""A new Effect kind or model provider is one module plus one registration: no edit to jr2ray.

The kinds below live only in this test. The Effect runs through LocalRun and its call is journaled like a built-in
one; the provider answers a Turn. An unregistered kind is refused with a message naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from test_harness_fakes import Port, spec

from jr2ray import LocalRun, assign, jr2_setup
from jr2ray.authoring import EffectSpec
from jr2ray.harness import Conversation, HarnessError, ModelAnswer, ModelRequest, ToolCall
from jr2ray.harness.providers import ProviderConfig, ProviderRegistry, provider_kinds, register_provider
from jr2ray.run import effectors
from jr2ray.run.store import Store


@dataclass(frozen=True)
class ShoutEffect(EffectSpec):
    """Upper-cases a word. Its kind is new to jr2ray."""

    word: str
    idempotent: bool = True
    kind: str = "test.shout"


class ShoutEffector:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def resolve(self, spec: ShoutEffect, context: dict[str, Any], input: Any, workdir: Any) -> dict[str, Any]:
        return {"kind": "shout", "word": effectors.resolve_value(spec.word, context, "shout word")}

    async def run(self, call: dict[str, Any], settings: Any) -> dict[str, Any]:
        self.calls.append(call)
        return {"loud": call["word"].upper()}


SHOUT = ShoutEffector()
effectors.register(ShoutEffect.kind, SHOUT)


def machine(spec: EffectSpec) -> Any:
    """One state that invokes the Effect and keeps what it returned (or its error) in context."""
    kept = assign({"got": lambda event: event.output})
    failed = assign({"got": lambda event: event.error})
    return jr2_setup(events=[], actors={"fx": spec}).create_machine({
        "id": "x", "initial": "busy", "context": {"got": None}, "states": {
            "busy": {"invoke": {"src": "fx", "onDone": {"target": "done", "actions": kept},
                                "onError": {"target": "failed", "actions": failed}}},
            "done": {"type": "final"},
            "failed": {"type": "final"}}})


async def test_a_kind_registered_outside_jr2ray_runs_and_is_journaled(tmp_path: Any) -> None:
    store = Store(tmp_path)
    run = LocalRun(machine(ShoutEffect(word="hi")), store=store)
    await run.wait(10)
    assert (run.value, run.context["got"]) == ("done", {"loud": "HI"})
    assert SHOUT.calls == [{"kind": "shout", "word": "hi"}]
    journal = store.open(run.id)
    assert [e.data for e in journal.ledger("effect_started")] == [{"kind": "shout", "word": "hi"}]
    assert [e.data for e in journal.ledger("effect_finished")] == [{"output": {"loud": "HI"}}]


async def test_an_unregistered_kind_is_an_invoke_error_naming_it() -> None:
    @dataclass(frozen=True)
    class Unknown(EffectSpec):
        idempotent: bool = False
        kind: str = "test.nobody"

    run = LocalRun(machine(Unknown()))
    await run.wait(10)
    assert run.value == "failed"
    assert "test.nobody" in str(run.context["got"])


def test_a_kind_cannot_be_registered_twice() -> None:
    with pytest.raises(ValueError, match="test.shout"):
        effectors.register(ShoutEffect.kind, ShoutEffector())
    assert {"effect.command", "effect.http", "test.shout"} <= set(effectors.registered_kinds())


# -- providers ----------------------------------------------------------------------------------------------------


class EchoProvider:
    """A provider kind new to jr2ray: it picks `done` at once, and remembers the served name it was asked for."""

    kind = "echo"

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.models: list[str] = []

    async def complete(self, request: ModelRequest) -> ModelAnswer:
        self.models.append(request.model)
        return ModelAnswer(tool_calls=[ToolCall(id="c1", name="done", arguments="{}")])


MADE: list[EchoProvider] = []


def make_echo(config: ProviderConfig) -> EchoProvider:
    MADE.append(EchoProvider(config))
    return MADE[-1]


register_provider("echo", make_echo)


async def test_a_provider_registered_outside_jr2ray_runs_a_turn() -> None:
    config = ProviderConfig(timeout_s=5)
    port = Port()
    result = await Conversation(port, providers=ProviderRegistry(config)).run_turn(spec(model="echo/parrot-1"))
    assert result.outcome == "complete"
    assert port.picks == [("done", {})]
    [made] = MADE
    assert made.config is config and made.models == ["parrot-1"]
    assert "echo" in provider_kinds()


def test_an_unregistered_provider_is_refused_with_the_known_kinds() -> None:
    with pytest.raises(HarnessError, match=r"unknown provider 'nobody'.*'anthropic'.*'echo'.*'local'"):
        ProviderRegistry(ProviderConfig()).resolve("nobody/m")
    with pytest.raises(ValueError, match="echo"):
        register_provider("echo", lambda config: EchoProvider(config))
