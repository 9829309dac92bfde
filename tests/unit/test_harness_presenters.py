"""Presenters: byte-stable tools blocks and append-only message rendering."""

from __future__ import annotations

import json

from jr2ray.harness.presenters import (
    anthropic_messages,
    anthropic_tools,
    openai_message,
    openai_messages,
    openai_tools,
)
from jr2ray.harness.transcript import Message, ToolCall
from jr2ray.menu.models import MenuItem


def menu() -> list[MenuItem]:
    return [
        MenuItem(
            name="ask",
            description="Ask one question.",
            parameters={"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
        ),
        MenuItem(
            name="done",
            description="Finish.",
            parameters={"properties": {"notes": {"type": "string", "title": "Notes"}}, "type": "object"},
        ),
    ]


def test_openai_tools_shape_and_order() -> None:
    tools = openai_tools(menu())
    assert [t["function"]["name"] for t in tools] == ["ask", "done"]
    assert list(tools[0]) == ["type", "function"]
    assert list(tools[0]["function"]) == ["name", "description", "parameters"]
    assert tools[1]["function"]["parameters"] == menu()[1].parameters


def test_rendering_is_byte_stable_across_separately_built_menus() -> None:
    assert json.dumps(openai_tools(menu())) == json.dumps(openai_tools(menu()))
    assert json.dumps(anthropic_tools(menu())) == json.dumps(anthropic_tools(menu()))
    # A round trip through JSON (HTTP, Ray) gives the same bytes too.
    again = [MenuItem.model_validate(json.loads(m.model_dump_json())) for m in menu()]
    assert json.dumps(openai_tools(again)) == json.dumps(openai_tools(menu()))


def test_rendered_tools_are_detached_from_the_menu() -> None:
    items = menu()
    tools = openai_tools(items)
    tools[0]["function"]["parameters"]["properties"]["question"]["type"] = "integer"
    assert items[0].parameters["properties"]["question"]["type"] == "string"
    assert json.dumps(openai_tools(items)) == json.dumps(openai_tools(menu()))


def test_anthropic_tools_cache_only_the_last() -> None:
    tools = anthropic_tools(menu())
    assert "cache_control" not in tools[0]
    assert tools[-1]["cache_control"] == {"type": "ephemeral"}
    assert tools[0]["input_schema"] == menu()[0].parameters
    assert anthropic_tools([]) == []


def transcript() -> list[Message]:
    call = ToolCall(id="c1", name="ask", arguments='{"question": "q"}')
    return [
        Message(role="user", content="P\n\n<jr2-turn>\nAllowed now: ask.\n</jr2-turn>"),
        Message(role="assistant", content=None, tool_calls=(call,)),
        Message(role="tool", tool_call_id="c1", content="ask was taken."),
        Message(role="user", content="<jr2-turn>\nrestated\n</jr2-turn>"),
        Message(role="assistant", content="thinking aloud"),
    ]


def test_openai_messages() -> None:
    out = openai_messages("SYS", transcript())
    assert out[0] == {"role": "system", "content": "SYS"}
    assert out[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ask", "arguments": '{"question": "q"}'}}],
    }
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": "ask was taken."}
    assert out[5] == {"role": "assistant", "content": "thinking aloud"}
    assert openai_message(Message(role="assistant")) == {"role": "assistant", "content": ""}


def test_openai_messages_only_grow() -> None:
    msgs = transcript()
    for n in range(1, len(msgs)):
        shorter = json.dumps(openai_messages("S", msgs[:n]))[:-1]
        assert json.dumps(openai_messages("S", msgs[: n + 1])).startswith(shorter)


def test_anthropic_messages_merge_tool_results_with_following_text() -> None:
    out = anthropic_messages(transcript())
    assert [m["role"] for m in out] == ["user", "assistant", "user", "assistant"]
    assert out[1]["content"] == [{"type": "tool_use", "id": "c1", "name": "ask", "input": {"question": "q"}}]
    assert out[2]["content"][0] == {"type": "tool_result", "tool_use_id": "c1", "content": "ask was taken."}
    assert out[2]["content"][1]["type"] == "text"
    assert out[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sum("cache_control" in b for m in out for b in m["content"]) == 1


def test_anthropic_assistant_replays_its_own_blocks() -> None:
    blocks = [{"type": "thinking", "thinking": "hm", "signature": "sig"}, {"type": "text", "text": "x"}]
    out = anthropic_messages(
        [Message(role="assistant", content="x", extra={"anthropic_content": blocks})], cache_last=False
    )
    assert out == [{"role": "assistant", "content": blocks}]


def test_anthropic_drops_an_empty_assistant_answer() -> None:
    out = anthropic_messages(
        [Message(role="user", content="a"), Message(role="assistant"), Message(role="user", content="b")],
        cache_last=False,
    )
    assert out == [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
