"""Presenters: map Menu items to a provider's tools API and place the transcript in its message format.

Rendering is byte-stable: the same items give the same dict key order every time, because the prompt caches of
both providers start with the tools block (M2, H1). A presenter never words anything; texts come from
`jr2ray.menu.texts`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from jr2ray.harness.transcript import Message, ToolCall
from jr2ray.menu.render import EPHEMERAL, plain_json, anthropic_tools, openai_tools

# The tools block is rendered by the Menu layer, once for every caller (machine.tools() included).
__all__ = ["EPHEMERAL", "anthropic_tools", "openai_tools"]


def _openai_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def openai_message(message: Message) -> dict[str, Any]:
    """One transcript entry in Chat Completions form. A pure function of the entry, so history never rewrites."""
    if message.role == "user":
        return {"role": "user", "content": message.content or ""}
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content or ""}
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [_openai_call(c) for c in message.tool_calls]
    elif message.content is None:
        out["content"] = ""
    return out


def openai_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The whole `messages` array: the system prompt first, then the transcript."""
    return [{"role": "system", "content": system}, *(openai_message(m) for m in messages)]


def _tool_input(call: ToolCall) -> dict[str, Any]:
    try:
        value = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _anthropic_assistant(message: Message) -> list[dict[str, Any]]:
    replay = message.extra.get("anthropic_content")
    if replay:
        blocks: list[dict[str, Any]] = plain_json(replay)
        return blocks
    blocks = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call)})
    return blocks


def anthropic_messages(messages: Sequence[Message], *, cache_last: bool = True) -> list[dict[str, Any]]:
    """Anthropic `messages`: consecutive user and tool entries merge into one user turn, as the API requires.

    With `cache_last`, the final block carries `cache_control`, so each request caches the conversation so far.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            blocks = _anthropic_assistant(message)
            if blocks:
                out.append({"role": "assistant", "content": blocks})
            continue
        if message.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content or "",
            }
        else:
            block = {"type": "text", "text": message.content or ""}
        if out and out[-1]["role"] == "user":
            out[-1]["content"].append(block)
        else:
            out.append({"role": "user", "content": [block]})
    if cache_last and out:
        out[-1]["content"][-1]["cache_control"] = dict(EPHEMERAL)
    return out
