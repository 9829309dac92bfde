"""Gates: the events a person or a webhook sends through an open Gate, checked first, then admitted once.

A Gate event's delivery id is scoped by its Gate and carries a payload hash; its admission in the journal is its
receipt, so a repeat after any restart is answered from the journal and never applied twice.
"""

from __future__ import annotations

from typing import Any

from jr2ray.authoring import BadArguments, GateSpec, PartyRef
from jr2ray.chart import ChildHandle, Event, GuardError, Snapshot, select_transitions, strict_guard
from jr2ray.menu import gate_accepts, gate_accepts_now, texts
from jr2ray.menu.allowed import sender_of

from . import telemetry, tracing
from .engine_state import RunState
from .errors import BadRequest, Conflict, RunError, UnknownGate
from .journal_writer import JournalWriter
from .models import GateView, SendResult
from .replay import delivery_id_or_new, gate_key, payload_hash
from .store import LedgerKind


def gate_views(machine: Any, snap: Snapshot) -> list[GateView]:
    """The open Gates of a live run's snapshot: each one's id, meta, the events it may take and those it takes now.
    Pure, so a run moved to another version (jr2ray.run.migration) is shown as it stands there without a wake."""
    out: list[GateView] = []
    for cid, rec in snap.children.items():
        if rec.status != "active" or not isinstance(machine.actors.get(rec.src), GateSpec):
            continue
        if cid not in machine.structure.gates:
            continue
        meta = rec.input.get("meta") if isinstance(rec.input, dict) else None
        accepts = [{"name": a.name, "description": a.description, "schema": a.schema_}
                   for a in gate_accepts(machine, cid)]
        out.append(GateView(id=cid, state=rec.state, meta=meta, accepts=accepts,
                            accepts_now=gate_accepts_now(machine, snap, cid)))
    return out


class Gates:
    """The run's Gates: what each open one shows, and the events sent through them. `receipts` maps each scoped
    delivery id to its payload hash (from the journal, then as events are admitted)."""

    def __init__(self, state: RunState, writer: JournalWriter) -> None:
        self.state = state
        self.writer = writer
        self.receipts: dict[str, str] = {}

    def open(self, handle: ChildHandle) -> None:
        """A Gate slot starts: the feed says it opened, and will say when it closes."""
        meta = (handle.input or {}).get("meta") if isinstance(handle.input, dict) else None
        self.writer.emit("gate", {"id": handle.id, "open": True, "meta": meta})
        telemetry.gate_opened(self.state, handle.id, handle.record.state)
        handle.on_stop(lambda: self._closed(handle.id))

    def _closed(self, gate_id: str) -> None:
        self.writer.emit("gate", {"id": gate_id, "open": False})
        # Parked or fenced (still `active`): the run stopped in this process, and its Gate stays open. A run that
        # failed (lost, corrupt, drifted) has ended, and its Gates with it.
        if self.state.broken is None or self.state.run_status != "active":
            telemetry.gate_closed(self.state, gate_id)

    def views(self) -> list[GateView]:
        st = self.state
        if not st.live or st.broken is not None:
            return []
        return gate_views(st.machine, st.snapshot)

    def _accepts_now(self, gate_id: str) -> list[str]:
        if gate_id not in self.state.machine.structure.gates or not self.state.live:
            return []
        return gate_accepts_now(self.state.machine, self.state.snapshot, gate_id)

    def _result(self, delivery_id: str) -> SendResult:
        return SendResult(delivery_id=delivery_id, status=self.state.status_name(), value=self.state.snapshot.value)

    def send(self, gate_id: str, name: str, args: Any, delivery_id: str | None = None) -> SendResult:
        """A person's (or webhook's) event through an open Gate: 200, or 404/400/409 with a reason."""
        self.state.usable()
        digest = payload_hash(name, args)
        if delivery_id is not None and (earlier := self.receipts.get(gate_key(gate_id, delivery_id))):
            self._same_event(gate_id, delivery_id, earlier, digest)
            return self._result(delivery_id)
        party, snap = self._open_gate(gate_id)
        event, payload = self._event(gate_id, party, snap, name, args)
        did = delivery_id_or_new(delivery_id)
        key = gate_key(gate_id, did)
        # The admission is the Gate's receipt: it is journaled in the same transaction as the macrostep it starts.
        self.writer.stage(LedgerKind.ADMISSION, key, {"gate": gate_id, "name": name, "args": payload,
                                                      "sender": event.sender, "delivery_id": did, "hash": digest})
        self.writer.emit("gate", {"id": gate_id, "event": name, "args": payload})
        self.writer.emit("admission", {"party": "gate", "id": gate_id, "name": name, "args": payload,
                                       "delivery_id": did})
        self.receipts[key] = digest
        assert self.state.interp is not None
        with tracing.gate_event(self.state, gate_id, name):
            self.state.interp.send(event)
        return self._result(did)

    def _same_event(self, gate_id: str, delivery_id: str, earlier: str, digest: str) -> None:
        if earlier != digest:
            raise Conflict(f"delivery_id {delivery_id!r} was already used at Gate {gate_id!r} for another event "
                           "or other input; a retry must repeat them exactly, a new event needs a new id",
                           self._accepts_now(gate_id))

    def refusal_at_rest(self, gate_id: str, name: str, args: Any, delivery_id: str | None) -> RunError | None:
        """The refusal this event would get from the run as its journal left it, before the run is taken: a parked
        run woken for a Gate event it refuses is then not taken at all, so the refusal writes nothing, not even a
        new lease. None when it may be taken (`send` checks again once the run is live)."""
        st, snap = self.state, self.state.rested
        if st.broken is not None or snap is None:
            return None  # a damaged run answers as it does when taken
        if st.status_name(snap) != "active":
            return self._ended(gate_id, st.status_name(snap))
        earlier = None if delivery_id is None else self.receipts.get(gate_key(gate_id, delivery_id))
        try:
            if earlier is not None:  # a retry: answered by `send` once taken, unless it is not the same event
                self._same_event(gate_id, delivery_id or "", earlier, payload_hash(name, args))
                return None
            self._event(gate_id, *self._gate_in(snap, gate_id), name, args)
        except RunError as exc:
            return exc
        return None

    def _open_gate(self, gate_id: str) -> tuple[PartyRef, Snapshot]:
        """The open Gate's party and the snapshot it is open in; UnknownGate when there is none."""
        st = self.state
        if st.status_name() != "active" or not st.live:
            # an ended run (a cancelled one woken from its journal has no live snapshot) has no open Gate
            raise self._ended(gate_id, st.status_name())
        return self._gate_in(st.snapshot, gate_id)

    def _ended(self, gate_id: str, status: str) -> UnknownGate:
        return UnknownGate(f"no open Gate {gate_id!r} in run {self.state.run_id}: the run is {status}")

    def _gate_in(self, snap: Snapshot, gate_id: str) -> tuple[PartyRef, Snapshot]:
        st = self.state
        rec = snap.children.get(gate_id)
        party = st.machine.structure.gates.get(gate_id)
        if rec is None or rec.status != "active" or party is None:
            open_now = sorted(g for g, r in snap.children.items()
                              if r.status == "active" and g in st.machine.structure.gates)
            raise UnknownGate(f"no open Gate {gate_id!r} in run {st.run_id} (open now: "
                              f"{', '.join(open_now) or 'none'})")
        return party, snap

    def _event(self, gate_id: str, party: PartyRef, snap: Snapshot, name: str,
               args: Any) -> tuple[Event, Any]:
        """The chart event `name` from the Gate and its validated payload, checked: BadRequest or Conflict when the
        run would not take it from there now."""
        machine = self.state.machine
        if isinstance(args, dict) and "sender" in args:
            raise BadRequest(texts.sender_refused())
        if name not in machine.events:
            raise BadRequest(f"unknown event {name!r}")
        accepts_now = gate_accepts_now(machine, snap, gate_id)
        if name not in machine.structure.derived[party.state]:
            raise Conflict(f"Gate {gate_id!r} never takes {name!r}", accepts_now)
        try:
            payload = machine.events[name].validate(args if args is not None else {})
        except BadArguments as exc:
            raise BadRequest(texts.bad_arguments(exc)) from None
        event = Event(name, payload, sender_of(party))
        try:
            ts = select_transitions(snap.config, snap.context, event, strict_guard)
        except GuardError:
            ts = []
        moves = any(t.targets is not None or t.actions for t in ts)
        if not moves or any(not machine.structure.transition_allows(t, party) for t in ts):
            raise Conflict(f"the run would not take {name!r} from Gate {gate_id!r} now", accepts_now)
        return event, payload
