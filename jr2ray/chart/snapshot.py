"""Immutable snapshots of a running chart, with a plain-JSON persisted form."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .effects import ChildRecord, TimerRecord
from .errors import RestoreError
from .event import Event

if TYPE_CHECKING:
    from .nodes import Machine, StateNode


def _value_of(node: StateNode, config: frozenset[StateNode]) -> Any:
    if node.type == "compound":
        for child in node.children.values():
            if child in config:
                if child.type in ("atomic", "final"):
                    return child.key
                return {child.key: _value_of(child, config)}
        return {}
    if node.type == "parallel":
        out: dict[str, Any] = {}
        for child in node.children.values():
            if child.type == "history":
                continue
            if child in config:
                out[child.key] = {} if child.type in ("atomic", "final") else _value_of(child, config)
        return out
    return {}


def _paths_of_value(value: Any, prefix: str) -> list[str]:
    if isinstance(value, str):
        return [f"{prefix}.{value}" if prefix else value]
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            p = f"{prefix}.{k}" if prefix else str(k)
            out.append(p)
            out.extend(_paths_of_value(v, p))
    return out


class Snapshot:
    """One moment of a Machine. Never mutated: a transition returns a new one."""

    __slots__ = ("machine", "config", "entered", "context", "status", "output", "error", "history", "children",
                 "timers", "seq", "_value", "_paths")

    def __init__(self, machine: Machine, config: Iterable[StateNode], context: dict[str, Any], status: str = "active",
                 output: Any = None, error: Any = None, history: dict[str, tuple[str, ...]] | None = None,
                 children: dict[str, ChildRecord] | None = None, timers: dict[str, TimerRecord] | None = None,
                 seq: int = 0) -> None:
        self.machine = machine
        # `config` is for membership; `entered` keeps the order the nodes were entered in (a set gives document
        # order), which decides the order of eventless transitions and of regions, as xstate's `_nodes` does.
        if isinstance(config, (set, frozenset)):
            self.entered: tuple[StateNode, ...] = tuple(sorted(config, key=lambda n: n.order))
        else:
            self.entered = tuple(config)
        self.config: frozenset[StateNode] = frozenset(self.entered)
        self.context = context
        self.status = status
        self.output = output
        self.error = error
        self.history = history or {}
        self.children = children or {}
        self.timers = timers or {}
        self.seq = seq
        self._value: Any = None
        self._paths: tuple[str, ...] | None = None

    @property
    def value(self) -> Any:
        if self._value is None:
            self._value = _value_of(self.machine.root, self.config)
        return self._value

    @property
    def active_paths(self) -> tuple[str, ...]:
        if self._paths is None:
            self._paths = tuple(n.path for n in sorted(self.config, key=lambda n: n.order))
        return self._paths

    def matches(self, value: Any) -> bool:
        """True when the given state value (a dotted path or a value dict) is active."""
        root = self.machine.root.path
        if isinstance(value, str):
            paths = [value]
        else:
            paths = _paths_of_value(value, "")
        for p in paths:
            node = self.machine.by_path.get(f"{root}.{p}")
            if node is None or node not in self.config:
                return False
        return True

    def has_tag(self, tag: str) -> bool:
        return any(tag in n.tags for n in self.config)

    def can(self, event: Event | Mapping[str, Any] | str) -> bool:
        from .algorithm import can

        return can(self, event)

    def with_(self, **changes: Any) -> Snapshot:
        fields = {k: getattr(self, k) for k in ("context", "status", "output", "error", "history", "children",
                                                  "timers", "seq")}
        fields["config"] = self.entered
        fields.update(changes)
        return Snapshot(self.machine, **fields)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (C9): value, context, status, output, history, children with input, pending timers."""
        return {
            "machine": self.machine.id,
            "value": self.value,
            "active": list(self.active_paths),
            "entered": [n.path for n in self.entered],
            "context": copy.deepcopy(self.context),
            "status": self.status,
            "output": copy.deepcopy(self.output),
            "error": _jsonable_error(self.error),
            "history": {k: list(v) for k, v in self.history.items()},
            "children": {k: c.to_json() for k, c in self.children.items()},
            "timers": {k: t.to_json() for k, t in self.timers.items()},
            "seq": self.seq,
        }

    def __repr__(self) -> str:
        return f"<Snapshot {self.machine.id} {self.value!r} {self.status}>"


def _jsonable_error(err: Any) -> Any:
    if err is None or isinstance(err, (str, int, float, bool, dict, list)):
        return err
    return {"name": type(err).__name__, "message": str(err)}


def restore(machine: Machine, data: Mapping[str, Any]) -> Snapshot:
    """Rebuild a Snapshot from `to_json()`; refuses states the machine does not have."""
    config: dict[StateNode, None] = {}
    active = list(data.get("active", []))
    entered = data.get("entered")
    # Entry order when it was persisted (older snapshots have only `active`, in document order).
    if entered:
        in_active, in_entered = set(active), set(entered)
        ordered = [p for p in entered if p in in_active] + [p for p in active if p not in in_entered]
    else:
        ordered = active
    for p in ordered:
        node = machine.by_path.get(p)
        if node is None:
            raise RestoreError(f"the persisted state {p!r} is not in machine {machine.id!r}")
        config[node] = None
    if not config and data.get("status", "active") == "active":
        raise RestoreError("a persisted active snapshot has no active states")
    return Snapshot(
        machine,
        tuple(config),
        copy.deepcopy(dict(data.get("context") or {})),
        data.get("status", "active"),
        copy.deepcopy(data.get("output")),
        data.get("error"),
        {k: tuple(v) for k, v in (data.get("history") or {}).items()},
        {k: ChildRecord.from_json(v) for k, v in (data.get("children") or {}).items()},
        {k: TimerRecord.from_json(v) for k, v in (data.get("timers") or {}).items()},
        int(data.get("seq", 0)),
    )
