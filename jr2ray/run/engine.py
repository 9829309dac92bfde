"""The Run engine: one Workflow execution on asyncio, with no Ray. LocalRun and the RunActor both host it.

This module holds the run's lifecycle, its journal writes and the chart's hooks. The rest is split by job: journal
replay (`replay`), Turns and delivery (`turns`), Gates (`gates`), Effects (`effect_slots`). The chart's Interpreter
runs the statechart; the engine decides how each actor slot starts.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import time
from collections.abc import Callable
from typing import Any

from jr2ray.authoring import (
    AgentSpec,
    AnswerEffect,
    EffectSpec,
    FailSpec,
    GateSpec,
    Jr2Machine,
)
from jr2ray.chart import (
    ChildHandle,
    Clock,
    Event,
    Interpreter,
    RestoreError,
    Snapshot,
    restore,
)
from jr2ray.menu import Receipt
from jr2ray.menu.texts import allowed_line

from . import tracing
from .effect_slots import EffectsMixin
from .errors import RunCorrupt, RunDrifted, RunError, RunFenced, RunLost
from .gates import GatesMixin
from .models import PickEvent, RunStatus, RunStatusName, TurnView
from .replay import ConversationLog, Pending, replay
from .store import Journal, JournalStore, LedgerKind
from .transcripts import TranscriptsMixin
from .turns import Outstanding, Turn, TurnLauncher, TurnsMixin

__all__ = ["Outstanding", "RunEngine", "Turn", "TurnLauncher"]


FEED_KEEP = 2000  # feed events held in memory; older ones are trimmed 1000 at a time
TIMER_EVENT = "xstate.after."  # the type of every event a chart's timer sends
EPHEMERAL_MAX = 100  # unjournaled feed events (refusals) in a row; a restart skips this many numbers


def _in(path: str, state: str) -> bool:
    return path == state or path.startswith(state + ".")


class RunEngine(TurnsMixin, GatesMixin, EffectsMixin, TranscriptsMixin):
    """One run. Call `start()` inside a running event loop.

    `failure` is a journal that could not be opened (RunLost, RunCorrupt): the engine then only reports it.
    """

    def __init__(self, machine: Jr2Machine, run_id: str, input: Any = None, *, journal: Journal | None = None,
                 launcher: TurnLauncher | None = None, clock: Clock | None = None, workflow_name: str | None = None,
                 on_event: Callable[[PickEvent], None] | None = None, failure: RunError | None = None,
                 origin: dict[str, Any] | None = None) -> None:
        self.machine = machine
        self.run_id = run_id
        self.workflow_name = workflow_name or machine.id
        self.journal = journal
        self.launcher = launcher
        self.clock = clock
        self.on_event = on_event
        self.turns: dict[str, Turn] = {}
        self._pending_notices: dict[str, list[str]] = {}
        self.transcripts: dict[str, ConversationLog] = {}
        self._receipts: dict[str, tuple[str, Receipt]] = {}  # scoped pick key -> (payload hash, receipt)
        self._gate_receipts: dict[str, str] = {}  # scoped Gate key -> payload hash
        self._replayed_pending: dict[str, Pending] = {}
        self._effects_started: set[str] = set()
        self._effects_finished: dict[str, dict[str, Any]] = {}
        self._staged: list[tuple[str, str | None, dict[str, Any]]] = []
        # A quiet macrostep's snapshot (see `_on_commit`), not yet written: the next `_flush` carries it.
        self._held: dict[str, Any] | None = None
        self._holding = False  # a pick is being delivered: its quiet macrostep waits for the pick's receipt
        self._tasks: set[asyncio.Task[Any]] = set()
        self._done = asyncio.Event()
        self.run_status: RunStatusName = "active"
        self.telemetry_rows: list[dict[str, Any]] = []
        # The event feed: (number, event), newest FEED_KEEP in memory. Numbers never shift or repeat, across
        # restarts too: journaled events come back with theirs, and a restart skips EPHEMERAL_MAX numbers for
        # the refusals that were shown but (changing nothing) never journaled.
        self.history: list[tuple[int, PickEvent]] = []
        self.feed_next = 0
        self._ephemeral_run = 0
        self._flush_soon = False
        self._delivering: Event | None = None  # the pick's event being sent now (see `_on_ignored`)
        self.broken: str | None = None  # why the run cannot go on (drifted, lost, corrupt); None while it can
        self.interp: Interpreter | None = None
        self.origin = origin or {}  # how the run was started (env without secrets, launcher): what a resume needs
        if failure is not None:
            self._fail(failure)
            return
        restored_snapshot = self._load(input)
        if self.broken is not None:
            return
        self.input = input
        validated = machine.validate_input(input) if restored_snapshot is None else None
        # A run woken after it ended has its status in the feed already: waking it must not say it again.
        self._ended_before = restored_snapshot is not None and restored_snapshot.status != "active"
        self.interp = Interpreter(machine.chart, validated, clock=clock, snapshot=restored_snapshot,
                                  starter=self._starter, extras=self._extras)
        self.interp.on_commit(self._on_commit)
        self.interp.on_ignored(self._on_ignored)
        self.interp.subscribe(self._after_commit)

    @classmethod
    def from_store(cls, machine: Jr2Machine, run_id: str, input: Any, store: JournalStore, *, create: bool,
                   opened: Journal | None = None, **kw: Any) -> RunEngine:
        """Open the run's journal (or take `opened`, the caller's open handle on it) and build the engine on it.
        `create=False`: a missing journal is a lost run."""
        if opened is not None:
            return cls(machine, run_id, input, journal=opened, **kw)
        try:
            journal = store.open(run_id, create=create)
        except RunLost as exc:
            store.mark_lost(run_id, str(exc))
            return cls(machine, run_id, input, failure=exc, **kw)
        except RunCorrupt as exc:
            return cls(machine, run_id, input, failure=exc, **kw)
        return cls(machine, run_id, input, journal=journal, **kw)

    # ---- journal -------------------------------------------------------------------------------------------
    def _fail(self, exc: RunError) -> None:
        """The run cannot go on (its journal is gone, damaged, or of another shape): stop, and say why."""
        self.broken = str(exc)
        self.run_status = ("lost" if isinstance(exc, RunLost) else "corrupt" if isinstance(exc, RunCorrupt)
                           else "drifted")
        self._staged, self._held = [], None
        if self.interp is not None:
            self.interp.stop()
            for t in self.turns.values():
                self._end_turn(t, abort_only=True)
        self._done.set()

    def _usable(self) -> None:
        """Raise the reason this run takes nothing any more, if it has one."""
        if self.broken is None:
            return
        kind = {"lost": RunLost, "corrupt": RunCorrupt}.get(self.run_status, RunDrifted)
        raise kind(self.broken)

    def _load(self, input: Any) -> Snapshot | None:
        j = self.journal
        if j is None:
            self.origin = tracing.rooted(self.origin, self.run_id, self.workflow_name)  # a run without a journal
            return None
        try:
            loaded = j.load()
        except RunCorrupt as exc:
            self._fail(exc)
            return None
        row = loaded.row
        if row is None:
            data = input.model_dump(mode="json") if hasattr(input, "model_dump") else input
            j.create(self.run_id, self.workflow_name, self.machine.digest, data)
            self.origin = tracing.rooted(self.origin, self.run_id, self.workflow_name)
            self._stage(LedgerKind.START, None, self.origin)
            return None
        latest = loaded.snapshot
        if row.digest != self.machine.digest or (latest and latest[0] != self.machine.digest):
            self._fail(RunDrifted(f"journal digest {row.digest} != machine digest {self.machine.digest}"))
            return None
        try:
            r = replay(loaded.ledger)
        except ValueError as exc:
            self._fail(RunCorrupt(f"the journal of run {self.run_id} is damaged: {exc}"))
            return None
        self._receipts, self._gate_receipts, self._replayed_pending = r.receipts, r.gate_receipts, r.pending
        self._effects_started, self._effects_finished = r.effects_started, r.effects_finished
        self._pending_notices, self.telemetry_rows = r.notices, r.telemetry
        self.transcripts = r.transcripts
        self.origin = tracing.carried(self.origin, r.origin)  # a wake continues the run's trace
        self.history = [(seq, PickEvent.model_validate(ev)) for seq, ev in r.feed]
        # Past any number an earlier life may have shown unjournaled; a run admission queued never ran, so
        # it showed none and starts at 0.
        never_ran = latest is None and not r.feed
        self.feed_next = 0 if never_ran else (r.feed[-1][0] + 1 if r.feed else 0) + EPHEMERAL_MAX
        if r.caller_status is not None:
            self.run_status = r.caller_status  # type: ignore[assignment]
        if latest is None:
            return None
        try:
            return restore(self.machine.chart, latest[1])
        except RestoreError as exc:
            self._fail(RunDrifted(str(exc)))
            return None

    def _stage(self, kind: LedgerKind | str, key: str | None, data: dict[str, Any]) -> None:
        if self.broken is None:
            self._staged.append((str(getattr(kind, "value", kind)), key, data))

    def _flush(self, snapshot: dict[str, Any] | None = None) -> None:
        """Write what is staged (and a held snapshot, unless a newer one is given) as one transaction. A journal that
        went bad stops the run here, before any effect."""
        held, self._held = self._held, None
        snapshot = held if snapshot is None else snapshot
        entries, self._staged = self._staged, []
        if self.journal is None or self.broken is not None or not (entries or snapshot is not None):
            return
        try:
            self.journal.commit(self.machine.digest, self.status_name(), snapshot, entries)
        except RunFenced as exc:  # a newer activation writes this run now: stop here, writing nothing more
            self.broken = str(exc)
            self._staged = []
            if self.interp is not None:
                self.interp.stop()
            self._done.set()
            raise
        except (RunLost, RunCorrupt) as exc:
            self._emit("status", {"status": "lost" if isinstance(exc, RunLost) else "corrupt", "error": str(exc)})
            self._fail(exc)
            raise

    def _emit(self, kind: str, data: dict[str, Any], durable: bool = True) -> None:
        """One feed event. Durable ones are journaled (with the next transaction, or one made soon); refusals are
        not, since a refusal changes nothing, the journal included."""
        ev = PickEvent(kind=kind, at=time.time(), data=data)  # type: ignore[arg-type]
        if self.on_event is not None:
            self.on_event(ev)
        if durable:
            self._ephemeral_run = 0
        elif self._ephemeral_run >= EPHEMERAL_MAX:  # a flood of refusals: shown to callers, not to the feed
            return
        else:
            self._ephemeral_run += 1
        seq, self.feed_next = self.feed_next, self.feed_next + 1
        self.history.append((seq, ev))
        if len(self.history) > FEED_KEEP:
            del self.history[:FEED_KEEP // 2]
        if durable and self.journal is not None and self.broken is None:
            self._stage(LedgerKind.FEED, str(seq), ev.model_dump(mode="json"))
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Feed events emitted between macrosteps are written once this loop turn is over, all in one go."""
        if self._flush_soon:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: they go with the next transaction
        self._flush_soon = True
        loop.call_soon(self._flush_staged)

    def _flush_staged(self) -> None:
        self._flush_soon = False
        if (self._staged or self._held is not None) and self.broken is None:
            try:
                self._flush(None)
            except RunError:
                pass  # the run is now lost or corrupt, and says so

    def feed(self, since: int = 0) -> list[dict[str, Any]]:
        """Feed events numbered `since` and later still held, each with its number as `seq`."""
        start = bisect.bisect_left(self.history, since, key=lambda h: h[0])
        return [{**ev.model_dump(), "seq": seq} for seq, ev in self.history[start:]]

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> RunEngine:
        if self.interp is None:
            return self
        if self.run_status in ("cancelled", "stopped"):
            self._done.set()
            return self
        self.interp.start()
        if self.interp.snapshot is not None:  # a pick restored at Rest is answered at once
            self._resolve_outstanding(self.interp.snapshot)
        return self

    @property
    def snapshot(self) -> Snapshot:
        if self.interp is None or self.interp.snapshot is None:
            raise RunDrifted(self.broken or "the run has no live snapshot")
        return self.interp.snapshot

    @property
    def drift(self) -> str | None:
        return self.broken if self.run_status == "drifted" else None

    def status_name(self) -> RunStatusName:
        if self.run_status != "active":
            return self.run_status
        if self.interp is None or self.interp.snapshot is None:
            return "active"
        s = self.interp.snapshot.status
        return "active" if s == "active" else ("done" if s == "done" else "error")

    def _after_commit(self, snap: Snapshot) -> None:
        tracing.step_end(self)
        if self.broken is not None:
            return
        self._resolve_outstanding(snap)
        if self._held is not None and not self._holding:  # a quiet macrostep no receipt of this commit carried
            self._flush(None)
        if snap.status != "active" and self.run_status == "active":
            if not self._ended_before:
                self._emit("status", {"status": self.status_name(), "output": snap.output, "error": snap.error})
            for t in self.turns.values():
                self._end_turn(t)
            self._done.set()

    def cancel(self) -> RunStatus:
        """End the run as `cancelled`, aborting every Turn (R6)."""
        if self.status_name() == "active" and self.interp is not None:
            self.run_status = "cancelled"
            self._stage(LedgerKind.STATUS, None, {"status": "cancelled"})
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
            self._stage(LedgerKind.STATUS, None, {"status": "stopped"})
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
        if self._ended_before:  # the restore of a run that had ended: its journal holds it, and a read writes nothing
            return
        ev = interp.last_event
        tracing.step_begin(self, ev)
        if ev is not None and ev.type.startswith(TIMER_EVENT):  # a timer fired: the timeline shows it
            self._emit("timer", {"event": ev.type})
        for t in self.turns.values():
            out = t.outstanding
            if out is None or out.receipt is not None:
                continue
            if out.event is not None and ev is out.event:
                out.moved = any(k.event_type == out.name and k.microstep == 1 and
                                (k.targets is not None or k.has_actions) for k in interp.last_took)
            for eff in effects:
                if isinstance(eff, AnswerEffect) and _in(eff.state, t.state):
                    out.answers.append(eff.text)
        self._stage_progress()
        if self.journal is not None and interp.quiet(snap, effects):
            # Nothing leaves the process before this commit's subscribers run (or, for a pick, before its receipt
            # is staged): hold the snapshot, so the macrostep and the receipt it leads to are one transaction.
            self._held = interp.persisted()
            return
        self._flush(interp.persisted())

    def _on_ignored(self, snap: Snapshot, ev: Event) -> None:
        if ev is self._delivering:  # a pick that moved nothing: its receipt follows at once, in this transaction
            return
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

    # ---- reads ---------------------------------------------------------------------------------------------
    def status(self) -> RunStatus:
        """What the journal says. A run that stopped on a bad journal shows no state the journal does not hold."""
        if self.interp is None or self.interp.snapshot is None or self.run_status in ("lost", "corrupt"):
            row = self.journal.run() if self.journal and self.run_status != "corrupt" else None
            return RunStatus(id=self.run_id, workflow=self.workflow_name, digest=row.digest if row else "",
                             status=self.status_name(), error=self.broken)
        snap = self.snapshot
        turns: list[TurnView] = []
        for t in self.turns.values():
            allowed = self._allowed(t) if t.active else None
            turns.append(TurnView(iid=t.iid, slot=t.slot, state=t.state, active=t.active,
                                  conversation=t.conversation,
                                  outstanding=(t.outstanding.name if t.outstanding and t.outstanding.receipt is None
                                               else None),
                                  allowed_now=allowed_line(allowed) if allowed is not None else None,
                                  allowed=allowed, unread_notices=bool(t.active and not t.notices_read
                                                                       and t.notices)))
        live = self.status_name() == "active"
        return RunStatus(id=self.run_id, workflow=self.workflow_name, digest=self.machine.digest,
                         status=self.status_name(), value=snap.value, context=_jsonable(snap.context),
                         output=_jsonable(snap.output), error=self.broken or _jsonable(snap.error),
                         gates=self.gates() if live else [], turns=turns)

    def note_parked(self) -> None:
        """The run parks now (its host lets it go): journaled, so its timeline shows where the parked period starts."""
        self._emit("park", {"parked": True})
        self._flush_staged()

    def telemetry(self) -> list[dict[str, Any]]:
        return list(self.telemetry_rows)

    def record_telemetry(self, row: dict[str, Any]) -> None:
        self.telemetry_rows.append(row)
        self._stage(LedgerKind.TELEMETRY, row.get("iid"), row)
        self._emit("telemetry", row)
        self._flush(None)


class _NoReply:
    pass


_NO_REPLY = _NoReply()


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))
