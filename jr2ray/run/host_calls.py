"""How a pooled host serves each declared call on its run (`calls.RUN_CALLS`) on the hosted engine; `watch` is the
host's own (`HostSlot._watch_run`)."""

from __future__ import annotations

import os
from typing import Any

from jr2ray.menu import Receipt

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


async def ready_receipts(eng: RunEngine, carry: list[list[Any]]) -> list[Receipt | None]:
    """Picks sent again with a write (each `[address, name, args, delivery_id, ...]`, as `pick` takes them): the
    receipt of each whose delivery has one now, taken through the pick itself (the same journal read, telemetry and
    span as a pick sent again alone, and never a wait), else None. A pick that would wait for Rest, or fail, is left
    to its caller to send again on its own, where it waits or fails as it would have."""
    out: list[Receipt | None] = []
    for address, name, args, delivery_id, *_watcher in carry:
        receipt = None
        try:
            if eng.receipt_ready(address, delivery_id):
                receipt = await telemetry.picked(eng, address, name, eng.pick(address, name, args or {}, delivery_id))
        except Exception:  # noqa: BLE001 - its caller sends it again alone and is told there
            receipt = None
        out.append(receipt)
    return out


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
