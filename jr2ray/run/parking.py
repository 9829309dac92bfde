"""When a live run may park: at Rest with nothing running in it, and which Harness Turns it hands over as it parks
(those that only wait for Turn admission). Pure judgements on the engine, apart from the host that acts on them."""

from __future__ import annotations

import time

from jr2ray.authoring import AgentSpec, GateSpec

from .engine import RunEngine
from .models import lifecycle
from .timers import LEAD_MS, earliest_due_ms
from .turns import ParkingLauncher, Turn

# A run whose next timer is due within this does not park. The timer service wakes a parked run `LEAD_MS` early and
# then drops the timer's row; a park in between would write that row again with the same due time, and the drop
# would take it: the run would sleep past its timer. Live, the run fires it itself.
SOON_MS = LEAD_MS + 1000.0


def parkable(engine: RunEngine) -> bool:
    """At Rest with nothing running: no Harness Turn, no Effect, no child but Gates and Agent seats. Pending timers
    do not keep it (the timer index and service wake it for them), unless the next is due within `SOON_MS`."""
    if engine.broken is not None or lifecycle(engine.status_name()) == "finished":
        return True
    if engine._tasks or engine.interp is None or engine.interp.snapshot is None:
        return False
    snap = engine.interp.snapshot
    due = earliest_due_ms(snap)
    if due is not None and due - time.time() * 1000 < SOON_MS:
        return False
    if any(t.active and t.spec.driver == "harness" and engine.launcher is not None and not _parks_waiting(engine, t)
           for t in engine.turns.values()):
        return False
    for rec in snap.children.values():
        spec = engine.machine.actors.get(rec.src)
        if not isinstance(spec, (GateSpec, AgentSpec)):  # an Agent's Turn is judged above
            return False
    return True


def _parks_waiting(engine: RunEngine, turn: Turn) -> bool:
    """A Harness Turn that waits for Turn admission does not keep its run live, if its launcher can hand the wait
    on to the KV budget (which wakes the run when the Turn's share is granted)."""
    return turn.waits_for is not None and isinstance(engine.launcher, ParkingLauncher)


def waiting_for_admission(engine: RunEngine) -> list[Turn]:
    """The Harness Turns whose run parks while they wait for Turn admission."""
    return [t for t in engine.turns.values() if t.active and t.spec.driver == "harness" and _parks_waiting(engine, t)]


def mark_waiting(engine: RunEngine) -> list[Turn]:
    """The Turns a parking run hands over while they wait for Turn admission, each marked in the journal first: the
    Harness its restore starts goes on with the request it was about to send, with no notice."""
    waiting = waiting_for_admission(engine) if engine.broken is None else []
    for t in waiting:
        engine.transcripts_part.mark_parked(t.iid)
    return waiting
