"""Guards: callables, named guards with params, and the combinators not_, and_, or_, state_in."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .callables import Bound, bind, describe
from .errors import ChartConfigError

if TYPE_CHECKING:
    from .nodes import StateNode

GuardEval = Callable[["Guard", dict[str, Any]], bool]


class Guard:
    """A prepared guard. `check` evaluates it; `evaluate` lets a caller wrap each leaf (payload-blind reading)."""

    label = "guard"

    def check(self, scope: dict[str, Any], leaf: GuardEval) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError


class FnGuard(Guard):
    def __init__(self, bound: Bound, params: Any = None, label: str | None = None) -> None:
        self.bound = bound
        self.params = params
        self.label = label or bound.label

    def check(self, scope: dict[str, Any], leaf: GuardEval) -> bool:
        return leaf(self, scope)

    def call(self, scope: dict[str, Any]) -> bool:
        if self.params is not None:
            scope = {**scope, "params": self.params}
        return bool(self.bound(scope))


class NotGuard(Guard):
    def __init__(self, inner: Guard) -> None:
        self.inner = inner
        self.label = f"not({inner.label})"

    def check(self, scope: dict[str, Any], leaf: GuardEval) -> bool:
        return not self.inner.check(scope, leaf)


class AndGuard(Guard):
    def __init__(self, parts: list[Guard]) -> None:
        self.parts = parts
        self.label = "and(" + ", ".join(p.label for p in parts) + ")"

    def check(self, scope: dict[str, Any], leaf: GuardEval) -> bool:
        return all(p.check(scope, leaf) for p in self.parts)


class OrGuard(Guard):
    def __init__(self, parts: list[Guard]) -> None:
        self.parts = parts
        self.label = "or(" + ", ".join(p.label for p in parts) + ")"

    def check(self, scope: dict[str, Any], leaf: GuardEval) -> bool:
        return any(p.check(scope, leaf) for p in self.parts)


class StateInGuard(Guard):
    def __init__(self, ref: str, node: StateNode | None = None) -> None:
        self.ref = ref
        self.node = node
        self.label = f"state_in({ref})"

    def check(self, scope: dict[str, Any], leaf: GuardEval) -> bool:
        config = scope.get("_config")
        return self.node is not None and config is not None and self.node in config


# Unprepared forms, as written in configs.
class GuardSpec:
    pass


class _Not(GuardSpec):
    def __init__(self, g: Any) -> None:
        self.g = g


class _And(GuardSpec):
    def __init__(self, gs: list[Any]) -> None:
        self.gs = list(gs)


class _Or(GuardSpec):
    def __init__(self, gs: list[Any]) -> None:
        self.gs = list(gs)


class _StateIn(GuardSpec):
    def __init__(self, ref: str) -> None:
        self.ref = ref


def not_(guard: Any) -> GuardSpec:
    return _Not(guard)


def and_(guards: list[Any]) -> GuardSpec:
    return _And(guards)


def or_(guards: list[Any]) -> GuardSpec:
    return _Or(guards)


def state_in(ref: str) -> GuardSpec:
    return _StateIn(ref)


def prepare_guard(spec: Any, where: str, named: Mapping[str, Any],
                  resolve_state: Callable[[str], StateNode | None]) -> Guard:
    """Turn a config guard into a prepared Guard, refusing what cannot work (C7)."""
    if isinstance(spec, Guard):
        return spec
    if isinstance(spec, _Not):
        return NotGuard(prepare_guard(spec.g, where, named, resolve_state))
    if isinstance(spec, _And):
        return AndGuard([prepare_guard(g, where, named, resolve_state) for g in spec.gs])
    if isinstance(spec, _Or):
        return OrGuard([prepare_guard(g, where, named, resolve_state) for g in spec.gs])
    if isinstance(spec, _StateIn):
        node = resolve_state(spec.ref)
        if node is None:
            raise ChartConfigError(f"{where}: state_in names no state: {spec.ref!r}")
        return StateInGuard(spec.ref, node)
    if isinstance(spec, str) or isinstance(spec, Mapping):
        name = spec if isinstance(spec, str) else spec.get("type")
        params = None if isinstance(spec, str) else spec.get("params")
        if name not in named:
            raise ChartConfigError(f"{where}: unknown guard {name!r}")
        impl = named[name]
        if isinstance(impl, (GuardSpec, Guard)):
            inner = prepare_guard(impl, where, named, resolve_state)
            if params is None:
                return inner
            if isinstance(inner, FnGuard):
                return FnGuard(inner.bound, params, str(name))
            return inner
        if not callable(impl):
            raise ChartConfigError(f"{where}: guard {name!r} is not callable")
        return FnGuard(bind(impl, where, f"guard {name!r}"), params, str(name))
    if callable(spec):
        return FnGuard(bind(spec, where, "guard"), None, describe(spec))
    raise ChartConfigError(f"{where}: guard must be callable, a name or a combinator, got {spec!r}")
