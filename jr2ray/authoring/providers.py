"""Model prefixes: the provider kinds a `model` Dial may name (`<kind>/<model name>`), each with the tool format
its Menu is rendered in.

Pure data, filled from above: the harness's `register_provider` declares each kind here, so the authoring and Menu
layers learn a new provider's prefix and tool format without importing the harness, and without an edit here.
"""

from __future__ import annotations

_PREFIXES: dict[str, str] = {}


def declare_model_prefix(prefix: str, tool_format: str) -> None:
    """Make `<prefix>/...` models known, rendered in `tool_format`. A second, different format for one prefix is a
    mistake, so it raises."""
    if not prefix or "/" in prefix:
        raise ValueError(f"model prefix {prefix!r} must be a non-empty word without '/'")
    held = _PREFIXES.get(prefix)
    if held is not None and held != tool_format:
        raise ValueError(f"model prefix {prefix!r} is already declared with tool format {held!r}")
    _PREFIXES[prefix] = tool_format


def model_prefixes() -> dict[str, str]:
    """Each declared prefix with its tool format, sorted by prefix."""
    return dict(sorted(_PREFIXES.items()))


def model_prefix(model: str) -> str:
    """The provider kind a `model` Dial names; raises ValueError unless it is `<kind>/<model name>`."""
    prefix, sep, name = model.partition("/") if isinstance(model, str) else ("", "", "")
    if not (prefix and sep and name):
        known = ", ".join(f"'{p}/...'" for p in model_prefixes()) or "none declared yet"
        raise ValueError(f"model must be '<provider>/<model name>' (providers: {known}), got {model!r}")
    return prefix


def tool_format_of(model: str) -> str:
    """The tool format of `model`'s provider; raises ValueError naming the prefix when no provider declared it."""
    prefix = model_prefix(model)
    fmt = _PREFIXES.get(prefix)
    if fmt is None:
        raise ValueError(f"model {model!r}: no provider declares the prefix {prefix!r} "
                         f"(declared: {sorted(_PREFIXES)}); is its module imported?")
    return fmt


__all__ = ["declare_model_prefix", "model_prefix", "model_prefixes", "tool_format_of"]
