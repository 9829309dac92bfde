"""Name injection for user callables (A1): a function gets only the keyword names it declares."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ChartConfigError

INJECTABLE: frozenset[str] = frozenset({"context", "event", "input", "chain", "params", "self"})


@dataclass(frozen=True, slots=True)
class Bound:
    """A user callable with its declared parameter names, inspected once at load."""

    fn: Callable[..., Any]
    names: tuple[str, ...]
    takes_all: bool
    label: str

    def __call__(self, scope: Mapping[str, Any]) -> Any:
        if self.takes_all:
            return self.fn(**{k: scope.get(k) for k in INJECTABLE})
        names = self.names
        if not names:
            return self.fn()
        if len(names) == 1:
            n = names[0]
            return self.fn(**{n: scope.get(n)})
        return self.fn(**{n: scope.get(n) for n in names})


def describe(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "<lambda>" if name == "<lambda>" else name


def bind(fn: Any, where: str, what: str) -> Bound:
    """Inspect `fn` once; refuse a parameter that is not an injectable name."""
    if isinstance(fn, Bound):
        return fn
    if not callable(fn):
        raise ChartConfigError(f"{where}: {what} must be callable, got {fn!r}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ChartConfigError(f"{where}: cannot inspect {what} {describe(fn)}: {exc}") from exc
    names: list[str] = []
    takes_all = False
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            takes_all = True
            continue
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if p.name not in INJECTABLE:
            raise ChartConfigError(
                f"{where}: {what} {describe(fn)} takes parameter {p.name!r}; "
                f"callables may take only {sorted(INJECTABLE)}"
            )
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ChartConfigError(f"{where}: {what} {describe(fn)} takes {p.name!r} positionally; use a keyword")
        names.append(p.name)
    return Bound(fn, tuple(names), takes_all, describe(fn))
