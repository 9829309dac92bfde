"""How a pooled host serves each declared call on its run (`calls.RUN_CALLS`) on the hosted engine; `watch` is the
host's own (`RunHost._watch_run`)."""

from __future__ import annotations

import os
from typing import Any

from . import telemetry, tracing
from .calls import RUN_CALLS
from .engine import RunEngine


def _send(eng: RunEngine, gate_id: str, name: str, args: dict[str, Any] | None, delivery_id: str | None,
          traceparent: str | None = None) -> Any:
    with tracing.caller(traceparent):  # the caller's span (an API request's), linked from the Gate event's
        return telemetry.gate_event(eng, gate_id, name, lambda: eng.send(gate_id, name, args or {}, delivery_id))


def _pick(eng: RunEngine, address: str, name: str, args: dict[str, Any] | None, delivery_id: str | None,
          *_watcher: Any) -> Any:
    return eng.pick(address, name, args or {}, delivery_id)


def _record_telemetry(eng: RunEngine, row: Any) -> None:
    eng.record_telemetry(row.model_dump(mode="json") if hasattr(row, "model_dump") else dict(row))


ENGINE_CALLS: dict[str, Any] = {
    "ready": lambda eng: eng.status(), "status": lambda eng: eng.status(), "gates": lambda eng: eng.gates(),
    "surface": lambda eng, address: eng.surface(address), "history": lambda eng, since=0: eng.feed(since),
    "telemetry": lambda eng: eng.telemetry(), "transcript": lambda eng, address: eng.transcript(address),
    "pid": lambda eng: os.getpid(), "wait": lambda eng, timeout=None: eng.wait(timeout), "pick": _pick,
    "send": _send, "cancel": lambda eng: eng.cancel(), "stop": lambda eng: eng.stop(),
    "fault": lambda eng, address, reason: eng.fault(address, reason), "record_telemetry": _record_telemetry,
    "record_transcript": lambda eng, address, entry: eng.record_transcript(address, entry),
    "turn_waits": lambda eng, address, key: eng.turn_waits(address, key),
}
assert set(ENGINE_CALLS) | {"watch"} == set(RUN_CALLS), "every declared run call is served"
