"""The effector registry: how the Run starts each Effect kind, keyed by the slot spec's `kind`.

A new Effect kind is one module that defines its spec (a frozen dataclass subclassing `EffectSpec`) and its
effector, and calls `register` once. The Run never names a kind.
"""

from __future__ import annotations

from typing import Any, Protocol

from jr2ray.authoring import EffectSpec
from jr2ray.chart import bind


class UnknownEffectKind(LookupError):
    """No effector is registered for an Effect slot's kind."""


class Effector(Protocol):
    """Runs one Effect kind. `resolve` fixes the concrete call when the Effect starts, so the journal can say
    exactly what ran; `run` performs it and returns its output, or raises on timeout or transport error."""

    def resolve(self, spec: Any, context: dict[str, Any], input: Any) -> dict[str, Any]: ...

    async def run(self, call: dict[str, Any]) -> dict[str, Any]: ...


_EFFECTORS: dict[str, Effector] = {}


def register(kind: str, effector: Effector) -> None:
    """Make `kind` runnable. Registering a second effector for a kind is a mistake, so it raises."""
    held = _EFFECTORS.get(kind)
    if held is not None and held is not effector:
        raise ValueError(f"Effect kind {kind!r} is already registered to {held!r}")
    _EFFECTORS[kind] = effector


def effector_for(spec: EffectSpec) -> Effector:
    try:
        return _EFFECTORS[spec.kind]
    except KeyError:
        raise UnknownEffectKind(
            f"no effector is registered for Effect kind {spec.kind!r} (registered: {sorted(_EFFECTORS)})") from None


def registered_kinds() -> list[str]:
    return sorted(_EFFECTORS)


def resolve_value(value: Any, context: dict[str, Any], where: str) -> Any:
    """An Effect argument as written, or, when it is a callable, its value for this context."""
    if callable(value):
        return bind(value, where, "effect argument")({"context": context})
    return value
