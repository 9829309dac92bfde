"""The effector registry: how the Run starts each Effect kind, keyed by the slot spec's `kind`.

A new Effect kind is one module that defines its spec (a frozen dataclass subclassing `EffectSpec`) and its
effector, and calls `register` once. The Run never names a kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from jr2ray.authoring import EffectSpec
from jr2ray.chart import bind
from jr2ray.settings import Settings


class UnknownEffectKind(LookupError):
    """No effector is registered for an Effect slot's kind."""


class EffectFailed(RuntimeError):
    """The Effect ran and failed (a command's exit code, a refused host...): `detail` joins the onError payload."""

    def __init__(self, message: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.detail = detail or {}


class Effector(Protocol):
    """Runs one Effect kind. `resolve` fixes the concrete call when the Effect starts, so the journal can say
    exactly what ran (`workdir` is the run's own directory, not yet created); `run` performs it with the settings of
    the process hosting the run (an allow-list...) and returns its output, or raises on timeout or transport error
    (`EffectFailed` to add fields to the onError payload)."""

    def resolve(self, spec: Any, context: dict[str, Any], input: Any, workdir: Path) -> dict[str, Any]: ...

    async def run(self, call: dict[str, Any], settings: Settings) -> dict[str, Any]: ...


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


def params_of(spec: Any, input: Any, where: str) -> dict[str, Any]:
    """The invoke input as the Effect's declared parameters. Anything else would rewrite the author's call, so it
    is refused (the Run routes the ValueError to onError)."""
    declared = tuple(getattr(spec, "params", ()))
    if input is None:
        return {}
    if not isinstance(input, Mapping):
        raise TypeError(f"{where}: input must be a mapping of the declared parameters {list(declared)}, "
                         f"got {type(input).__name__}")
    bad = sorted(set(map(str, input)) - set(declared))
    if bad:
        raise ValueError(f"{where}: input key(s) {bad} are not declared parameters (params={list(declared)})")
    return dict(input)


def resolve_value(value: Any, context: dict[str, Any], where: str, params: dict[str, Any] | None = None) -> Any:
    """An Effect argument as written, or, when it is a callable, its value for this context and these declared
    parameters (a callable reads them as `input`)."""
    if callable(value):
        return bind(value, where, "effect argument")({"context": context, "input": params or {}})
    return value
