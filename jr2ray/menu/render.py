"""The Menu rendered as a provider's tools block. Byte-stable: the same items give the same bytes every time.

Tool formats are a registry: the two built-in ones are here (both providers' prompt caches start with this block),
and a provider with a format of its own hands a `ToolFormat` to `register_provider`, which registers it here. The
format a model's Menu is rendered in follows from its prefix (`jr2ray.authoring.providers`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jr2ray.authoring.providers import tool_format_of

from .models import MenuItem

Dialect = str
"""A tool format's name: `openai`, `anthropic`, or any registered with `register_tool_format`."""
ToolsRenderer = Callable[[Sequence[MenuItem]], list[dict[str, Any]]]
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


@dataclass(frozen=True)
class ToolFormat:
    """A named way to render the Menu as a tools block. `render` must be pure and byte-stable (M2, H10)."""

    name: str
    render: ToolsRenderer


OPENAI = ToolFormat("openai", openai_tools)
ANTHROPIC = ToolFormat("anthropic", anthropic_tools)
_FORMATS: dict[str, ToolFormat] = {f.name: f for f in (OPENAI, ANTHROPIC)}


def register_tool_format(fmt: ToolFormat) -> None:
    """Make `fmt.name` renderable. Another renderer under a name already taken is a mistake, so it raises."""
    held = _FORMATS.get(fmt.name)
    if held is not None and held.render is not fmt.render:
        raise ValueError(f"tool format {fmt.name!r} is already registered to {held.render!r}")
    _FORMATS[fmt.name] = fmt


def tool_formats() -> list[str]:
    return sorted(_FORMATS)


def render_tools(items: Sequence[MenuItem], dialect: Dialect = "openai") -> list[dict[str, Any]]:
    fmt = _FORMATS.get(dialect)
    if fmt is None:
        raise ValueError(f"unknown tools dialect {dialect!r}; use one of {tool_formats()}")
    return fmt.render(items)


def tools_bytes(items: Sequence[MenuItem], dialect: Dialect = "openai") -> bytes:
    """The canonical bytes of a tools block, for asserting it never changes."""
    return json.dumps(render_tools(items, dialect), separators=(",", ":"), ensure_ascii=False).encode()


def model_tools(items: Sequence[MenuItem], model: str) -> list[dict[str, Any]]:
    """The tools block in the format of `model`'s provider (its prefix names it)."""
    return render_tools(items, tool_format_of(model))
