"""The Menu rendered as a provider's tools block. Byte-stable: the same items give the same bytes every time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from .models import MenuItem

Dialect = Literal["openai", "anthropic"]
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}


def plain_json(value: Any) -> Any:
    """A detached JSON-plain copy that keeps key order, so no later mutation elsewhere can change our bytes."""
    return json.loads(json.dumps(value))


def openai_tools(items: Sequence[MenuItem]) -> list[dict[str, Any]]:
    """OpenAI Chat Completions `tools`: one function per item, in Menu order."""
    return [{"type": "function",
             "function": {"name": i.name, "description": i.description, "parameters": plain_json(i.parameters)}}
            for i in items]


def anthropic_tools(items: Sequence[MenuItem]) -> list[dict[str, Any]]:
    """Anthropic `tools`, with `cache_control` on the last one so the tools block is a cache breakpoint."""
    tools: list[dict[str, Any]] = [{"name": i.name, "description": i.description,
                                    "input_schema": plain_json(i.parameters)} for i in items]
    if tools:
        tools[-1]["cache_control"] = dict(EPHEMERAL)
    return tools


def render_tools(items: Sequence[MenuItem], dialect: Dialect = "openai") -> list[dict[str, Any]]:
    if dialect == "openai":
        return openai_tools(items)
    if dialect == "anthropic":
        return anthropic_tools(items)
    raise ValueError(f"unknown tools dialect {dialect!r}; use 'openai' or 'anthropic'")


def tools_bytes(items: Sequence[MenuItem], dialect: Dialect = "openai") -> bytes:
    """The canonical bytes of a tools block, for asserting it never changes."""
    return json.dumps(render_tools(items, dialect), separators=(",", ":"), ensure_ascii=False).encode()
