"""What a pure transition asks its actor to do. Plain data, each kind executed by its own `execute`.

As in xstate, an action is resolved inside the pure transition (`actions.py`) and the effect it queues is executed
by the actor after the macrostep. Each effect that runs here carries its own `execute(actor)`, so the Interpreter
dispatches through the effect, never by its type; `reaches_out` says whether executing it reaches anything outside
the interpreter (which a commit hook may want to know before it runs). Timers and children are reconciled from the
snapshot instead, and effects of other layers (a Run's answers) are read by their commit hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from .event import Event


class EffectActor(Protocol):
    """What an executed effect may do to the actor that runs it (the Interpreter)."""

    def action_failed(self, name: str, exc: Exception) -> None: ...

    def record_log(self, value: Any) -> None: ...

    def deliver_to_child(self, target: str, event: Event) -> None: ...

    def deliver_to_parent(self, event: Event) -> None: ...


@dataclass(frozen=True, slots=True)
class TimerRecord:
    """A pending delayed event, persisted with its absolute deadline so a restore still fires it."""

    id: str
    event: dict[str, Any]
    deadline_ms: float
    target: str = "self"  # "self" or a child id
    state: str | None = None  # path of the state that owns it (after timers), if any

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "event": self.event, "deadline_ms": self.deadline_ms, "target": self.target,
                "state": self.state}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TimerRecord:
        return cls(data["id"], data["event"], float(data["deadline_ms"]), data.get("target", "self"),
                   data.get("state"))


@dataclass(frozen=True, slots=True)
class ChildRecord:
    """An invoked child as the snapshot knows it: enough to start it again after a restore."""

    id: str
    src: str
    input: Any
    state: str  # path of the invoking state
    seq: int  # unique per start, so a re-entered child with the same id is a new instance
    status: str = "active"  # active | done | error
    output: Any = None
    snapshot: dict[str, Any] | None = None  # a child machine's persisted snapshot

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "src": self.src, "input": self.input, "state": self.state, "seq": self.seq,
                "status": self.status, "output": self.output, "snapshot": self.snapshot}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChildRecord:
        return cls(data["id"], data["src"], data.get("input"), data["state"], int(data["seq"]),
                   data.get("status", "active"), data.get("output"), data.get("snapshot"))


@dataclass(frozen=True, slots=True)
class StartChild:
    id: str
    src: str
    input: Any
    state: str


@dataclass(frozen=True, slots=True)
class StopChild:
    id: str


@dataclass(frozen=True, slots=True)
class SendTo:
    target: str
    event: Event

    reaches_out: ClassVar[bool] = True

    def execute(self, actor: EffectActor) -> None:
        actor.deliver_to_child(self.target, self.event)


@dataclass(frozen=True, slots=True)
class SendParent:
    event: Event

    reaches_out: ClassVar[bool] = True

    def execute(self, actor: EffectActor) -> None:
        actor.deliver_to_parent(self.event)


@dataclass(frozen=True, slots=True)
class ScheduleTimer:
    timer: TimerRecord


@dataclass(frozen=True, slots=True)
class CancelTimer:
    id: str


@dataclass(frozen=True, slots=True)
class CallAction:
    """A custom action: run by the actor after the macrostep, in order, with the scope it saw."""

    fn: Any
    kwargs: dict[str, Any]
    name: str

    reaches_out: ClassVar[bool] = True

    def execute(self, actor: EffectActor) -> None:
        try:
            self.fn(**self.kwargs)
        except Exception as exc:  # an action that raises fails the actor, like xstate
            actor.action_failed(self.name, exc)


@dataclass(frozen=True, slots=True)
class LogEffect:
    value: Any

    reaches_out: ClassVar[bool] = False

    def execute(self, actor: EffectActor) -> None:
        actor.record_log(self.value)


@dataclass(frozen=True, slots=True)
class Took:
    """A transition taken in a microstep: for callers that must know what moved (the Run's receipts)."""

    source: str
    event_type: str
    targets: tuple[str, ...] | None
    has_actions: bool
    microstep: int = 0
    exited: tuple[str, ...] = field(default=())
    entered: tuple[str, ...] = field(default=())
