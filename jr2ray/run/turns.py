"""Turns and delivery: a Turn per Agent slot, picks delivered (D1-D12), outstanding picks answered at Rest.

Every pick's delivery id is scoped by its Turn and carries a payload hash; both, the outstanding pick and its
progress, and the receipt go to the journal, so a retry after any restart gets the same receipt or waits for it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from jr2ray.authoring import TURN_INPUT_KEYS, AgentSpec, AnswerEffect
from jr2ray.chart import ChildHandle, Event, Interpreter, Snapshot
from jr2ray.menu import Receipt, Surface, allowed_picks, at_rest, verdict

from . import telemetry, tracing
from .engine_state import RunState
from .errors import UnknownTurn
from .journal_writer import JournalWriter
from .models import TurnSpec
from .replay import Pending, delivery_id_or_new, payload_hash, pick_key
from .store import LedgerKind


class TurnLauncher(Protocol):
    """Starts and aborts the Harness of a Turn. The layer above (jr2ray.harness) provides it."""

    def start(self, turn: TurnSpec) -> None: ...

    def abort(self, iid: str) -> None: ...


@runtime_checkable
class ParkingLauncher(Protocol):
    """A TurnLauncher that can let its run park while a Turn's Harness waits for Turn admission: it ends that
    Harness and hands its waiting ask on to the KV budget, which wakes the run (through `registry`) once the ask is
    granted. The run's restore starts the Turn's Harness again, and it finds its share held. A launcher without it
    keeps such a run live while it waits."""

    def park(self, iid: str, key: str, registry: Any) -> None: ...


@dataclass
class Outstanding:
    """A delivered pick whose receipt waits for Rest (D7), with its Chain and the answers its route wrote."""

    name: str
    delivery_id: str
    key: str
    hash: str
    event: Event | None  # None when restored from the journal: only later events can be its route
    chain: list[Any] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    moved: bool = False
    seen: set[int] = field(default_factory=set)
    future: asyncio.Future[Receipt] | None = None
    receipt: Receipt | None = None
    journaled: tuple[bool, int, int] | None = None  # (moved, answers, chain) as last written

    def progress(self) -> dict[str, Any] | None:
        """The progress entry to journal now, or None when the journal already has it."""
        sig = (self.moved, len(self.answers), len(self.chain))
        if sig == self.journaled:
            return None
        self.journaled = sig
        return {"moved": self.moved, "answers": list(self.answers), "chain": list(self.chain)}

    @classmethod
    def restored(cls, p: Pending) -> Outstanding:
        out = cls(name=p.name, delivery_id=p.delivery_id, key=p.key, hash=p.hash, event=None, chain=list(p.chain),
                  answers=list(p.answers), moved=p.moved)
        out.journaled = (out.moved, len(out.answers), len(out.chain))
        out.future = asyncio.get_running_loop().create_future()
        return out


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
    # Its Harness waits for room in the KV budget under this admission key (Turn admission): the run may park
    # meanwhile, the ask handed on to the budget (see `ParkingLauncher`). None: it is not waiting.
    waits_for: str | None = None

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


def conversation_key(base: str, moves: int) -> str:
    """The conversation a Turn records under: its own (`<run>.t<seq>`, or `<run>:root:<slot>` with `continue`),
    and after a run's `moves`-th migration a fresh one, so a moved run's Turns start over on the new version's
    Menu (the old conversation stays in the journal, never continued). jr2ray.run.migration keys its notices so."""
    return f"{base}:moved{moves}" if moves else base


def reply_text(reply: Any) -> str:
    if isinstance(reply, str):
        return reply
    return json.dumps(reply, ensure_ascii=False, sort_keys=True, default=str)


def _last_word(out: Outstanding) -> str | None:
    return out.answers[-1] if out.answers else (reply_text(out.chain[-1]) if out.chain else None)


def _in(path: str, state: str) -> bool:
    return path == state or path.startswith(state + ".")


class _NoReply:
    pass


_NO_REPLY = _NoReply()


class Turns:
    """The run's Turns: one per Agent slot started, their picks and the receipts they got. Writes go through the
    run's writer; the run itself is read from its state. `receipts` (scoped pick key -> (payload hash, receipt)),
    `notices` (conversation -> answers kept for its next Turn) and `pending` (picks that were waiting for Rest when
    the run stopped) come from the journal."""

    def __init__(self, state: RunState, writer: JournalWriter, launcher: TurnLauncher | None) -> None:
        self.state = state
        self.writer = writer
        self.launcher = launcher
        self.turns: dict[str, Turn] = {}
        self.receipts: dict[str, tuple[str, Receipt]] = {}
        self.notices: dict[str, list[str]] = {}
        self.pending: dict[str, Pending] = {}
        self.slots: dict[str, str] = {}  # a journaled Turn's id -> its slot: a finished run woken again has no Turns
        self.moves = 0  # migrations in the journal: each one starts every conversation afresh

    # ---- start and end -------------------------------------------------------------------------------------
    def start(self, handle: ChildHandle, spec: AgentSpec) -> None:
        """An Agent slot starts: build its Turn (or fail the slot on bad input) and start its Harness."""
        start = self._turn_spec(handle, spec)
        if start is None:
            return
        iid, conversation = start.iid, start.conversation or start.iid
        turn = Turn(start=start, invoke_id=handle.id, seq=handle.record.seq, spec=spec)
        if start.continue_ or conversation in self.notices:  # a moved run's Turn too (jr2ray.run.migration)
            turn.notices = list(self.notices.get(conversation, []))
        pending = next((p for p in self.pending.values() if p.iid == iid), None)
        if pending is not None:  # it was waiting for Rest when the Run stopped: it waits again, same receipt
            del self.pending[pending.key]
            turn.outstanding = Outstanding.restored(pending)
        self.turns[iid] = turn
        handle.on_stop(lambda: self.end(turn))
        self.writer.emit("turn", {"iid": iid, "slot": turn.slot, "state": turn.state, "active": True})
        telemetry.turn_opened(self.state, turn)
        if spec.driver == "harness" and self.launcher is not None:
            self.launcher.start(turn.start)

    def _turn_spec(self, handle: ChildHandle, spec: AgentSpec) -> TurnSpec | None:
        """The Turn's `TurnSpec` from the invoke's input, or None after failing the slot with the reason."""
        run_id = self.state.run_id
        inp: dict[str, Any] = handle.input if isinstance(handle.input, dict) else {"prompt": str(handle.input or "")}
        bad = sorted(set(inp) - TURN_INPUT_KEYS)
        if bad:
            asyncio.get_running_loop().call_soon(
                handle.error, {"message": f"{handle.record.state}: unknown Turn input key(s) {bad}"})
            return None
        cont = bool(inp.get("continue", False))
        cwd = inp.get("cwd")
        if cwd is None and spec.workspace != "none":  # Working tools are confined to the run's own directory
            ws = self.state.settings.home_dir() / "workspaces" / run_id
            ws.mkdir(parents=True, exist_ok=True)
            cwd = str(ws)
        iid = f"{run_id}.t{handle.record.seq}"
        conversation = conversation_key(f"{run_id}:root:{handle.src}" if cont else iid, self.moves)
        try:
            return TurnSpec(run_id=run_id, iid=iid, slot=handle.src, state=handle.record.state,
                            prompt=str(inp.get("prompt", "")), continue_=cont,
                            model=str(inp.get("model") or spec.model), thinking=inp.get("thinking", spec.thinking),
                            cwd=cwd, instructions=spec.instructions, workspace=spec.workspace,
                            masking=spec.masking, conversation=conversation,
                            traceparent=tracing.turn_begin(self.state, iid, handle.src, handle.record.state))
        except ValidationError as exc:
            asyncio.get_running_loop().call_soon(
                handle.error, {"message": f"{handle.record.state}: bad Turn input: "
                                          + ", ".join(sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]}))})
            return None

    def end(self, turn: Turn, abort_only: bool = False) -> None:
        """The Turn's state exited (or the run stopped): answer its outstanding pick and abort its Harness."""
        if not turn.active:
            return
        turn.active = False
        tracing.turn_end(self.state, turn.iid)
        out = turn.outstanding
        if out is not None and out.receipt is None and not abort_only:
            self._answer_cut_off(turn, out)
        self.writer.emit("turn", {"iid": turn.iid, "slot": turn.slot, "state": turn.state, "active": False})
        telemetry.turn_closed(self.state, turn)
        if self.launcher is not None and turn.spec.driver == "harness":
            self.launcher.abort(turn.iid)

    def end_all(self, abort_only: bool = False) -> None:
        for t in self.turns.values():
            self.end(t, abort_only=abort_only)

    def _answer_cut_off(self, turn: Turn, out: Outstanding) -> None:
        """The receipt of a pick whose Turn ended while it was outstanding."""
        interp = self.state.interp
        ev = interp.last_event if interp else None
        # A cancel is not the route: the pick's work was cut off (`unfinished`), whatever event came last.
        by_route = self.state.run_status == "active" and ev is not None and (
            id(ev) in out.seen or (out.event is not None and ev is out.event))
        if by_route:  # D8: the route left the Agent's state; the answer is the Turn's last word
            answer = _last_word(out)
            self._finish_pick(turn, Receipt(delivered=True, moved=True, turn_complete=True, allowed=[],
                                            answer=answer, delivery_id=out.delivery_id, pick=out.name))
            if answer and turn.start.continue_:
                self.notices.setdefault(turn.conversation, []).append(answer)
                self.writer.stage(LedgerKind.NOTICE, turn.conversation, {"text": answer})
        else:  # something else left the state while the pick's work ran
            self._finish_pick(turn, Receipt(delivered=True, moved=True, turn_complete=True, allowed=[],
                                            refused="unfinished", delivery_id=out.delivery_id, pick=out.name))

    # ---- reads ---------------------------------------------------------------------------------------------
    def find(self, address: str) -> Turn:
        t = self.turns.get(address)
        if t is not None:
            return t
        active = [t for t in self.turns.values() if t.slot == address and t.active]
        if active:
            return active[-1]
        latest = [t for t in self.turns.values() if t.slot == address]
        if latest:
            return latest[-1]
        raise UnknownTurn(f"no Turn at {address!r} in run {self.state.run_id}")

    def allowed(self, turn: Turn) -> list[str]:
        if not turn.active or self.state.status_name() != "active":
            return []
        return allowed_picks(self.state.machine, self.state.snapshot, turn.state)

    def surface(self, address: str) -> Surface:
        """The fixed Menu and the Allowed picks now; notices ride the first read of a continued Turn."""
        self.state.usable()
        turn = self.find(address)
        if not turn.active:  # the address is known but its Turn ended: say so, like a 404 would
            return Surface(menu=self.state.machine.menu(turn.slot), allowed=[], turn_over=True)  # type: ignore[attr-defined]
        notices: list[str] = []
        if not turn.notices_read:
            turn.notices_read = True
            notices = list(turn.notices)
            if notices:
                self.notices.pop(turn.conversation, None)
                self.writer.stage(LedgerKind.NOTICE_READ, turn.conversation, {"iid": turn.iid})
                self.writer.flush(None)
        return self.surface_now(turn, notices)

    def surface_now(self, turn: Turn, notices: list[str] | None = None) -> Surface:
        """The Turn's surface without reading it: status() shows its line, and notices stay for the Harness."""
        return Surface(menu=self.state.machine.menu(turn.slot), allowed=self.allowed(turn), notices=notices or [])  # type: ignore[attr-defined]

    # ---- picks ---------------------------------------------------------------------------------------------
    def _earlier(self, address: str, turn: Turn | None, did: str) -> tuple[str, Receipt | Outstanding] | None:
        """What this delivery id already got from the Turn(s) at `address`: (hash, receipt or outstanding pick).
        With no Turn there (a finished run woken again starts none), the journal's receipts still answer."""
        turns = [t for t in self.turns.values() if address in (t.iid, t.slot)] or ([turn] if turn else [])
        for t in turns:
            key = pick_key(t.iid, did)
            if key in self.receipts:
                return self.receipts[key]
            out = t.outstanding
            if out is not None and out.key == key and out.receipt is None:
                return out.hash, out
        if not turns:
            for iid in self._journaled_iids(address):
                if (got := self.receipts.get(pick_key(iid, did))) is not None:
                    return got
        return None

    def _journaled_iids(self, address: str) -> list[str]:
        """The ids of the Turns at `address` (a Turn's id or its slot) that the journal names as having picked."""
        return [iid for iid, slot in self.slots.items() if address in (iid, slot)]

    def receipt_ready(self, address: str, delivery_id: str) -> bool:
        """Does this delivery id have its receipt already? Then the pick sent again is answered at once, with no wait
        for Rest (a host answers the picks a write carries only then)."""
        try:
            turn: Turn | None = self.find(address)
        except UnknownTurn:
            turn = None
        got = self._earlier(address, turn, delivery_id)
        return got is not None and isinstance(got[1], Receipt)

    @tracing.traced_pick
    async def pick(self, address: str, name: str, args: Any, delivery_id: str | None = None) -> Receipt:
        """Deliver a pick and answer it (D1-D12). A pick that starts work waits here until Rest."""
        self.state.usable()
        digest = payload_hash(name, args)
        try:
            turn = self.find(address)
        except UnknownTurn:  # a Turn this life never started (a finished run woken again): the journal answers
            return self._journaled(address, name, delivery_id, digest)
        if delivery_id is not None and (earlier := self._earlier(address, turn, delivery_id)) is not None:
            return await self._again(turn, name, delivery_id, digest, earlier)
        if not turn.active or self.state.status_name() != "active":
            return self._answer(turn, Receipt(delivered=False, moved=False, turn_complete=True, allowed=[],
                                              refused="turn_over", pick=name), args)
        if turn.outstanding is not None and turn.outstanding.receipt is None:
            return self._answer(turn, Receipt(delivered=False, moved=False, turn_complete=False, allowed=[],
                                              refused="not_at_rest", pick=name), args)
        v = verdict(self.state.machine, self.state.snapshot, turn.state, name, args)
        if v.kind != "deliver":
            return self._answer(turn, Receipt(delivered=False, moved=False, turn_complete=False,
                                              allowed=self.allowed(turn), refused=v.reason, detail=v.detail,
                                              pick=name), args)
        return await self._deliver(turn, name, v.event, delivery_id_or_new(delivery_id), digest)

    def _journaled(self, address: str, name: str, delivery_id: str | None, digest: str) -> Receipt:
        """A pick for a Turn the journal names but this life never started (a finished run woken again starts
        none): a retry gets its first receipt, another pick on its id `reused_id`, a new one `turn_over`, as the
        run answered while it still held the Turn. Nothing is written. UnknownTurn if the journal names none."""
        if not self._journaled_iids(address):
            raise UnknownTurn(f"no Turn at {address!r} in run {self.state.run_id}")
        got = None if delivery_id is None else self._earlier(address, None, delivery_id)
        if got is not None and got[0] == digest and isinstance(got[1], Receipt):
            return got[1]
        if got is not None:
            return Receipt(delivered=False, moved=False, turn_complete=False, allowed=[], refused="reused_id",
                           pick=name)
        return Receipt(delivered=False, moved=False, turn_complete=True, allowed=[], refused="turn_over", pick=name)

    async def _again(self, turn: Turn, name: str, delivery_id: str, digest: str,
                     earlier: tuple[str, Receipt | Outstanding]) -> Receipt:
        """A delivery id used before: its first receipt (or a wait for it), or `reused_id` for another pick."""
        h, got = earlier
        if h != digest:  # same id, another pick or other arguments: refused, and nothing is written
            r = Receipt(delivered=False, moved=False, turn_complete=False, allowed=self.allowed(turn),
                        refused="reused_id", pick=name,
                        detail=f"delivery_id {delivery_id!r} was already used by this Turn for another pick "
                               "or other arguments; a retry must repeat them exactly, a new pick needs a new id")
            self.writer.emit("receipt", {"iid": turn.iid, "slot": turn.slot, **r.model_dump()}, durable=False)
            return r
        if isinstance(got, Receipt):
            return got
        if got.future is None:
            got.future = asyncio.get_running_loop().create_future()
        return await asyncio.shield(got.future)

    async def _deliver(self, turn: Turn, name: str, event: Event, did: str, digest: str) -> Receipt:
        out = Outstanding(name=name, delivery_id=did, key=pick_key(turn.iid, did), hash=digest, event=event)
        turn.outstanding = out
        w = self.writer
        w.emit("pick", {"iid": turn.iid, "slot": turn.slot, "name": name, "args": event.payload})
        w.stage(LedgerKind.ADMISSION, out.key, {"iid": turn.iid, "slot": turn.slot, "name": name,
                                                "args": event.payload, "sender": event.sender,
                                                "delivery_id": did, "hash": digest})
        w.emit("admission", {"party": "agent", "id": turn.slot, "iid": turn.iid, "name": name,
                             "args": event.payload, "delivery_id": did})
        assert self.state.interp is not None
        # One transaction per pick at Rest: a pick the chart ignores is journaled with its receipt (no admission in
        # the journal whose receipt a crash could lose), and so is a quiet macrostep (engine._on_commit).
        with w.delivering_pick(event):
            self.state.interp.send(event)
        if out.receipt is not None:  # the route left the Agent's state: answered by `end`
            w.flush(None)
            return out.receipt
        snap = self.state.snapshot
        if not out.moved or at_rest(snap, turn.state, turn.invoke_id) or snap.status != "active":
            answer = out.answers[-1] if out.answers else None
            receipt = self._finish_pick(turn, Receipt(delivered=True, moved=out.moved, turn_complete=not turn.active,
                                                      allowed=self.allowed(turn), answer=answer, delivery_id=did,
                                                      pick=name))
            w.flush(None)  # (written already, with the receipt, unless the pick was answered otherwise)
            return receipt
        w.flush(None)  # a held macrostep is journaled before anything waits
        out.future = asyncio.get_running_loop().create_future()
        return await asyncio.shield(out.future)

    def resolve_outstanding(self, snap: Snapshot) -> None:
        """Answer each outstanding pick whose Agent's state is back at Rest (D7)."""
        for t in self.turns.values():
            out = t.outstanding
            if not t.active or out is None or out.receipt is not None or out.future is None:
                continue
            if at_rest(snap, t.state, t.invoke_id):
                self._finish_pick(t, Receipt(delivered=True, moved=out.moved, turn_complete=False,
                                             allowed=self.allowed(t), answer=_last_word(out),
                                             delivery_id=out.delivery_id, pick=out.name))

    def _finish_pick(self, turn: Turn, receipt: Receipt) -> Receipt:
        """The receipt of the outstanding pick: journaled under its scoped id and hash, then handed to the waiter."""
        out = turn.outstanding
        if out is None or out.receipt is not None or receipt.delivery_id != out.delivery_id:
            return self._answer(turn, receipt)
        out.receipt = receipt
        self.receipts[out.key] = (out.hash, receipt)
        self.writer.stage(LedgerKind.RECEIPT, out.key, {"receipt": receipt.model_dump(), "hash": out.hash})
        self.writer.emit("receipt", {"iid": turn.iid, "slot": turn.slot, **receipt.model_dump()})
        self.writer.flush(None)
        if out.future is not None and not out.future.done():
            out.future.set_result(receipt)
        return receipt

    def _answer(self, turn: Turn, receipt: Receipt, args: Any = None) -> Receipt:
        """A refusal: the attempt and its receipt are shown on the feed, and nothing is journaled."""
        self.writer.emit("pick", {"iid": turn.iid, "slot": turn.slot, "name": receipt.pick, "args": args},
                         durable=False)
        self.writer.emit("receipt", {"iid": turn.iid, "slot": turn.slot, **receipt.model_dump()}, durable=False)
        return receipt

    # ---- what each macrostep did to the outstanding picks ----------------------------------------------------
    def _waiting(self) -> list[tuple[Turn, Outstanding]]:
        """The Turns whose pick has no receipt yet, with that pick."""
        return [(t, t.outstanding) for t in self.turns.values()
                if t.outstanding is not None and t.outstanding.receipt is None]

    def note_step(self, interp: Interpreter, effects: list[Any]) -> None:
        """After a macrostep, before its side effects: note whether each pick's own transition moved anything and
        the answers its route wrote, then stage how far each outstanding pick got."""
        ev = interp.last_event
        for t, out in self._waiting():
            if out.event is not None and ev is out.event:
                out.moved = any(k.event_type == out.name and k.microstep == 1 and
                                (k.targets is not None or k.has_actions) for k in interp.last_took)
            for eff in effects:
                if isinstance(eff, AnswerEffect) and _in(eff.state, t.state):
                    out.answers.append(eff.text)
        for _t, out in self._waiting():
            if (p := out.progress()) is not None:
                self.writer.stage(LedgerKind.OUTSTANDING, out.key, p)

    def chain(self, ev: Event | None) -> dict[str, Any]:
        """The chart's `chain` extra for event `ev`: the Chain of the first active Turn with a pick outstanding, `ev`
        joined to it if `ev` is a reply from under that Turn's state."""
        if ev is None or not self.state.live:
            return {"chain": []}
        snap = self.state.snapshot
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
        """What `ev` adds to the Turn's Chain: a child's output or a party's event from under its state."""
        if ev.type.startswith("xstate.done.actor."):
            cid = ev.type[len("xstate.done.actor."):]
            rec = snap.children.get(cid)
            if rec is not None and cid != turn.invoke_id and _in(rec.state, turn.state):
                return ev.get("output")
            return _NO_REPLY
        seat_state = self._seat_state(ev.sender, turn)
        if seat_state is not None and seat_state.startswith(turn.state + "."):
            return {"type": ev.type, **ev.payload}
        return _NO_REPLY

    def _seat_state(self, sender: Any, turn: Turn) -> str | None:
        """The state of the party that sent an event (a Gate's, or another state of an Agent under the Turn's)."""
        if not (isinstance(sender, dict) and sender.get("party") in ("gate", "agent")):
            return None
        st = self.state.machine.structure
        if sender["party"] == "agent":
            seat_states = [p for p in st.agent_states.get(sender["id"], []) if p != turn.state]
            return next((p for p in seat_states if p.startswith(turn.state + ".")), None)
        seat = st.gates.get(sender["id"])
        return seat.state if seat else None

    def waits(self, address: str, key: str | None) -> None:
        """The Turn's Harness waits for room in the KV budget under `key` (None: it was let in). Kept in memory
        only: a run that parks meanwhile journals it then (`Transcripts.mark_parked`)."""
        self.state.usable()
        turn = self.find(address)
        turn.waits_for = key if turn.active else None

    def fault(self, address: str, reason: str) -> None:
        """The Harness gave up on a Turn (H8, H9): route `agent.fault` (mechanism event, no Sender)."""
        self.state.usable()
        turn = self.find(address)
        interp = self.state.interp
        if not turn.active or interp is None:
            return
        self.writer.stage(LedgerKind.ADMISSION, None, {"iid": turn.iid, "name": "agent.fault", "reason": reason})
        self.writer.emit("admission", {"party": None, "iid": turn.iid, "name": "agent.fault", "reason": reason})
        interp.send(Event("agent.fault", {"reason": reason, "slot": turn.slot, "iid": turn.iid}))
