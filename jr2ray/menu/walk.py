"""The Menu walk (M1-M3): Menu items per slot, and the seats, "who may send what, per state"."""

from __future__ import annotations

from pydantic import BaseModel

from jr2ray.authoring import Jr2Machine, PartyRef

from .models import MenuItem


def menu_items(machine: Jr2Machine, slot: str) -> list[MenuItem]:
    """The Menu of `slot`: sorted names, each event's own description and JSON schema (M2)."""
    if slot not in machine.structure.agent_states:
        raise KeyError(f"workflow {machine.id!r} has no state invoking Agent slot {slot!r}")
    return [MenuItem(name=n, description=machine.events[n].description, parameters=machine.events[n].schema)
            for n in machine.structure.menu_names(slot)]


class Seat(BaseModel):
    """One party seat: the state that invokes it and the events it may send there."""

    state: str
    party: str  # "agent" | "gate"
    id: str
    label: str
    events: list[str]


def seats(machine: Jr2Machine) -> list[Seat]:
    """Per party state, in document order, the events that party may send (M3)."""
    st = machine.structure
    out: list[Seat] = []
    for node in machine.chart.nodes:
        p: PartyRef | None = st.parties.get(node.path)
        if p is None:
            continue
        out.append(Seat(state=node.path, party=p.kind, id=p.id, label=p.label, events=st.derived[node.path]))
    return out


def seats_text(machine: Jr2Machine) -> str:
    """The `jr2ray up` rendering of the seats: one line per party state (M3)."""
    lines = [f'seats: workflow "{machine.id}" — who may send what, per state']
    for s in seats(machine):
        lines.append(f"  {s.state} {s.label}: [{', '.join(s.events)}]")
    return "\n".join(lines)
