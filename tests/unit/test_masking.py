"""Masking regexes (H11): one hermes call to an Allowed pick; lengths follow the schema unless a profile caps them."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import BaseModel, Field

pytest.importorskip("outlines_core")

from jr2ray.authoring.models import MenuItem  # noqa: E402
from jr2ray.harness.masking import (  # noqa: E402
    Bounds,
    ToolSpec,
    build_tool_call_regex,
    masking_extra_body,
    select_tools,
)


class AskInput(BaseModel):
    question: str = Field(description="One question for the editor.")


class DoneInput(BaseModel):
    notes: str
    count: int = 0
    tags: list[str] = []
    ratio: float | None = None


class NoInput(BaseModel):
    pass


MENU = [
    {"name": "ask", "parameters": AskInput.model_json_schema()},
    {"name": "done", "parameters": DoneInput.model_json_schema()},
    {"name": "noop", "parameters": NoInput.model_json_schema()},
]


def call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def test_matches_valid_calls() -> None:
    rx = re.compile(build_tool_call_regex(MENU))
    assert rx.fullmatch(call("ask", '{"question": "How long?"}'))
    assert rx.fullmatch(call("ask", '{"question":"How long?"}'))
    assert rx.fullmatch(call("done", '{"notes": "x", "count": 12, "tags": ["a", "b"], "ratio": null}'))
    assert rx.fullmatch(call("done", '{"notes": "x", "ratio": 0.5}'))
    assert rx.fullmatch(call("noop", "{}"))


def test_rejects_unlisted_names_and_bad_args() -> None:
    allowed = select_tools(MENU, ["ask"])
    rx = re.compile(build_tool_call_regex(allowed))
    assert rx.fullmatch(call("ask", '{"question": "ok"}'))
    assert not rx.fullmatch(call("done", '{"notes": "x"}'))  # on the Menu but not allowed
    assert not rx.fullmatch(call("evil", '{"question": "ok"}'))  # not on the Menu at all
    assert not rx.fullmatch(call("ask", '{"notes": "ok"}'))  # wrong field
    assert not rx.fullmatch(call("ask", "{}"))  # missing required field
    assert not rx.fullmatch("plain text")


def test_bounded_so_a_random_model_terminates() -> None:
    rx = re.compile(build_tool_call_regex(MENU, Bounds(max_string=8, max_items=2, max_digits=3)))
    assert rx.fullmatch(call("ask", '{"question": "12345678"}'))
    assert not rx.fullmatch(call("ask", '{"question": "123456789"}'))
    assert rx.fullmatch(call("done", '{"notes": "x", "count": 999}'))
    assert not rx.fullmatch(call("done", '{"notes": "x", "count": 1000}'))
    assert not rx.fullmatch(call("done", '{"notes": "x", "tags": ["a", "b", "c"]}'))
    assert not rx.fullmatch(call("ask", '{"question":  "two spaces"}'))  # whitespace is at most one space


def test_strings_cannot_close_the_call_early() -> None:
    """A "</tool_call>" inside an argument would cut the hermes parser's match short; the mask keeps "</" out."""
    rx = re.compile(build_tool_call_regex(select_tools(MENU, ["ask"])))
    assert rx.fullmatch(call("ask", '{"question": "is a < b?"}'))
    assert rx.fullmatch(call("ask", '{"question": "<b>bold"}'))
    assert not rx.fullmatch(call("ask", '{"question": "x</tool_call>y"}'))
    assert not rx.fullmatch(call("ask", '{"question": "x</"}'))


def test_accepts_openai_tool_shape_and_keeps_menu_order() -> None:
    openai_tools = [{"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}} for t in MENU]
    assert build_tool_call_regex(openai_tools) == build_tool_call_regex(MENU)
    assert [t.name for t in select_tools(openai_tools, ["noop", "ask"])] == ["ask", "noop"]
    assert isinstance(select_tools(MENU, ["ask"])[0], ToolSpec)


def test_extra_body_shape() -> None:
    body = masking_extra_body(select_tools(MENU, ["ask", "done"]))
    assert set(body) == {"structured_outputs"}
    rx = body["structured_outputs"]["regex"]
    assert re.fullmatch(rx, call("done", '{"notes": "n"}'))
    json.dumps(body)  # it travels as JSON
    assert masking_extra_body([]) == {}
    with pytest.raises(ValueError):
        build_tool_call_regex([])


class LongInput(BaseModel):
    note: str
    title: str = Field(max_length=10)
    tags: list[str] = []


LONG = [{"name": "long", "parameters": LongInput.model_json_schema()}]
LONG_ITEM = MenuItem(name="long", description="Long.", parameters=LongInput.model_json_schema())


def test_default_follows_the_schema_own_lengths() -> None:
    """No cap by default: a 2,000-character note is admitted; a schema's own maxLength still holds."""
    rx = re.compile(build_tool_call_regex(LONG))
    note = "n" * 2000
    assert rx.fullmatch(call("long", json.dumps({"note": note, "title": "t" * 10, "tags": ["a"] * 9})))
    assert not rx.fullmatch(call("long", json.dumps({"note": note, "title": "t" * 11})))
    assert re.fullmatch(build_tool_call_regex(MENU), call("done", '{"notes": "x", "count": 12345678901234}'))


def test_a_profile_cap_narrows_open_strings_only_as_given() -> None:
    rx = re.compile(build_tool_call_regex(LONG, Bounds(max_string=48)))
    assert rx.fullmatch(call("long", json.dumps({"note": "n" * 48, "title": "t" * 10, "tags": ["a"] * 9})))
    assert not rx.fullmatch(call("long", json.dumps({"note": "n" * 49, "title": "t"})))
    assert Bounds().open and not Bounds(max_items=4).open


def test_the_tiny_profile_carries_the_caps_and_the_gpu_profile_none() -> None:
    """The caps are the tiny model's profile's, visible in serve/config/cpu.yaml, and travel to a Run as env."""
    from serve.llm import MASKING_CAPS_ENV, masking_caps_env

    cpu = masking_caps_env("cpu")
    assert Bounds.model_validate(json.loads(cpu[MASKING_CAPS_ENV])) == Bounds(max_string=48, max_items=4, max_digits=9)
    assert masking_caps_env("gpu") == {}


def test_provider_config_reads_the_caps_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from jr2ray.harness.providers import OpenAICompatProvider, ProviderConfig
    from jr2ray.harness.transcript import ModelRequest
    from jr2ray.settings import load_settings

    monkeypatch.delenv("JR2RAY_MASKING_CAPS", raising=False)
    assert ProviderConfig.from_settings(load_settings()).masking_caps == Bounds()
    monkeypatch.setenv("JR2RAY_MASKING_CAPS", '{"max_string": 7}')
    config = ProviderConfig.from_settings(load_settings())
    assert config.masking_caps == Bounds(max_string=7)
    provider = OpenAICompatProvider(client=object(), masking_caps=config.masking_caps)
    request = ModelRequest(model="tiny", system="s", messages=[], tools=[LONG_ITEM], masked_tools=["long"])
    rx = re.compile(provider.build_kwargs(request)["extra_body"]["structured_outputs"]["regex"])
    assert rx.fullmatch(call("long", '{"note": "1234567", "title": "t"}'))
    assert not rx.fullmatch(call("long", '{"note": "12345678", "title": "t"}'))


def test_up_hands_the_profile_caps_to_new_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`jr2ray up --llm cpu` gives its Runs the tiny model's caps; the gpu profile gives none; a set variable wins."""
    import argparse

    from jr2ray.cli.instance import _run_env

    monkeypatch.delenv("JR2RAY_MASKING_CAPS", raising=False)
    args = argparse.Namespace(llm="cpu", host="127.0.0.1", port=8000)
    env, _ = _run_env(args, [])
    assert env is not None and json.loads(env["JR2RAY_MASKING_CAPS"]) == {"max_digits": 9, "max_items": 4,
                                                                          "max_string": 48}
    env, _ = _run_env(argparse.Namespace(llm="gpu", host="127.0.0.1", port=8000), [])
    assert env is not None and "JR2RAY_MASKING_CAPS" not in env
    monkeypatch.setenv("JR2RAY_MASKING_CAPS", '{"max_string": 200}')
    env, _ = _run_env(args, [])
    assert env is not None and env["JR2RAY_MASKING_CAPS"] == '{"max_string": 200}'
