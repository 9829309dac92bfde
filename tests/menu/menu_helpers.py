"""Shared pieces of the Menu tests: a loader, a tiny driver for the pure chart, and `moved`.

`moved` for a delivered event is what the Run computes: `transition_traced` returned a Took for that event with a
target or actions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from jr2ray import agent, define_event, jr2_setup
from jr2ray.chart import Event, Snapshot, Took, initial_transition, transition_traced
from jr2ray.menu import verdict


class Empty(BaseModel):
    pass


class Verdict_(BaseModel):
    verdict: str = Field(description="approved or rejected.")


def ev(name: str, description: str | None = None, input: type[BaseModel] = Empty, audience: Any = None) -> Any:
    return define_event(name=name, description=description or f"Pick {name}.", input=input, audience=audience)


def agents(*slots: str) -> dict[str, Any]:
    return {s: agent(model="local/tiny", instructions=f"You are {s}.") for s in slots}


def load(config: dict[str, Any], events: Iterable[Any], actors: dict[str, Any] | None = None,
         input: type[BaseModel] | None = None) -> Any:
    return jr2_setup(events=list(events), actors=dict(actors if actors is not None else agents("w")),
                     input=input).create_machine(config)


def start(machine: Any, input: Any = None) -> Snapshot:
    snap, _ = initial_transition(machine.chart, input, now_ms=0)
    return snap


def agent_event(name: str, payload: dict[str, Any] | None = None, slot: str = "w") -> Event:
    return Event(name, payload or {}, {"party": "agent", "id": slot})


def gate_event(name: str, gate_id: str, payload: dict[str, Any] | None = None) -> Event:
    return Event(name, payload or {}, {"party": "gate", "id": gate_id})


def deliver(machine: Any, snap: Snapshot, event: Event) -> tuple[Snapshot, list[Any], list[Took]]:
    return transition_traced(machine.chart, snap, event, now_ms=0)


def moved(took: Sequence[Took], name: str) -> bool:
    return any(t.event_type == name and (t.targets is not None or t.has_actions) for t in took)


def took_for(took: Sequence[Took], name: str) -> list[Took]:
    return [t for t in took if t.event_type == name]


def pick(machine: Any, snap: Snapshot, state: str, name: str, args: dict[str, Any] | None = None
         ) -> tuple[Snapshot, list[Any], list[Took]]:
    """Pick as the Agent at `state`: the verdict must say deliver; then deliver it."""
    v = verdict(machine, snap, state, name, args or {})
    assert v.kind == "deliver", (name, v)
    return deliver(machine, snap, v.event)
