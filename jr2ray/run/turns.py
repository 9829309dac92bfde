"""Turns and delivery: a Turn per Agent slot, picks delivered (D1-D12), outstanding picks answered at Rest.

Every pick's delivery id is scoped by its Turn and carries a payload hash; both, the outstanding pick and its
progress, and the receipt go to the journal, so a retry after any restart gets the same receipt or waits for it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from jr2ray.authoring import TURN_INPUT_KEYS, AgentSpec
from jr2ray.chart import ChildHandle, Event
from jr2ray.menu import Receipt, Surface, allowed_picks, at_rest, verdict

from . import tracing
from .engine_state import EngineState
from .models import TurnSpec
from .replay import Pending, payload_hash, pick_key
from .store import LedgerKind


class TurnLauncher(Protocol):
    """Starts and aborts the Harness of a Turn. The layer above (jr2ray.harness) provides it."""

    def start(self, turn: TurnSpec) -> None: ...

    def abort(self, iid: str) -> None: ...


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


def reply_text(reply: Any) -> str:
    if isinstance(reply, str):
        return reply
    return json.dumps(reply, ensure_ascii=False, sort_keys=True, default=str)


def _last_word(out: Outstanding) -> str | None:
    return out.answers[-1] if out.answers else (reply_text(out.chain[-1]) if out.chain else None)


class TurnsMixin(EngineState):
    """The Turn half of RunEngine."""

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
                             masking=spec.masking, conversation=conversation,
                             traceparent=tracing.turn_begin(self, iid, handle.src, handle.record.state))
        except ValidationError as exc:
            asyncio.get_running_loop().call_soon(
                handle.error, {"message": f"{handle.record.state}: bad Turn input: "
                                          + ", ".join(sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]}))})
            return
        turn = Turn(start=start, invoke_id=handle.id, seq=seq, spec=spec)
        if cont:
            turn.notices = list(self._pending_notices.get(conversation, []))
        pending = next((p for p in self._replayed_pending.values() if p.iid == iid), None)
        if pending is not None:  # it was waiting for Rest when the Run stopped: it waits again, same receipt
            del self._replayed_pending[pending.key]
            turn.outstanding = Outstanding.restored(pending)
        self.turns[iid] = turn
        handle.on_stop(lambda: self._end_turn(turn))
        self._emit("turn", {"iid": iid, "slot": turn.slot, "state": turn.state, "active": True})
        if spec.driver == "harness" and self.launcher is not None:
            self.launcher.start(turn.start)

    def _end_turn(self, turn: Turn, abort_only: bool = False) -> None:
        if not turn.active:
            return
        turn.active = False
        tracing.turn_end(self, turn.iid)
        out = turn.outstanding
        if out is not None and out.receipt is None and not abort_only:
            interp = self.interp
            ev = interp.last_event if interp else None
            # A cancel is not the route: the pick's work was cut off (`unfinished`), whatever event came last.
            by_route = self.run_status == "active" and ev is not None and (
                id(ev) in out.seen or (out.event is not None and ev is out.event))
            if by_route:  # D8: the route left the Agent's state; the answer is the Turn's last word
                answer = _last_word(out)
                self._finish_pick(turn, Receipt(delivered=True, moved=True, turn_complete=True, allowed=[],
                                                answer=answer, delivery_id=out.delivery_id, pick=out.name))
                if answer and turn.start.continue_:
                    self._pending_notices.setdefault(turn.conversation, []).append(answer)
                    self._stage(LedgerKind.NOTICE, turn.conversation, {"text": answer})
            else:  # something else left the state while the pick's work ran
                self._finish_pick(turn, Receipt(delivered=True, moved=True, turn_complete=True, allowed=[],
                                                refused="unfinished", delivery_id=out.delivery_id, pick=out.name))
        self._emit("turn", {"iid": turn.iid, "slot": turn.slot, "state": turn.state, "active": False})
        if self.launcher is not None and turn.spec.driver == "harness":
            self.launcher.abort(turn.iid)

    def _find_turn(self, address: str) -> Turn:
        from .errors import UnknownTurn

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
        self._usable()
        turn = self._find_turn(address)
        if not turn.active:  # the address is known but its Turn ended: say so, like a 404 would
            return Surface(menu=self.machine.menu(turn.slot), allowed=[], turn_over=True)  # type: ignore[attr-defined]
        notices: list[str] = []
        if not turn.notices_read:
            turn.notices_read = True
            notices = list(turn.notices)
            if notices:
                self._pending_notices.pop(turn.conversation, None)
                self._stage(LedgerKind.NOTICE_READ, turn.conversation, {"iid": turn.iid})
                self._flush(None)
        return self._surface_now(turn, notices)

    def _surface_now(self, turn: Turn, notices: list[str] | None = None) -> Surface:
        """The Turn's surface without reading it: status() shows its line, and notices stay for the Harness."""
        return Surface(menu=self.machine.menu(turn.slot), allowed=self._allowed(turn), notices=notices or [])  # type: ignore[attr-defined]

    def _earlier(self, address: str, turn: Turn, did: str) -> tuple[str, Receipt | Outstanding] | None:
        """What this delivery id already got from the Turn(s) at `address`: (hash, receipt or outstanding pick)."""
        for t in [t for t in self.turns.values() if address in (t.iid, t.slot)] or [turn]:
            key = pick_key(t.iid, did)
            if key in self._receipts:
                return self._receipts[key]
            out = t.outstanding
            if out is not None and out.key == key and out.receipt is None:
                return out.hash, out
        return None

    @tracing.traced_pick
    async def pick(self, address: str, name: str, args: Any, delivery_id: str | None = None) -> Receipt:
        """Deliver a pick and answer it (D1-D12). A pick that starts work waits here until Rest."""
        self._usable()
        turn = self._find_turn(address)
        digest = payload_hash(name, args)
        if delivery_id is not None and (earlier := self._earlier(address, turn, delivery_id)) is not None:
            h, got = earlier
            if h != digest:  # same id, another pick or other arguments: refused, and nothing is written
                r = Receipt(delivered=False, moved=False, turn_complete=False, allowed=self._allowed(turn),
                            refused="reused_id", pick=name,
                            detail=f"delivery_id {delivery_id!r} was already used by this Turn for another pick "
                                   "or other arguments; a retry must repeat them exactly, a new pick needs a new id")
                self._emit("receipt", {"iid": turn.iid, "slot": turn.slot, **r.model_dump()}, durable=False)
                return r
            if isinstance(got, Receipt):
                return got
            if got.future is None:
                got.future = asyncio.get_running_loop().create_future()
            return await asyncio.shield(got.future)
        if not turn.active or self.status_name() != "active":
            return self._answer(turn, Receipt(delivered=False, moved=False, turn_complete=True, allowed=[],
                                              refused="turn_over", pick=name), args)
        if turn.outstanding is not None and turn.outstanding.receipt is None:
            return self._answer(turn, Receipt(delivered=False, moved=False, turn_complete=False, allowed=[],
                                              refused="not_at_rest", pick=name), args)
        v = verdict(self.machine, self.snapshot, turn.state, name, args)
        if v.kind != "deliver":
            return self._answer(turn, Receipt(delivered=False, moved=False, turn_complete=False,
                                              allowed=self._allowed(turn), refused=v.reason, detail=v.detail,
                                              pick=name), args)
        return await self._deliver(turn, name, v.event, delivery_id or uuid.uuid4().hex[:16], digest)

    async def _deliver(self, turn: Turn, name: str, event: Event, did: str, digest: str) -> Receipt:
        out = Outstanding(name=name, delivery_id=did, key=pick_key(turn.iid, did), hash=digest, event=event)
        turn.outstanding = out
        self._emit("pick", {"iid": turn.iid, "slot": turn.slot, "name": name, "args": event.payload})
        self._stage(LedgerKind.ADMISSION, out.key, {"iid": turn.iid, "slot": turn.slot, "name": name,
                                                    "args": event.payload, "sender": event.sender,
                                                    "delivery_id": did, "hash": digest})
        self._emit("admission", {"party": "agent", "id": turn.slot, "iid": turn.iid, "name": name,
                                 "args": event.payload, "delivery_id": did})
        assert self.interp is not None
        # One transaction per pick at Rest: a pick the chart ignores is journaled with its receipt (no admission in
        # the journal whose receipt a crash could lose), and so is a quiet macrostep (engine._on_commit).
        self._delivering = event
        self._holding = True
        try:
            self.interp.send(event)
        finally:
            self._delivering = None
            self._holding = False
        if out.receipt is not None:  # the route left the Agent's state: answered by _end_turn
            self._flush(None)
            return out.receipt
        snap = self.snapshot
        if not out.moved or at_rest(snap, turn.state, turn.invoke_id) or snap.status != "active":
            answer = out.answers[-1] if out.answers else None
            receipt = self._finish_pick(turn, Receipt(delivered=True, moved=out.moved, turn_complete=not turn.active,
                                                      allowed=self._allowed(turn), answer=answer, delivery_id=did,
                                                      pick=name))
            self._flush(None)  # (written already, with the receipt, unless the pick was answered otherwise)
            return receipt
        self._flush(None)  # a held macrostep is journaled before anything waits
        out.future = asyncio.get_running_loop().create_future()
        return await asyncio.shield(out.future)

    def _resolve_outstanding(self, snap: Any) -> None:
        for t in self.turns.values():
            out = t.outstanding
            if not t.active or out is None or out.receipt is not None or out.future is None:
                continue
            if at_rest(snap, t.state, t.invoke_id):
                self._finish_pick(t, Receipt(delivered=True, moved=out.moved, turn_complete=False,
                                             allowed=self._allowed(t), answer=_last_word(out),
                                             delivery_id=out.delivery_id, pick=out.name))

    def _finish_pick(self, turn: Turn, receipt: Receipt) -> Receipt:
        """The receipt of the outstanding pick: journaled under its scoped id and hash, then handed to the waiter."""
        out = turn.outstanding
        if out is None or out.receipt is not None or receipt.delivery_id != out.delivery_id:
            return self._answer(turn, receipt)
        out.receipt = receipt
        self._receipts[out.key] = (out.hash, receipt)
        self._stage(LedgerKind.RECEIPT, out.key, {"receipt": receipt.model_dump(), "hash": out.hash})
        self._emit("receipt", {"iid": turn.iid, "slot": turn.slot, **receipt.model_dump()})
        self._flush(None)
        if out.future is not None and not out.future.done():
            out.future.set_result(receipt)
        return receipt

    def _answer(self, turn: Turn, receipt: Receipt, args: Any = None) -> Receipt:
        """A refusal: the attempt and its receipt are shown on the feed, and nothing is journaled."""
        self._emit("pick", {"iid": turn.iid, "slot": turn.slot, "name": receipt.pick, "args": args}, durable=False)
        self._emit("receipt", {"iid": turn.iid, "slot": turn.slot, **receipt.model_dump()}, durable=False)
        return receipt

    def _stage_progress(self) -> None:
        """Journal how far each outstanding pick got, in the macrostep that moved it."""
        for t in self.turns.values():
            out = t.outstanding
            if out is not None and out.receipt is None and (p := out.progress()) is not None:
                self._stage(LedgerKind.OUTSTANDING, out.key, p)

    def fault(self, address: str, reason: str) -> None:
        """The Harness gave up on a Turn (H8, H9): route `agent.fault` (mechanism event, no Sender)."""
        self._usable()
        turn = self._find_turn(address)
        if not turn.active or self.interp is None:
            return
        self._stage(LedgerKind.ADMISSION, None, {"iid": turn.iid, "name": "agent.fault", "reason": reason})
        self._emit("admission", {"party": None, "iid": turn.iid, "name": "agent.fault", "reason": reason})
        self.interp.send(Event("agent.fault", {"reason": reason, "slot": turn.slot, "iid": turn.iid}))
