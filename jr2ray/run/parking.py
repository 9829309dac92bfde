"""When a live run may park: at Rest with nothing running in it, and which Harness Turns it hands over as it parks
(those that only wait for Turn admission). Pure judgements on the engine, apart from the host that acts on them."""

from __future__ import annotations

from jr2ray.authoring import AgentSpec, GateSpec

from .engine import RunEngine
from .models import lifecycle
from .turns import ParkingLauncher, Turn


def parkable(engine: RunEngine) -> bool:
    """At Rest with nothing running: no Harness Turn, no Effect, no child but Gates and Agent seats. Pending timers
    do not keep it: the timer index and service wake it for them."""
    if engine.broken is not None or lifecycle(engine.status_name()) == "finished":
        return True
    if engine._tasks or engine.interp is None or engine.interp.snapshot is None:
        return False
    snap = engine.interp.snapshot
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
