"""What every part of a run reads: its Machine, its id, its Interpreter and whether it can go on.

`RunState` is plain data with a few reads over it. The engine owns it and hands the same object to its writer and
to its parts (Turns, Gates, Effects, transcripts), so each part reads the run without calling back into the engine.
"""

from __future__ import annotations

from typing import Any

from jr2ray.authoring import Jr2Machine
from jr2ray.chart import Interpreter, Snapshot
from jr2ray.settings import Settings

from .errors import RunCorrupt, RunDrifted, RunLost
from .models import RunStatusName


class RunState:
    """The run as its parts see it. `broken` says why the run cannot go on (drifted, lost, corrupt, fenced)."""

    def __init__(self, machine: Jr2Machine, run_id: str, settings: Settings) -> None:
        self.machine = machine
        self.run_id = run_id
        self.settings = settings  # the hosting process's, read where it started (never here)
        self.workflow_name = machine.id  # the catalog name when the engine is given one (what telemetry labels)
        self.origin: dict[str, Any] = {}  # the start entry's data: env, launcher, version, the run's traceparent
        self.interp: Interpreter | None = None
        self.run_status: RunStatusName = "active"
        self.broken: str | None = None
        # The snapshot this activation loaded from the journal. Until the Interpreter starts (and a cancelled or
        # stopped run never starts again) the run's status reads its last value and context from here.
        self.rested: Snapshot | None = None

    @property
    def snapshot(self) -> Snapshot:
        if self.interp is None or self.interp.snapshot is None:
            raise RunDrifted(self.broken or "the run has no live snapshot")
        return self.interp.snapshot

    @property
    def last(self) -> Snapshot | None:
        """The newest snapshot this activation knows: the live one, else the one an ended run was loaded with."""
        if self.interp is not None and self.interp.snapshot is not None:
            return self.interp.snapshot
        return self.rested

    @property
    def live(self) -> bool:
        """The Interpreter holds a snapshot (a run woken from a bad journal, or ended and stopped, has none)."""
        return self.interp is not None and self.interp.snapshot is not None

    def status_name(self, snap: Snapshot | None = None) -> RunStatusName:
        """The run's status word from `snap` (by default the live snapshot; none yet reads `active`)."""
        if self.run_status != "active":
            return self.run_status
        if snap is None and self.interp is not None:
            snap = self.interp.snapshot
        if snap is None:
            return "active"
        return "active" if snap.status == "active" else ("done" if snap.status == "done" else "error")

    def usable(self) -> None:
        """Raise the reason this run takes nothing any more, if it has one."""
        if self.broken is None:
            return
        kind = {"lost": RunLost, "corrupt": RunCorrupt}.get(self.run_status, RunDrifted)
        raise kind(self.broken)
