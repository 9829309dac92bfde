"""Allowed picks (M4-M7) and a Gate's accepts / accepts_now (M8), asked payload-blind of the live snapshot."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from jr2ray.authoring import Jr2Machine, PartyRef
from jr2ray.chart import RecordingEvent, Snapshot, TransitionDef, select_transitions
from jr2ray.chart.algorithm import _default_leaf

from .rest import at_rest


def blind_guard(t: TransitionDef, scope: dict[str, Any]) -> bool:
    """Payload-blind (M5) and fail-open (M6): a False counts only from a guard that read no payload."""
    ev = scope["event"]
    assert t.guard is not None
    if isinstance(ev, RecordingEvent):
        ev.reset()
    try:
        ok = t.guard.check(scope, _default_leaf)
    except Exception:
        return True
    if not ok and isinstance(ev, RecordingEvent) and ev.reads:
        return True
    return ok


def sender_of(party: PartyRef) -> dict[str, str]:
    return {"party": party.kind, "id": party.id}


def takes_now(machine: Jr2Machine, snapshot: Snapshot, party: PartyRef, name: str) -> bool:
    """Would the live Machine take `name` from `party` now, payload unseen, moving something, all its own writing?"""
    ev = RecordingEvent(name, {}, sender_of(party))
    ts = select_transitions(snapshot.config, snapshot.context, ev, blind_guard)
    if not ts:
        return False
    if not any(t.targets is not None or t.actions for t in ts):
        return False  # M7: a targetless, actionless writing never moves
    return all(machine.structure.transition_allows(t, party) for t in ts)


def allowed_picks(machine: Jr2Machine, snapshot: Snapshot, state: str) -> list[str]:
    """The Allowed picks of the Agent whose state is `state`: empty unless at Rest, else in Menu order (M4)."""
    party = machine.structure.parties.get(state)
    if party is None or party.kind != "agent":
        raise KeyError(f"{state!r} invokes no Agent")
    if state not in {n.path for n in snapshot.config}:
        return []
    if not at_rest(snapshot, state, party.invoke_id):
        return []
    return [n for n in machine.structure.derived[state] if takes_now(machine, snapshot, party, n)]


class GateAccept(BaseModel):
    name: str
    description: str
    schema_: dict[str, Any]


def gate_accepts(machine: Jr2Machine, gate_id: str) -> list[GateAccept]:
    """Every event the Gate may ever take, with its schema (M8). Never filtered."""
    party = machine.structure.gates[gate_id]
    return [GateAccept(name=n, description=machine.events[n].description, schema_=machine.events[n].schema)
            for n in machine.structure.derived[party.state]]


def gate_accepts_now(machine: Jr2Machine, snapshot: Snapshot, gate_id: str) -> list[str]:
    """The same payload-blind question the Allowed picks ask, asked as the Gate's Sender (M8)."""
    party = machine.structure.gates[gate_id]
    if party.state not in {n.path for n in snapshot.config}:
        return []
    return [n for n in machine.structure.derived[party.state] if takes_now(machine, snapshot, party, n)]
