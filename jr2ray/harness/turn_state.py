"""What one running Turn tracks (`TurnState`), the loop's internal signals, and how a call's arguments are read.

Kept apart from the loop (turn.py) so each module stays one job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jr2ray.harness.port import RunPort
from jr2ray.harness.spec import TurnResult, TurnSpec
from jr2ray.harness.transcript import ToolCall
from jr2ray.menu import texts


class Fault(Exception):
    """Internal: the Turn cannot go on; report `agent.fault` with this reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Runaway(Exception):
    """Internal: a runaway limit tripped (H9); the caller decides between a re-roll and a fault."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class TurnState:
    """Counters and knowledge of one Turn. `last_read` is the newest Allowed list the model read."""

    spec: TurnSpec
    port: RunPort
    turn: int
    steps: int = 0
    attempt_steps: int = 0
    picks: int = 0
    nudges: int = 0
    rerolled: bool = False
    rerolls_used: int = 0
    last_read: list[str] = field(default_factory=list)
    streak_key: tuple[str, str] | None = None
    streak: int = 0
    end: TurnResult | None = None
    runaway: str | None = None
    tools_sha256: str | None = None
    masked: list[str] | None = None
    dids: dict[str, str] = field(default_factory=dict)  # tool call id -> the delivery id its pick is sent with

    def fresh_attempt(self) -> None:
        """A re-roll starts its budgets over; the Turn's totals keep counting."""
        self.attempt_steps = 0
        self.nudges = 0
        self.streak_key = None
        self.streak = 0
        self.runaway = None

    def result(self, outcome: str, reason: str | None = None) -> TurnResult:
        return TurnResult(
            outcome=outcome,  # type: ignore[arg-type]
            reason=reason,
            steps=self.steps,
            picks=self.picks,
            nudges=self.nudges,
            rerolled=self.rerolled,
        )


def call_key(call: ToolCall) -> tuple[str, str]:
    """Name plus arguments, with the arguments compared as JSON values when they parse."""
    try:
        canon = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True, separators=(",", ":"))
    except json.JSONDecodeError:
        canon = call.arguments
    return call.name, canon


def parse_args(call: ToolCall) -> dict[str, Any] | str:
    """The call's arguments as a dict, or the tool result that says why they are not one JSON object."""
    raw = call.arguments or ""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return texts.bad_json_syntax(call.name, exc.msg, exc.pos)
    if not isinstance(value, dict):
        return texts.bad_json_type(call.name, type(value).__name__)
    return value
