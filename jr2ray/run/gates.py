"""Gates: the events a person or a webhook sends through an open Gate, checked first, then admitted once.

A Gate event's delivery id is scoped by its Gate and carries a payload hash; its admission in the journal is its
receipt, so a repeat after any restart is answered from the journal and never applied twice.
"""

from __future__ import annotations

import uuid
from typing import Any

from jr2ray.authoring import BadArguments, GateSpec
from jr2ray.chart import Event, GuardError, select_transitions, strict_guard
from jr2ray.menu import gate_accepts, gate_accepts_now, texts
from jr2ray.menu.allowed import sender_of

from . import tracing
from .engine_state import EngineState
from .errors import BadRequest, Conflict, UnknownGate
from .models import GateView, SendResult
from .replay import gate_key, payload_hash
from .store import LedgerKind


class GatesMixin(EngineState):
    """The Gate half of RunEngine."""

    def gates(self) -> list[GateView]:
        if self.interp is None or self.interp.snapshot is None or self.broken is not None:
            return []
        snap = self.snapshot
        out: list[GateView] = []
        for cid, rec in snap.children.items():
            if rec.status != "active" or not isinstance(self.machine.actors.get(rec.src), GateSpec):
                continue
            if cid not in self.machine.structure.gates:
                continue
            meta = rec.input.get("meta") if isinstance(rec.input, dict) else None
            accepts = [{"name": a.name, "description": a.description, "schema": a.schema_}
                       for a in gate_accepts(self.machine, cid)]
            out.append(GateView(id=cid, state=rec.state, meta=meta, accepts=accepts,
                                accepts_now=gate_accepts_now(self.machine, snap, cid)))
        return out

    def _accepts_now(self, gate_id: str) -> list[str]:
        if gate_id not in self.machine.structure.gates or self.interp is None or self.interp.snapshot is None:
            return []
        return gate_accepts_now(self.machine, self.snapshot, gate_id)

    def send(self, gate_id: str, name: str, args: Any, delivery_id: str | None = None) -> SendResult:
        """A person's (or webhook's) event through an open Gate: 200, or 404/400/409 with a reason."""
        self._usable()
        digest = payload_hash(name, args)
        if delivery_id is not None and (earlier := self._gate_receipts.get(gate_key(gate_id, delivery_id))):
            if earlier != digest:
                raise Conflict(f"delivery_id {delivery_id!r} was already used at Gate {gate_id!r} for another event "
                               "or other input; a retry must repeat them exactly, a new event needs a new id",
                               self._accepts_now(gate_id))
            return SendResult(delivery_id=delivery_id, status=self.status_name(), value=self.snapshot.value)
        if self.status_name() != "active" or self.interp is None or self.interp.snapshot is None:
            # an ended run (a cancelled one woken from its journal has no live snapshot) has no open Gate
            raise UnknownGate(f"no open Gate {gate_id!r} in run {self.run_id}")
        snap = self.snapshot
        rec = snap.children.get(gate_id)
        party = self.machine.structure.gates.get(gate_id)
        if rec is None or rec.status != "active" or party is None or self.status_name() != "active":
            raise UnknownGate(f"no open Gate {gate_id!r} in run {self.run_id}")
        if isinstance(args, dict) and "sender" in args:
            raise BadRequest(texts.sender_refused())
        if name not in self.machine.events:
            raise BadRequest(f"unknown event {name!r}")
        accepts_now = gate_accepts_now(self.machine, snap, gate_id)
        if name not in self.machine.structure.derived[party.state]:
            raise Conflict(f"Gate {gate_id!r} never takes {name!r}", accepts_now)
        try:
            payload = self.machine.events[name].validate(args if args is not None else {})
        except BadArguments as exc:
            raise BadRequest(texts.bad_arguments(exc)) from None
        event = Event(name, payload, sender_of(party))
        try:
            ts = select_transitions(snap.config, snap.context, event, strict_guard)
        except GuardError:
            ts = []
        moves = any(t.targets is not None or t.actions for t in ts)
        if not moves or any(not self.machine.structure.transition_allows(t, party) for t in ts):
            raise Conflict(f"the run would not take {name!r} from Gate {gate_id!r} now", accepts_now)
        did = delivery_id or uuid.uuid4().hex[:16]
        key = gate_key(gate_id, did)
        # The admission is the Gate's receipt: it is journaled in the same transaction as the macrostep it starts.
        self._stage(LedgerKind.ADMISSION, key, {"gate": gate_id, "name": name, "args": payload,
                                                "sender": event.sender, "delivery_id": did, "hash": digest})
        self._emit("gate", {"id": gate_id, "event": name, "args": payload})
        self._emit("admission", {"party": "gate", "id": gate_id, "name": name, "args": payload, "delivery_id": did})
        self._gate_receipts[key] = digest
        assert self.interp is not None
        with tracing.gate_event(self, gate_id, name):
            self.interp.send(event)
        return SendResult(delivery_id=did, status=self.status_name(), value=self.snapshot.value)
