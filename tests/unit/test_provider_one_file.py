"""A model provider is one class and one `register_provider` call: its settings, prefix and tool format with it.

`ParrotProvider` lives only in this test. Registering it makes a workflow with a `parrot/...` model render its
Menu in the parrot's own tool format, lists its settings in `jr2ray settings` with their sources, hands those
settings down to it through `ProviderConfig`, and lets it play a whole Turn through the real Harness beside a
LocalRun. Nothing in jr2ray names it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import AliasChoices, BaseModel, Field, SecretStr

from jr2ray import LocalRun, agent, assign, define_event, jr2_setup
from jr2ray.authoring.providers import model_prefixes
from jr2ray.cli import main
from jr2ray.harness import ModelAnswer, ModelRequest, ToolCall
from jr2ray.harness.launcher import LocalTurnLauncher
from jr2ray.harness.providers import ProviderConfig, register_provider
from jr2ray.menu import MenuItem, ToolFormat, render_tools
from jr2ray.settings import ProviderSettings, load_settings

REPO = Path(__file__).resolve().parents[2]


def _parrot_tools(items: Sequence[MenuItem]) -> list[dict[str, Any]]:
    return [{"parrot_call": i.name, "hint": i.description, "shape": i.parameters} for i in items]


class ParrotProvider:
    """A provider kind new to jr2ray. It answers each request by picking `done` with its configured voice."""

    kind = "parrot"
    tools = ToolFormat("parrot", _parrot_tools)
    made: list[ParrotProvider] = []

    class Settings(ProviderSettings):
        voice: str = Field(default="squawk", validation_alias=AliasChoices("PARROT_VOICE"),
                           description="What the parrot says when it picks.")
        api_key: SecretStr | None = Field(default=None, validation_alias=AliasChoices("PARROT_API_KEY"),
                                          description="A key, to show it is masked.")

    def __init__(self, config: ProviderConfig) -> None:
        self.settings = config.section(self.kind, self.Settings)
        self.seen: list[tuple[str, list[dict[str, Any]]]] = []
        ParrotProvider.made.append(self)

    async def complete(self, request: ModelRequest) -> ModelAnswer:
        self.seen.append((request.model, render_tools(request.tools, self.tools.name)))
        args = json.dumps({"note": self.settings.voice})
        return ModelAnswer(tool_calls=[ToolCall(id=f"p{len(self.seen)}", name="done", arguments=args)],
                           prompt_tokens=10, cached_tokens=0)


register_provider(ParrotProvider.kind, ParrotProvider, tools=ParrotProvider.tools, settings=ParrotProvider.Settings)


class DoneInput(BaseModel):
    note: str = Field(description="What you have to say.")


def parrot_workflow() -> Any:
    done = define_event(name="done", description="Say your piece, once.", input=DoneInput)
    return jr2_setup(events=[done], actors={"bird": agent(model="parrot/polly-1", instructions="Talk.")}).\
        create_machine({"id": "aviary", "initial": "talking", "context": {"note": None}, "states": {
            "talking": {"invoke": {"src": "bird", "input": {"prompt": "Say something."}},
                        "on": {"done": {"target": "quiet", "actions": assign(note=lambda event: event.note)}}},
            "quiet": {"type": "final"}}})


@pytest.fixture
def parrot_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for env in ("PARROT_VOICE", "PARROT_API_KEY", "JR2RAY_ENV_FILE"):
        monkeypatch.delenv(env, raising=False)
    ParrotProvider.made.clear()
    return monkeypatch


def test_the_prefix_and_tool_format_come_from_the_registration() -> None:
    wf = parrot_workflow()
    assert model_prefixes()["parrot"] == "parrot"
    tools = wf.tools("bird")  # no format named: the model's prefix picks it
    assert tools == [{"parrot_call": "done", "hint": "Say your piece, once.", "shape": wf.menu("bird")[0].parameters}]
    assert wf.tools("bird", "openai")[0]["function"]["name"] == "done"  # the built-ins are still there


def test_an_undeclared_prefix_is_named_when_its_tools_are_asked_for() -> None:
    done = define_event(name="done", description="d")
    wf = jr2_setup(events=[done], actors={"x": agent(model="nobody/m", instructions="i")}).create_machine(
        {"id": "n", "initial": "a", "states": {"a": {"invoke": {"src": "x"}, "on": {"done": "b"}},
                                               "b": {"type": "final"}}})
    with pytest.raises(ValueError, match=r"prefix 'nobody'.*'parrot'"):
        wf.tools("x")
    with pytest.raises(ValueError, match=r"'parrot/\.\.\.'"):  # a shapeless model lists the declared providers
        agent(model="polly", instructions="i")


def test_jr2ray_settings_lists_the_providers_settings_with_their_sources(
        parrot_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parrot_env.setenv("PARROT_VOICE", "pieces of eight")
    parrot_env.setenv("PARROT_API_KEY", "parrot-secret-1")
    assert main(["--home", str(tmp_path), "settings", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["parrot.voice"] == {"name": "parrot.voice", "env": "PARROT_VOICE", "value": "pieces of eight",
                                    "source": "environment PARROT_VOICE", "secret": False,
                                    "description": "What the parrot says when it picks."}  # its field's, one file
    assert rows["parrot.api_key"]["value"] == "********" and rows["parrot.api_key"]["secret"] is True
    assert "parrot-secret-1" not in json.dumps(rows)


async def test_a_turn_is_played_through_the_harness_with_the_settings_handed_down(
        parrot_env: pytest.MonkeyPatch) -> None:
    parrot_env.setenv("PARROT_VOICE", "pieces of eight")
    config = ProviderConfig.from_settings(load_settings())  # read once, at the entry point
    parrot_env.setenv("PARROT_VOICE", "changed later")  # the provider must not read the environment itself
    wf = parrot_workflow()
    run = LocalRun(wf, launcher=LocalTurnLauncher(config))
    status = await run.wait(10)
    assert (status.status, run.value, run.context["note"]) == ("done", "quiet", "pieces of eight")
    [bird] = ParrotProvider.made
    [(model, tools)] = bird.seen
    assert model == "polly-1" and tools == wf.tools("bird")


def test_no_file_of_jr2ray_names_the_test_provider() -> None:
    files = [*REPO.joinpath("jr2ray").rglob("*.py"), *REPO.joinpath("serve").rglob("*.py")]
    assert [p for p in files if "parrot" in p.read_text().lower()] == []
