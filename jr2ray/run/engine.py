"""The Run engine: one Workflow execution on asyncio, with no Ray. LocalRun and the RunActor both host it.

The engine is built by composition. It owns the run's lifecycle and the chart's hooks, and holds its parts: the
run's state (`engine_state.RunState`), the one writer of its journal and feed (`journal_writer.JournalWriter`), and
the collaborators that each do one job through that writer: `turns.Turns` (Turns, picks and receipts),
`gates.Gates`, `effect_slots.Effects` and `transcripts.Transcripts`. No part calls back into the engine; journal
replay is `replay`. The chart's Interpreter runs the statechart; the engine decides how each actor slot starts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from jr2ray.authoring import AgentSpec, EffectSpec, FailSpec, GateSpec, Jr2Machine
from jr2ray.chart import ChildHandle, Clock, Event, Interpreter, RestoreError, Snapshot, restore
from jr2ray.menu import Receipt, Surface
from jr2ray.menu.texts import allowed_line
from jr2ray.settings import Settings

from . import telemetry, tracing
from .effect_slots import Effects
from .engine_state import RunState
from .errors import RunCorrupt, RunDrifted, RunError, RunFenced, RunLost
from .gates import Gates
from .journal_writer import JournalWriter, snapshot_text
from .models import GateView, PickEvent, RunStatus, RunStatusName, SendResult, Transcript, TranscriptEntry, TurnView
from .replay import ConversationLog, replay
from .store import Journal, JournalStore, LedgerKind
from .transcripts import Transcripts
from .turns import Outstanding, Turn, TurnLauncher, Turns

__all__ = ["Outstanding", "RunEngine", "Turn", "TurnLauncher"]


def _fail_slot(handle: ChildHandle, spec: FailSpec) -> None:
    """A `fail()` slot: the invoke errors at once with its reason."""
    reason = handle.input.get("reason") if isinstance(handle.input, dict) else handle.input
    asyncio.get_running_loop().call_soon(handle.error, {"reason": reason or "fail()"})


TIMER_EVENT = "xstate.after."  # the type of every event a chart's timer sends


class RunEngine:
    """One run. Call `start()` inside a running event loop.

    `failure` is a journal that could not be opened (RunLost, RunCorrupt): the engine then only reports it.
    """

    def __init__(self, machine: Jr2Machine, run_id: str, input: Any = None, *, journal: Journal | None = None,
                 launcher: TurnLauncher | None = None, clock: Clock | None = None, workflow_name: str | None = None,
                 on_event: Callable[[PickEvent], None] | None = None, failure: RunError | None = None,
                 origin: dict[str, Any] | None = None, settings: Settings) -> None:
        self.machine = machine
        self.settings = settings
        self.run_id = run_id
        self.workflow_name = workflow_name or machine.id
        self.journal = journal
        self.launcher = launcher
        self.clock = clock
        self.state = RunState(machine, run_id, settings)
        self.state.workflow_name = self.workflow_name
        self.writer = JournalWriter(self.state, journal, on_event=on_event, on_broken=self._on_broken)
        self.turns_part = Turns(self.state, self.writer, launcher)
        self.gates_part = Gates(self.state, self.writer)
        self.effects = Effects(self.state, self.writer)
        self.transcripts_part = Transcripts(self.state, self.writer, self.turns_part)
        # How each kind of actor slot starts; a spec's class (or the nearest base) picks its starter.
        self._slot_starters: dict[type, Callable[[ChildHandle, Any], None]] = {
            AgentSpec: self.turns_part.start, GateSpec: lambda h, _spec: self.gates_part.open(h),
            EffectSpec: self.effects.start, FailSpec: _fail_slot}
        self._done = asyncio.Event()
        self.telemetry_rows: list[dict[str, Any]] = []
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
        self.state.rested = restored_snapshot
        self.state.interp = Interpreter(machine.chart, validated, clock=clock, snapshot=restored_snapshot,
                                        starter=self._starter, extras=self.turns_part.chain)
        self.state.interp.on_commit(self._on_commit)
        self.state.interp.on_ignored(self._on_ignored)
        self.state.interp.subscribe(self._after_commit)

    # ---- what the hosts, the launchers and the tests read --------------------------------------------------
    @property
    def interp(self) -> Interpreter | None:
        return self.state.interp

    @property
    def broken(self) -> str | None:
        """Why the run cannot go on (drifted, lost, corrupt, fenced); None while it can."""
        return self.state.broken

    @broken.setter
    def broken(self, why: str | None) -> None:
        self.state.broken = why

    @property
    def origin(self) -> dict[str, Any]:
        """How the run was started (env without secrets, launcher, version, traceparent): what a resume needs."""
        return self.state.origin

    @origin.setter
    def origin(self, value: dict[str, Any]) -> None:
        self.state.origin = value

    @property
    def run_status(self) -> RunStatusName:
        return self.state.run_status

    @property
    def turns(self) -> dict[str, Turn]:
        return self.turns_part.turns

    @property
    def transcripts(self) -> dict[str, ConversationLog]:
        return self.transcripts_part.logs

    @property
    def history(self) -> list[tuple[int, PickEvent]]:
        return self.writer.history

    @property
    def _tasks(self) -> set[asyncio.Task[Any]]:
        """The tasks running the run's Effects now (a host parks a run only when there are none)."""
        return self.effects.tasks

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
        self.state.broken = str(exc)
        self.state.run_status = ("lost" if isinstance(exc, RunLost) else "corrupt" if isinstance(exc, RunCorrupt)
                                 else "drifted")
        telemetry.run_broken(self, self.state.run_status, self.state.broken)
        self.writer.drop()
        if self.state.interp is not None:
            self.state.interp.stop()
            self.turns_part.end_all(abort_only=True)
        self._done.set()

    def _on_broken(self, exc: RunError) -> None:
        """The writer found the journal fenced (a newer activation writes it: stop, writing nothing more), lost or
        corrupt (stop, and say why)."""
        if not isinstance(exc, RunFenced):
            self._fail(exc)
            return
        if self.state.interp is not None:
            self.state.interp.stop()
        self._done.set()

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
            telemetry.run_created(self)
            self.origin = tracing.rooted(self.origin, self.run_id, self.workflow_name)
            self.writer.stage(LedgerKind.START, None, self.origin)
            return None
        latest = loaded.snapshot
        moved = [e.digest for e in loaded.ledger if e.kind == LedgerKind.MIGRATION.value]  # jr2ray.run.migration
        digest = moved[-1] if moved else row.digest
        if digest != self.machine.digest or (latest and latest[0] != self.machine.digest):
            self._fail(RunDrifted(f"journal digest {digest} != machine digest {self.machine.digest}"))
            return None
        try:
            r = replay(loaded.ledger)
        except ValueError as exc:
            self._fail(RunCorrupt(f"the journal of run {self.run_id} is damaged: {exc}"))
            return None
        tp = self.turns_part
        tp.receipts, self.gates_part.receipts, tp.pending, tp.slots = r.receipts, r.gate_receipts, r.pending, r.slots
        self.effects.started, self.effects.finished = r.effects_started, r.effects_finished
        tp.notices, self.telemetry_rows = r.notices, r.telemetry
        tp.moves = len(moved)
        self.transcripts_part.logs = r.transcripts
        self.origin = tracing.carried(self.origin, r.origin)  # a wake continues the run's trace
        self.writer.restore_feed(r.feed, never_ran=latest is None and not r.feed)
        if r.caller_status is not None:
            self.state.run_status = r.caller_status  # type: ignore[assignment]
        if latest is None:
            return None
        self.writer.restored = (row.status, snapshot_text(latest[1]))
        try:
            return restore(self.machine.chart, latest[1])
        except RestoreError as exc:
            self._fail(RunDrifted(str(exc)))
            return None

    def feed(self, since: int = 0) -> list[dict[str, Any]]:
        """Feed events numbered `since` and later still held, each with its number as `seq`."""
        return self.writer.feed(since)

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> RunEngine:
        interp = self.state.interp
        if interp is None:
            return self
        if self.run_status in ("cancelled", "stopped"):
            self._done.set()
            return self
        interp.start()
        if interp.snapshot is not None:  # a pick restored at Rest is answered at once
            self.turns_part.resolve_outstanding(interp.snapshot)
        return self

    @property
    def snapshot(self) -> Snapshot:
        return self.state.snapshot

    @property
    def drift(self) -> str | None:
        return self.broken if self.run_status == "drifted" else None

    def status_name(self) -> RunStatusName:
        return self.state.status_name()

    def cancel(self) -> RunStatus:
        """End the run as `cancelled`, aborting every Turn (R6)."""
        interp = self.state.interp
        if self.status_name() == "active" and interp is not None:
            self.state.run_status = "cancelled"
            self.writer.stage(LedgerKind.STATUS, None, {"status": "cancelled"})
            interp.stop()
            self.writer.flush(interp.persisted())
            self.turns_part.end_all()
            self.writer.emit("status", {"status": "cancelled"})
            telemetry.run_ended(self, "cancelled")
            self._done.set()
        return self.status()

    def stop(self) -> RunStatus:
        """Park the run: nothing more runs, and a later start with the same id restores it."""
        interp = self.state.interp
        if self.status_name() == "active" and interp is not None:
            snap = interp.persisted()
            self.state.run_status = "stopped"
            self.writer.stage(LedgerKind.STATUS, None, {"status": "stopped"})
            self.writer.flush(snap)
            interp.stop()
            self.turns_part.end_all(abort_only=True)
            self._done.set()
        return self.status()

    async def wait(self, timeout: float | None = None) -> RunStatus:
        await asyncio.wait_for(self._done.wait(), timeout)
        return self.status()

    # ---- chart hooks ---------------------------------------------------------------------------------------
    def _on_commit(self, snap: Snapshot, effects: list[Any]) -> None:
        """After each macrostep, before any of its side effects: route answers, note `moved`, journal."""
        interp = self.state.interp
        assert interp is not None
        if self._ended_before:  # the restore of a run that had ended: its journal holds it, and a read writes nothing
            return
        ev = interp.last_event
        tracing.step_begin(self.state, ev)
        if ev is not None and ev.type.startswith(TIMER_EVENT):  # a timer fired: the timeline shows it
            self.writer.emit("timer", {"event": ev.type})
        self.turns_part.note_step(interp, effects)
        if self.journal is not None and interp.quiet(snap, effects):
            # Nothing leaves the process before this commit's subscribers run (or, for a pick, before its receipt
            # is staged): hold the snapshot, so the macrostep and the receipt it leads to are one transaction.
            self.writer.hold(interp.persisted())
            return
        self.writer.flush(interp.persisted())

    def _on_ignored(self, snap: Snapshot, ev: Event) -> None:
        if ev is self.writer.delivering:  # a pick that moved nothing: its receipt follows at once, in this transaction
            return
        self.writer.flush(None)

    def _after_commit(self, snap: Snapshot) -> None:
        tracing.step_end(self.state)
        if self.broken is not None:
            return
        self.turns_part.resolve_outstanding(snap)
        w = self.writer
        if w.held is not None and w.delivering is None:  # a quiet macrostep no receipt of this commit carried
            w.flush(None)
        if snap.status != "active" and self.run_status == "active":
            if not self._ended_before:
                w.emit("status", {"status": self.status_name(), "output": snap.output, "error": snap.error})
                telemetry.run_ended(self, self.status_name())
            self.turns_part.end_all()
            self._done.set()

    def _starter(self, handle: ChildHandle, logic: Any) -> bool:
        """Start an actor slot by its spec's kind; False for logic the chart starts itself."""
        spec = self.machine.actors.get(handle.src)
        for kind in type(spec).__mro__:
            start = self._slot_starters.get(kind)
            if start is not None:
                start(handle, spec)
                return True
        return False

    # ---- the run's calls -----------------------------------------------------------------------------------
    def surface(self, address: str) -> Surface:
        return self.turns_part.surface(address)

    async def pick(self, address: str, name: str, args: Any, delivery_id: str | None = None) -> Receipt:
        return await self.turns_part.pick(address, name, args, delivery_id)

    def receipt_ready(self, address: str, delivery_id: str) -> bool:
        return self.turns_part.receipt_ready(address, delivery_id)

    def fault(self, address: str, reason: str) -> None:
        self.turns_part.fault(address, reason)

    def gates(self) -> list[GateView]:
        return self.gates_part.views()

    def send(self, gate_id: str, name: str, args: Any, delivery_id: str | None = None) -> SendResult:
        return self.gates_part.send(gate_id, name, args, delivery_id)

    def refuses_at_rest(self, first: list[Any] | None) -> RunError | None:
        """The refusal of a Gate event riding with this run's activation (`RunHost.adopt`'s `first`), checked on
        the run as loaded, before it is taken (see `Gates.refusal_at_rest`); None for anything else."""
        if first is None or first[0] != "send":
            return None
        gate_id, name, args, delivery_id = first[1]
        refused = self.gates_part.refusal_at_rest(gate_id, name, args, delivery_id)
        if refused is not None:
            telemetry.gate_refused(self, gate_id, name, refused)
        return refused

    def record_transcript(self, address: str, entry: TranscriptEntry | dict[str, Any]) -> None:
        self.transcripts_part.record(address, entry)

    def turn_waits(self, address: str, key: str | None) -> None:
        """A Harness Turn waits for Turn admission under `key` (None: it was let in): its run may park meanwhile."""
        self.turns_part.waits(address, key)

    def transcript(self, address: str) -> Transcript:
        return self.transcripts_part.read(address)

    # ---- reads ---------------------------------------------------------------------------------------------
    def status(self) -> RunStatus:
        """What the journal says. A run that stopped on a bad journal shows no state the journal does not hold."""
        snap = self.state.last
        if snap is None or self.run_status in ("lost", "corrupt"):
            row = self.journal.run() if self.journal and self.run_status != "corrupt" else None
            return RunStatus(id=self.run_id, workflow=self.workflow_name, digest=row.digest if row else "",
                             status=self.status_name(), error=self.broken, version=self.origin.get("version", ""))
        turns = [self._turn_view(t) for t in self.turns.values()]
        live = self.status_name() == "active"
        return RunStatus(id=self.run_id, workflow=self.workflow_name, digest=self.machine.digest,
                         version=self.origin.get("version", ""), status=self.status_name(), value=snap.value,
                         context=_jsonable(snap.context),
                         output=_jsonable(snap.output), error=self.broken or _jsonable(snap.error),
                         gates=self.gates() if live else [], turns=turns)

    def _turn_view(self, t: Turn) -> TurnView:
        allowed = self.turns_part.allowed(t) if t.active else None
        return TurnView(iid=t.iid, slot=t.slot, state=t.state, active=t.active, conversation=t.conversation,
                        outstanding=(t.outstanding.name if t.outstanding and t.outstanding.receipt is None
                                     else None),
                        allowed_now=allowed_line(allowed) if allowed is not None else None,
                        allowed=allowed, unread_notices=bool(t.active and not t.notices_read and t.notices))

    def note_parked(self) -> None:
        """The run parks now (its host lets it go): journaled, so its timeline shows where the parked period starts."""
        self.writer.emit("park", {"parked": True})
        self.writer.flush_staged()

    def telemetry(self) -> list[dict[str, Any]]:
        return list(self.telemetry_rows)

    def record_telemetry(self, row: dict[str, Any]) -> None:
        self.telemetry_rows.append(row)
        telemetry.model_request(self, row)
        self.writer.stage(LedgerKind.TELEMETRY, row.get("iid"), row)
        self.writer.emit("telemetry", row)
        self.writer.flush(None)


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))
