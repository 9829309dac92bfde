"""Rest (SPEC §0): nothing runs below the Agent's state and no timer there is pending. Read from the snapshot."""

from __future__ import annotations

from jr2ray.chart import Snapshot


def _below_or_at(path: str, state: str) -> bool:
    return path == state or path.startswith(state + ".")


def running_below(snapshot: Snapshot, state: str, own_invoke_id: str | None) -> list[str]:
    """Ids of children that run at or below `state`, the Agent's own invoke left out."""
    return [cid for cid, rec in snapshot.children.items()
            if rec.status == "active" and cid != own_invoke_id and _below_or_at(rec.state, state)]


def timers_below(snapshot: Snapshot, state: str) -> list[str]:
    """Pending timers owned by states strictly below `state` (they would move the Machine inside it)."""
    return [tid for tid, rec in snapshot.timers.items()
            if rec.state is not None and rec.state.startswith(state + ".")]


def at_rest(snapshot: Snapshot, state: str, own_invoke_id: str | None) -> bool:
    if snapshot.status != "active":
        return False
    return not running_below(snapshot, state, own_invoke_id) and not timers_below(snapshot, state)
