"""Providers through their real SDKs over a mock HTTP transport: request shape, usage, masking, errors."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from test_harness_fakes import MENU

from jr2ray.harness.errors import HarnessError, ProviderError
from jr2ray.harness.providers import (
    AnthropicProvider,
    OpenAICompatProvider,
    ProviderConfig,
    ProviderRegistry,
    split_model,
)
from jr2ray.harness.transcript import Message, ModelRequest, ToolCall
from jr2ray.menu.models import MenuItem
from jr2ray.settings import load_settings


def request(**over: Any) -> ModelRequest:
    values: dict[str, Any] = {
        "model": "tiny",
        "system": "SYS",
        "tools": MENU,
        "messages": [Message(role="user", content="go")],
    }
    values.update(over)
    return ModelRequest(**values)


class Recorder:
    """A mock transport handler; `lib` is the httpx flavour the SDK under test is built on."""

    def __init__(self, reply: dict[str, Any], status: int = 200, lib: Any = httpx) -> None:
        self.reply = reply
        self.status = status
        self.lib = lib
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, req: Any) -> Any:
        self.bodies.append(json.loads(req.content))
        return self.lib.Response(self.status, json=self.reply)


def openai_reply(message: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "tiny",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage
        or {
            "prompt_tokens": 100,
            "completion_tokens": 1,
            "total_tokens": 101,
            "prompt_tokens_details": {"cached_tokens": 64},
        },
    }


def openai_provider(rec: Recorder) -> OpenAICompatProvider:
    client = openai.AsyncOpenAI(
        base_url="http://fake/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(rec)),
    )
    return OpenAICompatProvider(client=client)


def test_split_model() -> None:
    assert split_model("local/tiny") == ("local", "tiny")
    assert split_model("anthropic/claude-x/y") == ("anthropic", "claude-x/y")
    for bad in ("tiny", "local/", "openai/gpt"):
        with pytest.raises(HarnessError):
            split_model(bad)


def test_config_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JR2RAY_LOCAL_BASE_URL", raising=False)
    monkeypatch.delenv("JR2RAY_LOCAL_API_KEY", raising=False)
    c = ProviderConfig.from_settings(load_settings())
    assert (c.local_base_url, c.local_api_key) == ("http://127.0.0.1:8000/v1", "none")
    monkeypatch.setenv("JR2RAY_LOCAL_BASE_URL", "http://h:1/v1")
    monkeypatch.setenv("JR2RAY_LOCAL_API_KEY", "sekrit")
    c = ProviderConfig.from_settings(load_settings(), max_tokens=7)
    assert (c.local_base_url, c.local_api_key, c.max_tokens) == ("http://h:1/v1", "sekrit", 7)


def test_registry_resolves_and_reuses_providers() -> None:
    reg = ProviderRegistry(ProviderConfig(sections={"anthropic": {"api_key": "k"}}))
    p1, name1 = reg.resolve("local/a")
    p2, name2 = reg.resolve("local/b")
    p3, _ = reg.resolve("anthropic/c")
    assert p1 is p2 and (name1, name2) == ("a", "b")
    assert isinstance(p1, OpenAICompatProvider) and isinstance(p3, AnthropicProvider)


async def test_openai_request_shape_and_usage() -> None:
    rec = Recorder(
        openai_reply(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "ask", "arguments": '{"q":"x"}'}}],
            }
        )
    )
    history = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=(ToolCall(id="t0", name="done", arguments="{}"),)),
        Message(role="tool", tool_call_id="t0", content="refused"),
    ]
    answer = await openai_provider(rec).complete(request(messages=history, thinking=False))
    body = rec.bodies[0]
    assert body["model"] == "tiny"
    assert body["messages"][0] == {"role": "system", "content": "SYS"}
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assert [t["function"]["name"] for t in body["tools"]] == ["ask", "done"]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "structured_outputs" not in body
    assert answer.tool_calls == [ToolCall(id="t1", name="ask", arguments='{"q":"x"}')]
    assert (answer.prompt_tokens, answer.cached_tokens) == (100, 64)


async def test_openai_without_usage_details() -> None:
    rec = Recorder(
        openai_reply(
            {"role": "assistant", "content": "hi"}, {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        )
    )
    answer = await openai_provider(rec).complete(request())
    assert (answer.text, answer.prompt_tokens, answer.cached_tokens) == ("hi", 5, None)
    assert "chat_template_kwargs" not in rec.bodies[0]


async def test_openai_masking_adds_extra_body_only(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[list[dict[str, Any]]] = []

    def masking_extra_body(allowed_tools: list[dict[str, Any]], bounds: Any = None) -> dict[str, Any]:
        got.append(allowed_tools)
        return {"structured_outputs": {"regex": "R"}}

    stub = types.ModuleType("jr2ray.harness.masking")
    stub.masking_extra_body = masking_extra_body  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jr2ray.harness.masking", stub)
    monkeypatch.setattr("jr2ray.harness.masking", stub, raising=False)
    rec = Recorder(openai_reply({"role": "assistant", "content": "x"}))
    provider = openai_provider(rec)
    await provider.complete(request(masked_tools=["done"]))
    await provider.complete(request())
    masked, plain = rec.bodies
    assert masked["structured_outputs"] == {"regex": "R"}
    assert [t["function"]["name"] for t in got[0]] == ["done"]
    assert got[0][0] == plain["tools"][1]
    assert json.dumps(masked["tools"]) == json.dumps(plain["tools"])
    assert json.dumps(masked["messages"]) == json.dumps(plain["messages"])


async def test_openai_http_error_is_a_provider_error() -> None:
    rec = Recorder({"error": {"message": "boom"}}, status=503)
    with pytest.raises(ProviderError) as info:
        await openai_provider(rec).complete(request())
    assert info.value.status_code == 503 and info.value.provider == "local"


def anthropic_provider(rec: Recorder, **kw: Any) -> AnthropicProvider:
    client = anthropic.AsyncAnthropic(
        api_key="k",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(rec)),
        base_url="http://fake",
    )
    return AnthropicProvider(client=client, **kw)


ANTHROPIC_REPLY = {
    "id": "m1",
    "type": "message",
    "role": "assistant",
    "model": "claude",
    "content": [
        {"type": "thinking", "thinking": "let me see", "signature": "sig"},
        {"type": "text", "text": "Asking."},
        {"type": "tool_use", "id": "tu1", "name": "ask", "input": {"q": "x"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 90,
    },
}


async def test_anthropic_request_shape_usage_and_replay() -> None:
    rec = Recorder(ANTHROPIC_REPLY, lib=httpx2)
    provider = anthropic_provider(rec, max_tokens=2000)
    answer = await provider.complete(request(thinking="low", masked_tools=["ask"]))
    body = rec.bodies[0]
    assert body["system"] == [{"type": "text", "text": "SYS", "cache_control": {"type": "ephemeral"}}]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"} and "cache_control" not in body["tools"][0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["max_tokens"] == 2048
    assert "structured_outputs" not in body
    assert answer.text == "Asking."
    assert answer.tool_calls == [ToolCall(id="tu1", name="ask", arguments='{"q": "x"}')]
    assert (answer.prompt_tokens, answer.cached_tokens) == (1000, 900)
    # The next request replays the thinking block verbatim, as the API requires with tool use.
    history = [
        Message(role="user", content="go"),
        answer.as_message(),
        Message(role="tool", tool_call_id="tu1", content="ok"),
    ]
    await provider.complete(request(messages=history))
    replayed = rec.bodies[1]["messages"][1]["content"]
    assert replayed[0] == {"type": "thinking", "thinking": "let me see", "signature": "sig"}
    assert replayed[2] == {"type": "tool_use", "id": "tu1", "name": "ask", "input": {"q": "x"}}


async def test_anthropic_error_is_a_provider_error() -> None:
    rec = Recorder({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, status=529, lib=httpx2)
    with pytest.raises(ProviderError) as info:
        await anthropic_provider(rec).complete(request())
    assert info.value.provider == "anthropic" and info.value.status_code == 529


async def test_a_call_that_never_reached_the_server_is_a_provider_error_without_status() -> None:
    """A connection failure (no HTTP status) maps to ProviderError too, for either SDK, after the client's retries."""

    def refuse(lib: Any) -> Any:
        def handler(req: Any) -> Any:
            raise lib.ConnectError("refused", request=req)

        return handler

    local = OpenAICompatProvider(client=openai.AsyncOpenAI(
        base_url="http://fake/v1", api_key="k", max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(refuse(httpx)))))
    claude = AnthropicProvider(client=anthropic.AsyncAnthropic(
        api_key="k", base_url="http://fake", max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(refuse(httpx2)))))
    for provider, kind in ((local, "local"), (claude, "anthropic")):
        with pytest.raises(ProviderError) as info:
            await provider.complete(request())
        assert (info.value.provider, info.value.status_code) == (kind, None)
        assert isinstance(info.value.__cause__, openai.APIConnectionError if kind == "local"
                          else anthropic.APIConnectionError)


def test_the_session_key_rides_a_header_and_never_the_prompt() -> None:
    """Session affinity (S1): the conversation key goes in x-session-id; tools and messages bytes are untouched."""
    provider = OpenAICompatProvider(client=object())  # build_kwargs makes no call
    item = MenuItem(name="ask", description="Ask.", parameters={"type": "object", "properties": {}})
    base = ModelRequest(model="tiny", system="sys", tools=[item], messages=[Message(role="user", content="hi")])
    with_session = base.model_copy(update={"session": "run1:writer"})
    a, b = provider.build_kwargs(base), provider.build_kwargs(with_session)
    assert "extra_headers" not in a
    assert b["extra_headers"] == {"x-session-id": "run1:writer"}
    assert json.dumps(a["tools"]) == json.dumps(b["tools"]) and a["messages"] == b["messages"]
