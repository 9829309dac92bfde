"""The mutable working state of one macrostep. Snapshots stay immutable; a Work is thrown away after use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .effects import ChildRecord, TimerRecord
from .event import Event

if TYPE_CHECKING:
    from .nodes import StateNode


@dataclass(slots=True)
class Work:
    context: dict[str, Any]
    event: Event
    now_ms: float
    extras: dict[str, Any]
    timers: dict[str, TimerRecord]
    children: dict[str, ChildRecord]
    history: dict[str, tuple[str, ...]]
    seq: int
    config: dict[StateNode, None]  # the active nodes as an ordered set, in the order they were entered
    effects: list[Any] = field(default_factory=list)
    internal_queue: list[Event] = field(default_factory=list)
    took: list[Any] = field(default_factory=list)
    owner: str | None = None  # path of the state whose actions run now
    microstep: int = 0

    def scope(self, params: Any = None) -> dict[str, Any]:
        """The names a user callable may ask for (A1)."""
        s: dict[str, Any] = {"context": self.context, "event": self.event, "params": params,
                             "input": self.extras.get("input"), "chain": self.extras.get("chain")}
        return s

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq
