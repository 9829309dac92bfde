"""The Run engine: one Workflow execution on asyncio, with no Ray. LocalRun and the RunActor both host it.

It owns delivery (D1-D12), Rest and outstanding picks, the Chain, Gates, Effects (at most once), notices and the
journal. The chart's Interpreter runs the statechart; this class decides how each actor slot starts.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from jr2ray.authoring import (AgentSpec, AnswerEffect, BadArguments, EffectSpec, FailSpec, GateSpec, Jr2Machine,
                              TURN_INPUT_KEYS)
from jr2ray.chart import ChildHandle, Clock, Event, GuardError, Interpreter, RestoreError, Snapshot, restore
from jr2ray.chart import select_transitions, strict_guard
from jr2ray.menu import Receipt, Surface, allowed_picks, at_rest, gate_accepts, gate_accepts_now, verdict
from jr2ray.menu import texts
from jr2ray.menu.allowed import sender_of

from .effectors import EffectFailed, effector_for
from .errors import BadRequest, Conflict, RunDrifted, UnknownGate, UnknownTurn
from .models import GateView, PickEvent, RunStatus, RunStatusName, SendResult, TurnSpec, TurnView
from .store import RunJournal


class TurnLauncher(Protocol):
    """Starts and aborts the Harness of a Turn. The layer above (jr2ray.harness) provides it."""

    def start(self, turn: TurnSpec) -> None: ...

    def abort(self, iid: str) -> None: ...


@dataclass
class Outstanding:
    """A delivered pick whose receipt waits for Rest (D7), with its Chain and the answers its route wrote."""

    name: str
    delivery_id: str
    event: Event
    chain: list[Any] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    moved: bool = False
    seen: set[int] = field(default_factory=set)
    future: asyncio.Future[Receipt] | None = None
    receipt: Receipt | None = None


@dataclass
class Turn:
    """A live Turn: the `TurnSpec` its Harness runs (declared once, in models.py) plus what only the Run tracks."""

    start: TurnSpec
    invoke_id: str
    seq: int
    spec: AgentSpec
    active: bool = True
    notices: list[str] = field(default_factory=list)
    notices_read: bool = False
    outstanding: Outstanding | None = None

    @property
    def iid(self) -> str:
        return self.start.iid

    @property
    def slot(self) -> str:
        return self.start.slot

    @property
    def state(self) -> str:
        return self.start.state

    @property
    def conversation(self) -> str:
        return self.start.conversation or self.start.iid


def _in(path: str, state: str) -> bool:
    return path == state or path.startswith(state + ".")


def _reply_text(reply: Any) -> str:
    if isinstance(reply, str):
        return reply
    return json.dumps(reply, ensure_ascii=False, sort_keys=True, default=str)


class RunEngine:
    """One run. Call `start()` inside a running event loop."""

    def __init__(self, machine: Jr2Machine, run_id: str, input: Any = None, *, journal: RunJournal | None = None,
                 launcher: TurnLauncher | None = None, clock: Clock | None = None, workflow_name: str | None = None,
                 on_event: Callable[[PickEvent], None] | None = None) -> None:
        self.machine = machine
        self.run_id = run_id
        self.workflow_name = workflow_name or machine.id
        self.journal = journal
        self.launcher = launcher
        self.clock = clock
        self.on_event = on_event
        self.turns: dict[str, Turn] = {}
        self._pending_notices: dict[str, list[str]] = {}
        self._receipts: dict[str, Receipt] = {}
        self._effects_started: set[str] = set()
        self._effects_finished: dict[str, dict[str, Any]] = {}
        self._staged: list[tuple[str, str | None, dict[str, Any]]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._done = asyncio.Event()
        self.run_status: RunStatusName = "active"
        self.telemetry_rows: list[dict[str, Any]] = []
        self.history: list[PickEvent] = []
        self.history_dropped = 0  # events trimmed off the front: history[i] is event number history_dropped + i
        self.drift: str | None = None
        restored_snapshot = self._load(input)
        if self.drift is not None:
            self.interp: Interpreter | None = None
            return
        self.input = input
        validated = machine.validate_input(input) if restored_snapshot is None else None
        self.interp = Interpreter(machine.chart, validated, clock=clock, snapshot=restored_snapshot,
                                  starter=self._starter, extras=self._extras)
        self.interp.on_commit(self._on_commit)
        self.interp.on_ignored(self._on_ignored)
        self.interp.subscribe(self._after_commit)

    # ---- journal -------------------------------------------------------------------------------------------
    def _load(self, input: Any) -> Snapshot | None:
        j = self.journal
        if j is None:
            return None
        row = j.run()
        if row is None:
            data = input.model_dump(mode="json") if hasattr(input, "model_dump") else input
            j.create(self.run_id, self.workflow_name, self.machine.digest, data)
            return None
        latest = j.latest_snapshot()
        if row.digest != self.machine.digest or (latest and latest[0] != self.machine.digest):
            self.drift = f"journal digest {row.digest} != machine digest {self.machine.digest}"
            self.run_status = "drifted"
            self._done.set()
            return None
        for e in j.ledger():
            if e.kind == "receipt" and e.key:
                self._receipts[e.key] = Receipt.model_validate(e.data)
            elif e.kind == "effect_started" and e.key:
                self._effects_started.add(e.key)
            elif e.kind == "effect_finished" and e.key:
                self._effects_finished[e.key] = e.data
            elif e.kind == "notice" and e.key:
                self._pending_notices.setdefault(e.key, []).append(e.data["text"])
            elif e.kind == "notice_read" and e.key:
                self._pending_notices.pop(e.key, None)
            elif e.kind == "status" and e.data.get("status") in ("cancelled", "stopped"):
                self.run_status = e.data["status"]
            elif e.kind == "telemetry":
                self.telemetry_rows.append(e.data)
        if latest is None:
            return None
        try:
            return restore(self.machine.chart, latest[1])
        except RestoreError as exc:
            self.drift = str(exc)
            self.run_status = "drifted"
            self._done.set()
            return None

    def _stage(self, kind: str, key: str | None, data: dict[str, Any]) -> None:
        self._staged.append((kind, key, data))

    def _flush(self, snapshot: dict[str, Any] | None = None) -> None:
        entries, self._staged = self._staged, []
        if self.journal is not None and (entries or snapshot is not None):
            self.journal.commit(self.machine.digest, self.status_name(), snapshot, entries)

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        ev = PickEvent(kind=kind, at=time.time(), data=data)  # type: ignore[arg-type]
        self.history.append(ev)
        if len(self.history) > 2000:
            del self.history[:1000]
            self.history_dropped += 1000
        if self.on_event is not None:
            self.on_event(ev)

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> RunEngine:
        if self.interp is None:
            return self
        if self.run_status in ("cancelled", "stopped"):
            self._done.set()
            return self
        self.interp.start()
        return self

    @property
    def snapshot(self) -> Snapshot:
        if self.interp is None or self.interp.snapshot is None:
            raise RunDrifted(self.drift or "the run has no live snapshot")
        return self.interp.snapshot

    def status_name(self) -> RunStatusName:
        if self.run_status != "active":
            return self.run_status
        if self.interp is None or self.interp.snapshot is None:
            return "active"
        s = self.interp.snapshot.status
        return "active" if s == "active" else ("done" if s == "done" else "error")

    def _after_commit(self, snap: Snapshot) -> None:
        self._resolve_outstanding(snap)
        if snap.status != "active" and self.run_status == "active":
            self._emit("status", {"status": self.status_name(), "output": snap.output, "error": snap.error})
            for t in self.turns.values():
                self._end_turn(t)
            self._done.set()

    def cancel(self) -> RunStatus:
        """End the run as `cancelled`, aborting every Turn (R6)."""
        if self.status_name() == "active" and self.interp is not None:
            self.run_status = "cancelled"
            self._stage("status", None, {"status": "cancelled"})
            self.interp.stop()
            self._flush(self.interp.persisted())
            for t in self.turns.values():
                self._end_turn(t)
            self._emit("status", {"status": "cancelled"})
            self._done.set()
        return self.status()

    def stop(self) -> RunStatus:
        """Park the run: nothing more runs, and a later start with the same id restores it."""
        if self.status_name() == "active" and self.interp is not None:
            snap = self.interp.persisted()
            self.run_status = "stopped"
            self._stage("status", None, {"status": "stopped"})
            self._flush(snap)
            self.interp.stop()
            for t in self.turns.values():
                self._end_turn(t, abort_only=True)
            self._done.set()
        return self.status()

    async def wait(self, timeout: float | None = None) -> RunStatus:
        await asyncio.wait_for(self._done.wait(), timeout)
        return self.status()

    # ---- chart hooks ---------------------------------------------------------------------------------------
    def _extras(self, ev: Event | None) -> dict[str, Any]:
        if ev is None or self.interp is None or self.interp.snapshot is None:
            return {"chain": []}
        snap = self.interp.snapshot
        for t in self.turns.values():
            out = t.outstanding
            if not t.active or out is None or out.receipt is not None:
                continue
            if id(ev) not in out.seen:
                reply = self._reply_of(ev, t, snap)
                if reply is not _NO_REPLY:
                    out.seen.add(id(ev))
                    out.chain.append(reply)
            return {"chain": list(out.chain)}
        return {"chain": []}

    def _reply_of(self, ev: Event, turn: Turn, snap: Snapshot) -> Any:
        if ev.type.startswith("xstate.done.actor."):
            cid = ev.type[len("xstate.done.actor."):]
            rec = snap.children.get(cid)
            if rec is not None and cid != turn.invoke_id and _in(rec.state, turn.state):
                return ev.get("output")
            return _NO_REPLY
        sender = ev.sender
        if isinstance(sender, dict) and sender.get("party") in ("gate", "agent"):
            st = self.machine.structure
            seat = st.gates.get(sender["id"]) if sender["party"] == "gate" else None
            if sender["party"] == "agent":
                seat_states = [p for p in st.agent_states.get(sender["id"], []) if p != turn.state]
                seat_state = next((p for p in seat_states if p.startswith(turn.state + ".")), None)
            else:
                seat_state = seat.state if seat else None
            if seat_state is not None and seat_state.startswith(turn.state + "."):
                return {"type": ev.type, **ev.payload}
        return _NO_REPLY

    def _on_commit(self, snap: Snapshot, effects: list[Any]) -> None:
        """After each macrostep, before any of its side effects: route answers, note `moved`, journal."""
        interp = self.interp
        assert interp is not None
        ev = interp.last_event
        for t in self.turns.values():
            out = t.outstanding
            if out is None or out.receipt is not None:
                continue
            if ev is out.event:
                out.moved = any(k.event_type == out.name and k.microstep == 1 and
                                (k.targets is not None or k.has_actions) for k in interp.last_took)
            for eff in effects:
                if isinstance(eff, AnswerEffect) and _in(eff.state, t.state):
                    out.answers.append(eff.text)
        self._flush(interp.persisted())

    def _on_ignored(self, snap: Snapshot, ev: Event) -> None:
        self._flush(None)

    def _starter(self, handle: ChildHandle, logic: Any) -> bool:
        spec = self.machine.actors.get(handle.src)
        if isinstance(spec, AgentSpec):
            self._start_turn(handle, spec)
            return True
        if isinstance(spec, GateSpec):
            self._emit("gate", {"id": handle.id, "open": True, "meta": (handle.input or {}).get("meta")
                                if isinstance(handle.input, dict) else None})
            handle.on_stop(lambda: self._emit("gate", {"id": handle.id, "open": False}))
            return True
        if isinstance(spec, EffectSpec):
            self._start_effect(handle, spec)
            return True
        if isinstance(spec, FailSpec):
            reason = handle.input.get("reason") if isinstance(handle.input, dict) else handle.input
            asyncio.get_running_loop().call_soon(handle.error, {"reason": reason or "fail()"})
            return True
        return False

    # ---- turns ---------------------------------------------------------------------------------------------
    def _start_turn(self, handle: ChildHandle, spec: AgentSpec) -> None:
        inp: dict[str, Any] = handle.input if isinstance(handle.input, dict) else {"prompt": str(handle.input or "")}
        bad = sorted(set(inp) - TURN_INPUT_KEYS)
        if bad:
            asyncio.get_running_loop().call_soon(
                handle.error, {"message": f"{handle.record.state}: unknown Turn input key(s) {bad}"})
            return
        cont = bool(inp.get("continue", False))
        cwd = inp.get("cwd")
        if cwd is None and spec.workspace != "none":  # Working tools are confined to the run's own directory
            from .config import home

            ws = home() / "workspaces" / self.run_id
            ws.mkdir(parents=True, exist_ok=True)
            cwd = str(ws)
        seq = handle.record.seq
        iid = f"{self.run_id}.t{seq}"
        conversation = f"{self.run_id}:root:{handle.src}" if cont else iid
        try:
            start = TurnSpec(run_id=self.run_id, iid=iid, slot=handle.src, state=handle.record.state,
                             prompt=str(inp.get("prompt", "")), continue_=cont,
                             model=str(inp.get("model") or spec.model), thinking=inp.get("thinking", spec.thinking),
                             cwd=cwd, instructions=spec.instructions, workspace=spec.workspace,
                             masking=spec.masking, conversation=conversation)
        except ValidationError as exc:
            asyncio.get_running_loop().call_soon(
                handle.error, {"message": f"{handle.record.state}: bad Turn input: "
                                          + ", ".join(sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]}))})
            return
        turn = Turn(start=start, invoke_id=handle.id, seq=seq, spec=spec)
        if cont:
            turn.notices = list(self._pending_notices.get(conversation, []))
        self.turns[iid] = turn
        handle.on_stop(lambda: self._end_turn(turn))
        self._emit("turn", {"iid": iid, "slot": turn.slot, "state": turn.state, "active": True})
        if spec.driver == "harness" and self.launcher is not None:
            self.launcher.start(turn.start)

    def _end_turn(self, turn: Turn, abort_only: bool = False) -> None:
        if not turn.active:
            return
        turn.active = False
        out = turn.outstanding
        if out is not None and out.receipt is None and not abort_only:
            interp = self.interp
            ev = interp.last_event if interp else None
            # A cancel is not the route: the pick's work was cut off (`unfinished`), whatever event came last.
            by_route = self.run_status == "active" and ev is not None and (id(ev) in out.seen or ev is out.event)
            if by_route:  # D8: the route left the Agent's state; the answer is the Turn's last word
                answer = out.answers[-1] if out.answers else (_reply_text(out.chain[-1]) if out.chain else None)
                self._finish_pick(turn, Receipt(delivered=True, moved=True, turn_complete=True, allowed=[],
                                                answer=answer, delivery_id=out.delivery_id, pick=out.name))
                if answer and turn.start.continue_:
                    self._pending_notices.setdefault(turn.conversation, []).append(answer)
                    self._stage("notice", turn.conversation, {"text": answer})
            else:  # something else left the state while the pick's work ran
                self._finish_pick(turn, Receipt(delivered=True, moved=True, turn_complete=True, allowed=[],
                                                refused="unfinished", delivery_id=out.delivery_id, pick=out.name))
        self._emit("turn", {"iid": turn.iid, "slot": turn.slot, "state": turn.state, "active": False})
        if self.launcher is not None and turn.spec.driver == "harness":
            self.launcher.abort(turn.iid)

    def _find_turn(self, address: str) -> Turn:
        t = self.turns.get(address)
        if t is not None:
            return t
        active = [t for t in self.turns.values() if t.slot == address and t.active]
        if active:
            return active[-1]
        latest = [t for t in self.turns.values() if t.slot == address]
        if latest:
            return latest[-1]
        raise UnknownTurn(f"no Turn at {address!r} in run {self.run_id}")

    def _allowed(self, turn: Turn) -> list[str]:
        if not turn.active or self.status_name() != "active":
            return []
        return allowed_picks(self.machine, self.snapshot, turn.state)

    def surface(self, address: str) -> Surface:
        """The fixed Menu and the Allowed picks now; notices ride the first read of a continued Turn."""
        turn = self._find_turn(address)
        if not turn.active:  # the address is known but its Turn ended: say so, like a 404 would
            return Surface(menu=self.machine.menu(turn.slot), allowed=[], turn_over=True)  # type: ignore[attr-defined]
        notices: list[str] = []
        if not turn.notices_read:
            turn.notices_read = True
            notices = list(turn.notices)
            if notices:
                self._pending_notices.pop(turn.conversation, None)
                self._stage("notice_read", turn.conversation, {"iid": turn.iid})
                self._flush(None)
        return Surface(menu=self.machine.menu(turn.slot), allowed=self._allowed(turn), notices=notices)  # type: ignore[attr-defined]

    async def pick(self, address: str, name: str, args: Any, delivery_id: str | None = None) -> Receipt:
        """Deliver a pick and answer it (D1-D12). A pick that starts work waits here until Rest."""
        if delivery_id is not None and delivery_id in self._receipts:
            return self._receipts[delivery_id]
        turn = self._find_turn(address)
        self._emit("pick", {"iid": turn.iid, "slot": turn.slot, "name": name, "args": args})
        if not turn.active or self.status_name() != "active":
            return self._answer(turn, Receipt(delivered=False, moved=False, turn_complete=True, allowed=[],
                                              refused="turn_over", pick=name))
        if turn.outstanding is not None and turn.outstanding.receipt is None:
            return self._answer(turn, Receipt(delivered=False, moved=False, turn_complete=False, allowed=[],
                                              refused="not_at_rest", pick=name))
        v = verdict(self.machine, self.snapshot, turn.state, name, args)
        if v.kind != "deliver":
            return self._answer(turn, Receipt(delivered=False, moved=False, turn_complete=False,
                                              allowed=self._allowed(turn), refused=v.reason, detail=v.detail,
                                              pick=name))
        did = delivery_id or uuid.uuid4().hex[:16]
        out = Outstanding(name=name, delivery_id=did, event=v.event)
        turn.outstanding = out
        self._stage("admission", did, {"iid": turn.iid, "slot": turn.slot, "name": name,
                                        "args": v.event.payload, "sender": v.event.sender})
        self._emit("admission", {"party": "agent", "id": turn.slot, "iid": turn.iid, "name": name,
                                 "args": v.event.payload, "delivery_id": did})
        assert self.interp is not None
        self.interp.send(v.event)
        if out.receipt is not None:  # the route left the Agent's state: answered by _end_turn
            return out.receipt
        snap = self.snapshot
        if not out.moved or at_rest(snap, turn.state, turn.invoke_id) or snap.status != "active":
            answer = out.answers[-1] if out.answers else None
            return self._finish_pick(turn, Receipt(delivered=True, moved=out.moved, turn_complete=not turn.active,
                                                   allowed=self._allowed(turn), answer=answer, delivery_id=did,
                                                   pick=name))
        out.future = asyncio.get_running_loop().create_future()
        return await asyncio.shield(out.future)

    def _resolve_outstanding(self, snap: Snapshot) -> None:
        for t in self.turns.values():
            out = t.outstanding
            if not t.active or out is None or out.receipt is not None or out.future is None:
                continue
            if at_rest(snap, t.state, t.invoke_id):
                answer = out.answers[-1] if out.answers else (_reply_text(out.chain[-1]) if out.chain else None)
                self._finish_pick(t, Receipt(delivered=True, moved=True, turn_complete=False,
                                             allowed=self._allowed(t), answer=answer, delivery_id=out.delivery_id,
                                             pick=out.name))

    def _finish_pick(self, turn: Turn, receipt: Receipt) -> Receipt:
        out = turn.outstanding
        if out is not None and out.receipt is None and receipt.delivery_id == out.delivery_id:
            out.receipt = receipt
            if out.future is not None and not out.future.done():
                out.future.set_result(receipt)
        return self._answer(turn, receipt)

    def _answer(self, turn: Turn, receipt: Receipt) -> Receipt:
        if receipt.delivery_id:
            self._receipts[receipt.delivery_id] = receipt
            self._stage("receipt", receipt.delivery_id, receipt.model_dump())
            self._flush(None)
        self._emit("receipt", {"iid": turn.iid, "slot": turn.slot, **receipt.model_dump()})
        return receipt

    def fault(self, address: str, reason: str) -> None:
        """The Harness gave up on a Turn (H8, H9): route `agent.fault` (mechanism event, no Sender)."""
        turn = self._find_turn(address)
        if not turn.active or self.interp is None:
            return
        self._stage("admission", None, {"iid": turn.iid, "name": "agent.fault", "reason": reason})
        self._emit("admission", {"party": None, "iid": turn.iid, "name": "agent.fault", "reason": reason})
        self.interp.send(Event("agent.fault", {"reason": reason, "slot": turn.slot, "iid": turn.iid}))

    def record_telemetry(self, row: dict[str, Any]) -> None:
        self.telemetry_rows.append(row)
        self._stage("telemetry", row.get("iid"), row)
        self._flush(None)
        self._emit("telemetry", row)

    # ---- gates ---------------------------------------------------------------------------------------------
    def gates(self) -> list[GateView]:
        if self.interp is None or self.interp.snapshot is None:
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

    def send(self, gate_id: str, name: str, args: Any, delivery_id: str | None = None) -> SendResult:
        """A person's (or webhook's) event through an open Gate: 200, or 404/400/409 with a reason."""
        if delivery_id is not None and delivery_id in self._receipts:
            return SendResult(delivery_id=delivery_id, status=self.status_name(), value=self.snapshot.value)
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
        self._stage("admission", did, {"gate": gate_id, "name": name, "args": payload, "sender": event.sender})
        self._emit("gate", {"id": gate_id, "event": name, "args": payload})
        self._emit("admission", {"party": "gate", "id": gate_id, "name": name, "args": payload, "delivery_id": did})
        self._receipts[did] = Receipt(delivered=True, moved=True, turn_complete=False, allowed=[], pick=name,
                                      delivery_id=did)
        assert self.interp is not None
        self.interp.send(event)
        return SendResult(delivery_id=did, status=self.status_name(), value=self.snapshot.value)

    # ---- effects -------------------------------------------------------------------------------------------
    def _start_effect(self, handle: ChildHandle, spec: EffectSpec) -> None:
        key = f"{handle.id}#{handle.record.seq}"
        loop = asyncio.get_running_loop()
        if key in self._effects_finished:  # finished before a crash: replay the recorded result
            rec = self._effects_finished[key]
            if "error" in rec:
                loop.call_soon(handle.error, rec["error"])
            else:
                loop.call_soon(handle.done, rec.get("output"))
            return
        if key in self._effects_started and not spec.idempotent:
            loop.call_soon(handle.error, {"message": f"effect {handle.id!r} was interrupted and is not "
                                                     f"idempotent, so it is not run again"})
            return
        snap = self.interp.snapshot if self.interp and self.interp.snapshot else None
        try:
            effector = effector_for(spec)
            from .config import home

            call = effector.resolve(spec, snap.context if snap else {}, handle.input,
                                    home() / "workspaces" / self.run_id)
        except Exception as exc:
            loop.call_soon(handle.error, {"message": f"effect {handle.id!r} could not be built: {exc}"})
            return
        self._effects_started.add(key)
        # Journaled before it runs: at most once (R4).
        self._stage("effect_started", key, call)
        self._flush(None)

        async def runner() -> None:
            try:
                output = await effector.run(call)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                err = {"message": f"{type(exc).__name__}: {exc}", **(exc.detail if isinstance(exc, EffectFailed) else {})}
                self._effects_finished[key] = {"error": err}
                self._stage("effect_finished", key, {"error": err})
                self._flush(None)
                handle.error(err)
                return
            self._effects_finished[key] = {"output": output}
            self._stage("effect_finished", key, {"output": output})
            self._flush(None)
            handle.done(output)

        task = loop.create_task(runner())
        handle.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- reads ---------------------------------------------------------------------------------------------
    def status(self) -> RunStatus:
        if self.interp is None or self.interp.snapshot is None:
            row = self.journal.run() if self.journal else None
            return RunStatus(id=self.run_id, workflow=self.workflow_name, digest=row.digest if row else "",
                             status=self.status_name(), error=self.drift)
        snap = self.snapshot
        turns = [TurnView(iid=t.iid, slot=t.slot, state=t.state, active=t.active, conversation=t.conversation,
                          outstanding=(t.outstanding.name if t.outstanding and t.outstanding.receipt is None
                                       else None)) for t in self.turns.values()]
        return RunStatus(id=self.run_id, workflow=self.workflow_name, digest=self.machine.digest,
                         status=self.status_name(), value=snap.value, context=_jsonable(snap.context),
                         output=_jsonable(snap.output), error=_jsonable(snap.error),
                         gates=self.gates() if self.status_name() == "active" else [], turns=turns)

    def telemetry(self) -> list[dict[str, Any]]:
        return list(self.telemetry_rows)


class _NoReply:
    pass


_NO_REPLY = _NoReply()


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))
