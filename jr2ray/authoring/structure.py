"""The structural walk of a Workflow: which party owns each state, and each party state's derived set (M1, M3).

create_machine needs it for its refusals, and the Menu layer builds the Menu, the seats and the Allowed picks on it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from jr2ray.chart import Machine, StateNode, TransitionDef

from .actors import AgentSpec, GateSpec
from .events import EventDef, is_mechanism


@dataclass(frozen=True)
class PartyRef:
    """A party seat: an Agent slot or a Gate, at the state that invokes it."""

    kind: str  # "agent" | "gate"
    id: str  # the Agent's slot, or the Gate's id
    state: str  # path of the invoking state
    invoke_id: str

    @property
    def label(self) -> str:
        if self.kind == "agent":
            return f"agent:{self.id}"
        return "gate" if self.id == self.state else f"gate:{self.id}"


def party_of(node: StateNode, actors: Mapping[str, object]) -> PartyRef | None:
    for inv in node.invokes:
        spec = actors.get(inv.src)
        if isinstance(spec, AgentSpec):
            return PartyRef("agent", inv.src, node.path, inv.id)
        if isinstance(spec, GateSpec):
            return PartyRef("gate", inv.id, node.path, inv.id)
    return None


@dataclass
class Structure:
    machine: Machine
    events: Mapping[str, EventDef]
    actors: Mapping[str, object]
    parties: dict[str, PartyRef] = field(default_factory=dict)  # state path -> party it invokes
    owner: dict[str, PartyRef | None] = field(default_factory=dict)  # state path -> nearest party at or above
    agent_states: dict[str, list[str]] = field(default_factory=dict)  # slot -> invoking state paths
    gates: dict[str, PartyRef] = field(default_factory=dict)  # gate id -> seat
    derived: dict[str, list[str]] = field(default_factory=dict)  # party state path -> sorted event names

    def __post_init__(self) -> None:
        for node in self.machine.nodes:
            p = party_of(node, self.actors)
            if p is not None:
                self.parties[node.path] = p
                if p.kind == "agent":
                    self.agent_states.setdefault(p.id, []).append(node.path)
                else:
                    self.gates[p.id] = p
            parent_owner = self.owner.get(node.parent.path) if node.parent else None
            self.owner[node.path] = p if p is not None else parent_owner
        for path, p in self.parties.items():
            self.derived[path] = sorted({name for node, name in self.walk(path) if self.allows(node, name, p)})

    def walk(self, party_state: str) -> Iterator[tuple[StateNode, str]]:
        """Every (state, on key) that a party's state derives from (M1), mechanism names left out."""
        node = self.machine.by_path[party_state]
        me = self.parties[party_state]
        for n in (node, *node.ancestors):
            yield from self._keys(n)
        stack = list(reversed(list(node.children.values())))
        while stack:
            child = stack.pop()
            p = self.parties.get(child.path)
            if p is not None and not (p.kind == "agent" and me.kind == "agent" and p.id == me.id):
                continue  # a different Agent or a Gate: it and everything below it give nothing
            yield from self._keys(child)
            stack.extend(reversed(list(child.children.values())))

    @staticmethod
    def _keys(node: StateNode) -> Iterator[tuple[StateNode, str]]:
        for key in node.config.get("on") or {}:
            if not is_mechanism(str(key)):
                yield node, str(key)

    def allows(self, node: StateNode, name: str, party: PartyRef) -> bool:
        """May `party` send `name` where `node` takes it? Position decides; `audience` adds or keeps (M3)."""
        ev = self.events.get(name)
        audience = ev.audience if ev else None
        own = self.owner.get(node.path)
        if own is None:
            return audience in (None, "any") or audience == party.kind
        if own.kind == party.kind and own.id == party.id:
            return True
        return audience == "any" or (audience == party.kind and own.kind != party.kind)

    def transition_allows(self, t: TransitionDef, party: PartyRef) -> bool:
        """Does this writing belong to `party`? (M4's "no other party's writing", D5)."""
        if is_mechanism(t.event_type):
            return self.owner.get(t.source.path) is None or self.owner.get(t.source.path) == party
        return self.allows(t.source, t.event_type, party)

    def menu_names(self, slot: str) -> list[str]:
        """The Menu (M2): the union of the derived sets over every state invoking `slot`, sorted by name."""
        names: set[str] = set()
        for path in self.agent_states.get(slot, []):
            names.update(self.derived[path])
        return sorted(names)
