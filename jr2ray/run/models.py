"""Plain-data models the Run serves: status, gates, turns, and what a Harness needs to start a Turn."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

RunStatusName = Literal["queued", "active", "done", "error", "cancelled", "stopped", "drifted", "lost", "corrupt"]
# The lifecycle of a run as the journal tells it: done, error and cancelled are all `finished`.
Lifecycle = Literal["queued", "active", "finished", "stopped", "lost", "corrupt", "drifted"]
FINISHED: frozenset[str] = frozenset({"done", "error", "cancelled"})


def lifecycle(status: str) -> Lifecycle:
    return "finished" if status in FINISHED else status  # type: ignore[return-value]


class GateView(BaseModel):
    """One open Gate: its id, meta, every event it may take (with schemas) and those it would take now."""

    id: str
    state: str
    meta: Any = None
    accepts: list[dict[str, Any]]
    accepts_now: list[str]


class TurnView(BaseModel):
    iid: str
    slot: str
    state: str
    active: bool
    conversation: str
    outstanding: str | None = None


class RunStatus(BaseModel):
    id: str
    workflow: str
    digest: str
    status: RunStatusName
    value: Any = None
    context: dict[str, Any] = Field(default_factory=dict)
    output: Any = None
    error: Any = None
    gates: list[GateView] = Field(default_factory=list)
    turns: list[TurnView] = Field(default_factory=list)


class SendResult(BaseModel):
    ok: bool = True
    delivery_id: str
    status: RunStatusName
    value: Any = None


class TurnStart(BaseModel):
    """Everything a Harness needs to run one Turn (SPEC §5); the Run hands it to a TurnLauncher."""

    run_id: str
    iid: str
    slot: str
    state: str
    prompt: str
    continue_: bool = False
    model: str
    thinking: str | None = None
    cwd: str | None = None
    instructions: str
    workspace: Literal["none", "read", "write"] = "none"
    masking: bool = False
    conversation: str


class PickEvent(BaseModel):
    """One line of the pick history: what the Console and the SSE feed show."""

    kind: Literal["pick", "receipt", "admission", "status", "turn", "telemetry", "gate"]
    at: float
    data: dict[str, Any]
