"""Masking (H11): a regex that only admits hermes tool calls to the Allowed picks.

Why a regex and not `tools`/`tool_choice`: the prompt and the tools block must stay byte-identical (that is what keeps
vLLM's prefix cache hitting), so narrowing happens only in decoding, through vLLM structured outputs. The constraint
follows each event's own schema: a string gets a `maxLength` only where the schema has one, so a real model's
2,000-character note can still be produced. A random-weight model needs hard bounds (open strings, numbers and arrays
let it wander until `max_tokens`); those caps are `Bounds`, set by the model's profile (the tiny model's
`serve/config/cpu.yaml`), never by default. Strings may not contain "</" either: a "</tool_call>"
inside an argument would cut the hermes parser's match short.

Pure: no model client, no Ray. `outlines_core` (shipped with vLLM) builds each arguments regex from its JSON schema.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

WHITESPACE_PATTERN = r"[ ]?"
"""At most one space between JSON tokens: free whitespace lets a random model emit blanks forever."""

CALL_OPEN = "<tool_call>\n"
CALL_CLOSE = "}\n</tool_call>"

_REGEX_META = set(r"\.^$|?*+()[]{}")


class ToolSpec(BaseModel):
    """One tool as masking sees it: a name and the JSON schema of its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Bounds(BaseModel):
    """Caps a model's profile may add where a schema leaves a length open, so a constrained random model terminates.

    Each None (the default) means "the schema's own": no cap is added.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_string: int | None = Field(default=None, ge=1)
    max_items: int | None = Field(default=None, ge=0)
    max_digits: int | None = Field(default=None, ge=1)

    @property
    def open(self) -> bool:
        """True when no cap is set: the regex is built from the schema alone."""
        return self.max_string is None and self.max_items is None and self.max_digits is None


def escape_literal(text: str) -> str:
    """Escape regex metacharacters in a literal, minimally, so Python `re` and vLLM's grammar backends both read it."""
    out: list[str] = []
    for ch in text:
        if ch in _REGEX_META:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    return "".join(out)


MAX_ENUMERATED_RANGE = 64
"""An integer range this small is decoded as its values, so decoding keeps its minimum and maximum."""
_RANGE_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _integer_range(node: dict[str, Any]) -> tuple[int, int] | None:
    """The closed range of an integer schema bounded on both sides, if it is small enough to enumerate.

    outlines_core's regex for an integer or a number ignores `minimum`/`maximum` (a regex cannot say "at most 300"
    in general), so a bound would be lost in decoding. A small integer range is kept exactly as the alternatives of
    its values; any other bound is left to the Run's schema check (D4), which refuses an out-of-range pick with a
    receipt the model reads.
    """
    if node.get("type") != "integer" or "enum" in node or "const" in node:
        return None
    lo, hi = node.get("minimum"), node.get("maximum")
    if isinstance(node.get("exclusiveMinimum"), (int, float)):
        ex = math.floor(node["exclusiveMinimum"]) + 1
        lo = ex if lo is None else max(lo, ex)
    if isinstance(node.get("exclusiveMaximum"), (int, float)):
        ex = math.ceil(node["exclusiveMaximum"]) - 1
        hi = ex if hi is None else min(hi, ex)
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
        return None
    first, last = math.ceil(lo), math.floor(hi)
    return (first, last) if 0 <= last - first < MAX_ENUMERATED_RANGE else None


def _bound_schema(node: Any, bounds: Bounds) -> Any:
    """Return a copy of a JSON schema with the profile's caps on every open string and array (none when unset), and
    each small integer range as its values (see `_integer_range`)."""
    if isinstance(node, list):
        return [_bound_schema(item, bounds) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _bound_schema(value, bounds) for key, value in node.items()}
    if (span := _integer_range(out)) is not None:
        kept = {k: v for k, v in out.items() if k not in (*_RANGE_KEYS, "type")}
        return {**kept, "enum": list(range(span[0], span[1] + 1))}
    types = out.get("type")
    type_set = set(types) if isinstance(types, list) else {types}
    cap = bounds.max_string
    if cap is not None and "string" in type_set and "enum" not in out and "const" not in out and "format" not in out:
        out["maxLength"] = min(int(out.get("maxLength", cap)), cap)
        out["minLength"] = min(int(out.get("minLength", 0)), out["maxLength"])
    if bounds.max_items is not None and "array" in type_set:
        out["maxItems"] = min(int(out.get("maxItems", bounds.max_items)), bounds.max_items)
        out["minItems"] = min(int(out.get("minItems", 0)), out["maxItems"])
    return out


# outlines_core's JSON string character (anything but a quote, a backslash or a control character) ...
_STRING_CHAR = r'[^"\\\x00-\x1F\x7F-\x9F]'
# ... and ours: the same, except that "<" may not be followed by "/". A string holding "</tool_call>" would end the
# hermes parser's match early and the call would come back as plain content (seen with a random model).
_SAFE_STRING_CHAR = r'[^"\\<\x00-\x1F\x7F-\x9F]|<[^/"\\<\x00-\x1F\x7F-\x9F]'


def _guard_strings(rx: str) -> str:
    """Keep a closing tag out of JSON strings in a built regex."""
    return rx.replace(_STRING_CHAR, _SAFE_STRING_CHAR)


def _bound_numbers(rx: str, bounds: Bounds) -> str:
    """Cap digit runs in a built regex: outlines_core writes integers and fractions as open `[0-9]*` / `[0-9]+`."""
    n = bounds.max_digits
    if n is not None:
        rx = rx.replace("[0-9]*", f"[0-9]{{0,{n - 1}}}")
        rx = rx.replace("[0-9]+", f"[0-9]{{1,{n}}}")
    if bounds.max_items is not None:
        rx = rx.replace("{0,}", f"{{0,{bounds.max_items}}}")
    return rx


def arguments_regex(schema: Mapping[str, Any], bounds: Bounds | None = None) -> str:
    """The regex for one tool's arguments object, from its JSON schema (pydantic `$defs`/`$ref` included)."""
    from outlines_core.json_schema import build_regex_from_schema

    bounds = bounds or Bounds()
    bounded = _bound_schema(copy.deepcopy(dict(schema)), bounds)
    if not bounded.get("properties") and bounded.get("type", "object") == "object":
        # An empty-object schema: outlines would admit arbitrary extra keys; a pick with no fields has none.
        return r"\{\}"
    rx = build_regex_from_schema(json.dumps(bounded), whitespace_pattern=WHITESPACE_PATTERN)
    return _guard_strings(_bound_numbers(rx, bounds))


def _as_spec(tool: ToolSpec | Mapping[str, Any]) -> ToolSpec:
    """Accept `{name, parameters}`, OpenAI `{"type": "function", "function": {...}}`, or a ToolSpec."""
    if isinstance(tool, ToolSpec):
        return tool
    data = dict(tool)
    if "function" in data and isinstance(data["function"], Mapping):
        data = dict(data["function"])
    return ToolSpec(name=data["name"], parameters=dict(data.get("parameters") or {"type": "object", "properties": {}}))


def call_regex(tool: ToolSpec | Mapping[str, Any], bounds: Bounds | None = None) -> str:
    """One hermes call: `<tool_call>\\n{"name": "<name>", "arguments": <args>}\\n</tool_call>`."""
    spec = _as_spec(tool)
    head = CALL_OPEN + '{"name": "' + spec.name + '", "arguments": '
    return escape_literal(head) + arguments_regex(spec.parameters, bounds) + escape_literal(CALL_CLOSE)


def build_tool_call_regex(tools: Sequence[ToolSpec | Mapping[str, Any]], bounds: Bounds | None = None) -> str:
    """A regex that admits exactly one call to one of `tools` (in the given order), and nothing else.

    Raises ValueError on an empty list: a mask with no alternatives would forbid every output.
    """
    if not tools:
        raise ValueError("masking needs at least one allowed tool")
    alternatives = [call_regex(t, bounds) for t in tools]
    if len(alternatives) == 1:
        return alternatives[0]
    return "|".join(f"({alt})" for alt in alternatives)


def select_tools(menu: Iterable[ToolSpec | Mapping[str, Any]], allowed: Iterable[str]) -> list[ToolSpec]:
    """The Menu entries whose names are in `allowed`, kept in Menu order."""
    wanted = set(allowed)
    return [spec for spec in (_as_spec(t) for t in menu) if spec.name in wanted]


def masking_extra_body(
    allowed_tools: Sequence[ToolSpec | Mapping[str, Any]], bounds: Bounds | None = None
) -> dict[str, Any]:
    """The `extra_body` for an OpenAI-compatible vLLM request that masks decoding to `allowed_tools`.

    An empty list returns `{}`: with nothing allowed there is nothing to mask toward, and the request runs unmasked.
    """
    if not allowed_tools:
        return {}
    return {"structured_outputs": {"regex": build_tool_call_regex(allowed_tools, bounds)}}
