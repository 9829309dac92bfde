"""Rest (M9), read from the chart and the live snapshot, never from a state's name.

An Agent's state is at Rest when nothing it started still runs below it (M9.1) and no pending timer would move the
Machine to another state inside it (M9.2). A deadline, a timer whose transition leaves the Agent's state, does not
hold Rest: it ends the Turn when it fires, so locking the Agent out until then would only waste the Turn.
"""

from __future__ import annotations

from typing import Any

from jr2ray.chart import Event, Snapshot, TransitionDef, select_transitions, strict_guard


def _below_or_at(path: str, state: str) -> bool:
    return path == state or path.startswith(state + ".")


def _strictly_below(path: str, state: str) -> bool:
    return path.startswith(state + ".")


def running_below(snapshot: Snapshot, state: str, own_invoke_id: str | None) -> list[str]:
    """Ids of children that run at or below `state`, the Agent's own invoke left out (M9.1)."""
    return [cid for cid, rec in snapshot.children.items()
            if rec.status == "active" and cid != own_invoke_id and _below_or_at(rec.state, state)]


def _stays_inside(t: TransitionDef, state: str) -> bool:
    """Would taking `t` move the Machine to another state inside `state`, without exiting `state` itself?

    The chart's exit-set rule (C3) decides it: a transition exits `state` when its source is above `state`, when a
    target is `state` itself or outside it, or when it re-enters from `state`. A targetless one moves to no state,
    and neither does a self-loop of an atomic state (with `reenter` it leaves and enters the very same state).
    """
    if not t.targets:
        return False
    if t.source.is_atomic and all(x is t.source for x in t.targets):
        return False
    if not _below_or_at(t.source.path, state):
        return False
    if not all(_strictly_below(x.path, state) for x in t.targets):
        return False
    return not (t.reenter and t.source.path == state)


def _guard_or_pass(t: TransitionDef, scope: dict[str, Any]) -> bool:
    """A timer's guard as it would run now; one that raises counts as passing, so the timer is not ignored."""
    try:
        return strict_guard(t, scope)
    except Exception:
        return True


def holding_timers(snapshot: Snapshot, state: str) -> list[str]:
    """Ids of pending timers that hold Rest at `state` (M9.2).

    A timer holds when the transitions its event would select now, in the live snapshot, move the Machine to
    another state inside `state`. A timer on `state` itself that targets one of its children holds; a deadline
    that leaves `state`, a targetless timer, and a delayed send to a child (which moves no state of this Machine)
    do not.
    """
    out: list[str] = []
    for tid, rec in snapshot.timers.items():
        if rec.target != "self":
            continue
        ts = select_transitions(snapshot.config, snapshot.context, Event.from_any(rec.event), _guard_or_pass)
        if any(_stays_inside(t, state) for t in ts):
            out.append(tid)
    return out


def at_rest(snapshot: Snapshot, state: str, own_invoke_id: str | None) -> bool:
    """Is the Agent's `state` at Rest (M9)? A run that is over is never at Rest."""
    if snapshot.status != "active":
        return False
    return not running_below(snapshot, state, own_invoke_id) and not holding_timers(snapshot, state)
