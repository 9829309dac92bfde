"""`jr2_setup(...).create_machine(config)`: load a Workflow and refuse what cannot work (A6, A9), warn (A7)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from jr2ray.chart import Machine, StateNode, create_machine
from jr2ray.chart.guards import AndGuard, Guard, NotGuard, OrGuard

from .actions import SentBy
from .actors import TURN_INPUT_KEYS, AgentSpec, EffectSpec, FailSpec, GateSpec, gate
from .checks import menu_warnings
from .errors import WorkflowError
from .events import EventDef, is_mechanism
from .structure import Structure


class Jr2Machine:
    """A loaded Workflow: the chart, its events, its actor slots and its structure (owners, derived sets)."""

    def __init__(self, chart: Machine, events: Mapping[str, EventDef], actors: Mapping[str, Any],
                 input_model: type[BaseModel] | None) -> None:
        self.chart = chart
        self.id = chart.id
        self.events = dict(events)
        self.actors = dict(actors)
        self.input_model = input_model
        self.structure = Structure(chart, self.events, self.actors)
        self.digest: str = chart.digest()
        self.warnings: list[str] = []

    @property
    def agent_slots(self) -> list[str]:
        return [k for k, v in self.actors.items() if isinstance(v, AgentSpec)]

    def validate_input(self, data: Any) -> Any:
        """The run's input checked against the door schema; raises ValueError naming the schema error."""
        if self.input_model is None:
            return data
        from pydantic import ValidationError

        try:
            return self.input_model.model_validate(data)
        except ValidationError as exc:
            lines = [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()]
            raise ValueError(f"invalid input for workflow {self.id!r}: " + "; ".join(lines)) from None

    def __repr__(self) -> str:
        return f"<Workflow {self.id} digest={self.digest}>"


def _walk_guards(g: Any) -> Iterable[Guard]:
    if isinstance(g, (NotGuard,)):
        yield from _walk_guards(g.inner)
    elif isinstance(g, (AndGuard, OrGuard)):
        for p in g.parts:
            yield from _walk_guards(p)
    elif g is not None:
        yield g


def _check(m: Jr2Machine) -> None:
    """Refuse a chart that cannot work, each check in its own function, in the order an author would fix them."""
    _check_events_taken(m)
    _check_agent_states(m)
    _check_sent_by(m)
    _check_invoke_inputs(m)


def _check_events_taken(m: Jr2Machine) -> None:
    """Every `on` key is a listed event (or a mechanism), and every listed event is taken somewhere."""
    taken: set[str] = set()
    for node in m.chart.nodes:
        for key in node.config.get("on") or {}:
            key = str(key)
            if is_mechanism(key):
                continue
            if key not in m.events:
                raise WorkflowError(f"{node.path}: on key {key!r} is not a listed event (events=[...])")
            taken.add(key)
    for name in m.events:
        if name not in taken:
            raise WorkflowError(f"event {name!r} is listed but no state takes it")


def _below(chart: Machine, node: StateNode) -> list[StateNode]:
    return [d for d in chart.nodes if node in d.ancestors]


def _check_agent_states(m: Jr2Machine) -> None:
    """An Agent's state has one active mode at a time, and derives an event whenever a state below it takes one."""
    chart, st = m.chart, m.structure
    for slot, paths in st.agent_states.items():
        for path in paths:
            node = chart.by_path[path]
            below = _below(chart, node)
            for n in (node, *below):
                if n.type == "parallel":
                    raise WorkflowError(f"{n.path}: a parallel state at or below {path!r}, which invokes Agent "
                                        f"{slot!r}; a Turn needs one active mode")
            if st.derived[path]:
                continue
            taking = [d for d in below if any(not is_mechanism(str(k)) for k in (d.config.get("on") or {}))]
            if taking:
                raise WorkflowError(f"{path}: invokes Agent {slot!r} but derives no event, while "
                                    f"{taking[0].path!r} below it takes events; the Agent would have nothing "
                                    f"to pick")


def _check_sent_by(m: Jr2Machine) -> None:
    """A `sent_by(...)` guard names an Agent slot or a Gate id of this workflow."""
    parties = set(m.structure.agent_states) | set(m.structure.gates)
    for node in m.chart.nodes:
        for ts in node.on.values():
            for t in ts:
                for g in _walk_guards(t.guard):
                    if isinstance(g, SentBy) and g.party_id not in parties:
                        raise WorkflowError(f"{node.path}: sent_by({g.party_id!r}) on {t.event_type!r} names no "
                                            f"Agent slot and no Gate id")


def _check_invoke_inputs(m: Jr2Machine) -> None:
    """A literal invoke input carries only what its slot takes: a Turn's keys, or an Effect's declared params."""
    for node in m.chart.nodes:
        for inv in node.invokes:
            spec = m.actors.get(inv.src)
            if isinstance(spec, AgentSpec) and callable(inv.input) is False and isinstance(inv.input, Mapping):
                bad = sorted(set(inv.input) - TURN_INPUT_KEYS)
                if bad:
                    raise WorkflowError(f"{node.path}: Agent {inv.src!r} input has unknown key(s) {bad}; "
                                        f"allowed: {sorted(TURN_INPUT_KEYS)}")
            elif isinstance(spec, EffectSpec) and not callable(inv.input) and inv.input is not None:
                _check_effect_input(m.id, node.path, inv.src, spec, inv.input)


def _check_effect_input(workflow: str, path: str, src: str, spec: EffectSpec, given: Any) -> None:
    """A literal Effect input may carry only the parameters the Effect declares (it never rewrites its call)."""
    declared = tuple(getattr(spec, "params", ()))
    if not isinstance(given, Mapping):
        raise WorkflowError(f"workflow {workflow!r}, state {path}: Effect {src!r} input must be a mapping of its "
                            f"declared parameters {list(declared)}, got {type(given).__name__}")
    bad = sorted(set(map(str, given)) - set(declared))
    if bad:
        raise WorkflowError(f"workflow {workflow!r}, state {path}: Effect {src!r} input has key(s) {bad} it does "
                            f"not declare as parameters (params={list(declared)})")


def _targets_into(chart: Machine) -> set[StateNode]:
    entered: set[StateNode] = set()
    for node in chart.nodes:
        for ts in [*node.on.values(), node.always]:
            for t in ts:
                for target in t.targets or ():
                    entered.add(target)
                    entered.update(target.ancestors)
        if node.history_target:
            entered.update(node.history_target)
        if node.initial is not None:
            entered.add(node.initial)
    return entered


def _warnings(m: Jr2Machine) -> list[str]:
    """What may work but likely is not what the author meant; kept on the Machine and shown by `up`."""
    out: list[str] = []
    entered = _targets_into(m.chart)
    for path, p in m.structure.parties.items():
        if p.kind == "agent":
            out += _unreached_modes(m, path, p.id, entered)
            out += _gates_that_stay_open(m, path, p.id)
    out += _descriptions_that_differ(m)
    return out + menu_warnings(m.structure)


def _unreached_modes(m: Jr2Machine, path: str, slot: str, entered: set[StateNode]) -> list[str]:
    """Modes of this Agent's state (not under another party's state) that no transition enters."""
    chart, st = m.chart, m.structure
    node = chart.by_path[path]
    out: list[str] = []
    for d in _below(chart, node):
        if d.invokes or d.type == "history" or d in entered:
            continue
        if any(a.path in st.parties for a in d.ancestors if node in a.ancestors):
            continue
        out.append(f"{d.path}: mode is entered by no transition; its picks are on {slot!r}'s Menu but "
                   f"never in its Allowed picks")
    return out


def _gates_that_stay_open(m: Jr2Machine, path: str, slot: str) -> list[str]:
    """Gate events under this Agent's state with no target: the Gate stays open, so the Agent never rests."""
    chart, st = m.chart, m.structure
    out: list[str] = []
    for d in _below(chart, chart.by_path[path]):
        gp = st.parties.get(d.path)
        if gp is None or gp.kind != "gate":
            continue
        for key, ts in d.on.items():
            if not is_mechanism(key) and all(not t.targets for t in ts):
                out.append(f"{d.path}: Gate event {key!r} has no target, so the Gate stays open and "
                           f"{slot!r}'s state never comes to Rest after it")
    return out


def _descriptions(m: Jr2Machine, paths: Iterable[str], name: str) -> set[str]:
    """The descriptions event `name` has at every state below `paths` that takes it, and its own."""
    descs = {m.events[name].description}
    for path in paths:
        for node, key in m.structure.walk(path):
            if key == name:
                descs.update(t.description for t in node.on.get(key, []) if t.description)
    return descs


def _descriptions_that_differ(m: Jr2Machine) -> list[str]:
    st = m.structure
    return [f"event {name!r}: its description differs on paths {slot!r} can reach; the tool "
            f"description must hold at every state that takes it"
            for slot, paths in st.agent_states.items() for name in st.menu_names(slot)
            if len(_descriptions(m, paths, name)) > 1]


class Setup:
    """What `jr2_setup` returns: events, actor slots and the door schema, waiting for a config."""

    def __init__(self, events: Iterable[EventDef], actors: Mapping[str, Any], input: type[BaseModel] | None = None,
                 guards: Mapping[str, Any] | None = None, actions: Mapping[str, Any] | None = None,
                 delays: Mapping[str, Any] | None = None, machine_class: type[Jr2Machine] = Jr2Machine) -> None:
        evs: dict[str, EventDef] = {}
        for e in events:
            if not isinstance(e, EventDef):
                raise WorkflowError(f"events must come from define_event, got {e!r}")
            if e.name in evs:
                raise WorkflowError(f"event {e.name!r} is listed twice")
            evs[e.name] = e
        self.events = evs
        acts = dict(actors)
        if "gate" in acts and acts["gate"] is not gate:
            raise WorkflowError("'gate' is the built-in Gate src; name your slot otherwise")
        acts["gate"] = gate
        for k, v in acts.items():
            if not isinstance(v, (AgentSpec, GateSpec, EffectSpec, FailSpec, Machine)) \
                    and not hasattr(v, "fn"):
                raise WorkflowError(f"actor slot {k!r}: not an agent(), gate, effect, fail() or child machine: {v!r}")
        self.actors = acts
        self.input = input
        self.guards = dict(guards or {})
        self.actions = dict(actions or {})
        self.delays = dict(delays or {})
        self.machine_class = machine_class

    def create_machine(self, config: Mapping[str, Any]) -> Jr2Machine:
        cfg = dict(config)
        if "input" in cfg:
            door = cfg.pop("input")
            if self.input is None:
                self.input = door
        chart_actors = {k: (v.chart if isinstance(v, Jr2Machine) else v) for k, v in self.actors.items()}
        chart = create_machine(cfg, actors=chart_actors, guards=self.guards, actions=self.actions,
                               delays=self.delays)
        m = self.machine_class(chart, self.events, self.actors, self.input)
        _check(m)
        m.warnings = _warnings(m)
        return m


def jr2_setup(events: Iterable[EventDef], actors: Mapping[str, Any], input: type[BaseModel] | None = None,
              guards: Mapping[str, Any] | None = None, actions: Mapping[str, Any] | None = None,
              delays: Mapping[str, Any] | None = None, machine_class: type[Jr2Machine] = Jr2Machine) -> Setup:
    """Name the events, the actor slots and the door schema of a Workflow."""
    return Setup(events, actors, input, guards, actions, delays, machine_class)
