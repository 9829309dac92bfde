"""State nodes and the loaded Machine. Loading checks the whole config once, so running never meets a bad one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .actions import Action, CustomAction, NamedAction
from .callables import Bound, bind
from .errors import ChartConfigError
from .guards import Guard, prepare_guard
from .work import Work

if TYPE_CHECKING:
    from .event import Event
    from .snapshot import Snapshot

STATE_KEYS = frozenset({
    "id", "key", "initial", "type", "history", "target", "states", "on", "always", "after", "entry", "exit",
    "invoke", "onDone", "context", "output", "description", "meta", "tags", "version",
})
TRANSITION_KEYS = frozenset({"target", "guard", "actions", "reenter", "description", "meta"})
INVOKE_KEYS = frozenset({"src", "id", "input", "onDone", "onError", "systemId", "meta"})


@dataclass(eq=False, slots=True)
class TransitionDef:
    source: StateNode
    event_type: str  # "" for an eventless (always) transition
    target_specs: tuple[str, ...] | None
    guard: Guard | None
    actions: list[Action]
    reenter: bool
    description: str | None = None
    targets: tuple[StateNode, ...] | None = None

    def target_paths(self) -> tuple[str, ...] | None:
        return None if self.targets is None else tuple(t.path for t in self.targets)


@dataclass(eq=False, slots=True)
class InvokeDef:
    id: str
    src: str
    input: Any  # a Bound or a plain value
    index: int


@dataclass(eq=False, slots=True)
class StateNode:
    key: str
    path: str  # dotted path from the machine id: "notes.writing.asking"
    id: str  # the custom id, or the path
    type: str  # atomic | compound | parallel | final | history
    parent: StateNode | None
    config: Mapping[str, Any]
    order: int = 0
    depth: int = 0
    children: dict[str, StateNode] = field(default_factory=dict)
    initial: StateNode | None = None
    history: str = "shallow"
    history_target: tuple[StateNode, ...] | None = None
    on: dict[str, list[TransitionDef]] = field(default_factory=dict)
    wildcard_keys: list[str] = field(default_factory=list)
    always: list[TransitionDef] = field(default_factory=list)
    entry: list[Action] = field(default_factory=list)
    exit: list[Action] = field(default_factory=list)
    invokes: list[InvokeDef] = field(default_factory=list)
    output: Any = None
    tags: tuple[str, ...] = ()
    ancestors: tuple[StateNode, ...] = ()  # proper ancestors, nearest first
    description: str | None = None
    meta: Any = None

    @property
    def is_atomic(self) -> bool:
        return self.type in ("atomic", "final")

    def is_descendant_of(self, other: StateNode) -> bool:
        """Proper descendant."""
        return other in self.ancestors

    def __repr__(self) -> str:
        return f"<StateNode {self.path}>"


class _ScheduleAfter(Action):
    name = "after"

    def __init__(self, delay: Any, event_type: str, label: str) -> None:
        self.delay = delay
        self.event_type = event_type
        self.label = label

    def resolve(self, work: Work, params: Any = None) -> None:
        from .effects import ScheduleTimer, TimerRecord

        d = self.delay(work.scope()) if isinstance(self.delay, Bound) else self.delay
        rec = TimerRecord(self.event_type, {"type": self.event_type}, work.now_ms + float(d), "self", work.owner)
        work.timers = {**work.timers, rec.id: rec}
        work.effects.append(ScheduleTimer(rec))


class _CancelAfter(Action):
    name = "cancel_after"

    def __init__(self, tid: str) -> None:
        self.tid = tid

    def resolve(self, work: Work, params: Any = None) -> None:
        from .effects import CancelTimer

        if self.tid in work.timers:
            work.timers = {k: v for k, v in work.timers.items() if k != self.tid}
            work.effects.append(CancelTimer(self.tid))


def _check_orthogonal(targets: tuple[StateNode, ...], where: str) -> None:
    """Several targets must lie in different regions of one parallel state, or the configuration entered would hold
    two children of one compound state (xstate does not check; it then runs with an invalid configuration)."""
    for i, a in enumerate(targets):
        for b in targets[i + 1:]:
            if a is b:  # the same target twice is entered once, as in xstate
                continue
            common = next((x for x in a.ancestors if x in b.ancestors), None)
            if a in b.ancestors or b in a.ancestors or common is None or common.type != "parallel":
                raise ChartConfigError(f"{where}: targets {a.path!r} and {b.path!r} are not in different regions "
                                       f"of one parallel state")


def _known_keys(cfg: Mapping[str, Any], known: frozenset[str], where: str, what: str) -> None:
    """Refuse a key the chart does not read: a misspelt one would otherwise be ignored without a word."""
    unknown = set(cfg) - known
    if unknown:
        raise ChartConfigError(f"{where}: unknown {what} key(s) {sorted(unknown)}")


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        return list(v)
    return [v]


def _state_type(cfg: Mapping[str, Any], has_states: bool, path: str) -> str:
    """A state's type as xstate infers it: given, else history (with `history`), compound (with states) or atomic.
    A compound state without children is atomic."""
    stype = cfg.get("type")
    if stype is None:
        stype = "history" if "history" in cfg else ("compound" if has_states else "atomic")
    if stype not in ("atomic", "compound", "parallel", "final", "history"):
        raise ChartConfigError(f"{path}: unknown state type {stype!r}")
    return "atomic" if stype == "compound" and not has_states else str(stype)


class Machine:
    """A loaded chart. Immutable after `create_machine`; every snapshot of it points back here."""

    def __init__(self, config: Mapping[str, Any], *, actors: Mapping[str, Any] | None = None,
                 guards: Mapping[str, Any] | None = None, actions: Mapping[str, Any] | None = None,
                 delays: Mapping[str, Any] | None = None) -> None:
        if not isinstance(config, Mapping):
            raise ChartConfigError(f"a machine config must be a dict, got {type(config).__name__}")
        self.config = config
        self.id: str = str(config.get("id", "(machine)"))
        self.actors: dict[str, Any] = dict(actors or {})
        self.guards: dict[str, Any] = dict(guards or {})
        self.named_actions: dict[str, Any] = dict(actions or {})
        self.delays: dict[str, Any] = dict(delays or {})
        self.nodes: list[StateNode] = []
        self.by_id: dict[str, StateNode] = {}
        self.by_path: dict[str, StateNode] = {}
        self.root = self._build(self.id, config, None)
        for n in self.nodes:
            self._wire(n)
        ctx = config.get("context")
        self.context: Any = bind(ctx, self.id, "context") if callable(ctx) else (dict(ctx) if ctx else {})
        out = config.get("output")
        self.output: Any = bind(out, self.id, "output") if callable(out) else out

    # ---- loading -------------------------------------------------------------------------------------------
    def _build(self, key: str, cfg: Mapping[str, Any], parent: StateNode | None) -> StateNode:
        path = key if parent is None else f"{parent.path}.{key}"
        if not isinstance(cfg, Mapping):
            raise ChartConfigError(f"{path}: a state config must be a dict, got {cfg!r}")
        _known_keys(cfg, STATE_KEYS, path, "state")
        if "." in key and parent is not None:
            raise ChartConfigError(f"{path}: a state key may not contain '.': {key!r}")
        states = cfg.get("states") or {}
        stype = _state_type(cfg, bool(states), path)
        node = StateNode(key=key, path=path, id=str(cfg.get("id") or path), type=stype, parent=parent,
                         config=cfg, order=len(self.nodes), depth=0 if parent is None else parent.depth + 1)
        node.ancestors = () if parent is None else (parent, *parent.ancestors)
        node.description = cfg.get("description")
        node.meta = cfg.get("meta")
        node.tags = tuple(_as_list(cfg.get("tags")))
        if stype == "history":
            node.history = cfg.get("history", "shallow") or "shallow"
            if node.history not in ("shallow", "deep"):
                raise ChartConfigError(f"{path}: history must be 'shallow' or 'deep', got {node.history!r}")
        self._register(node)
        for ck, ccfg in states.items():
            node.children[str(ck)] = self._build(str(ck), ccfg, node)
        return node

    def _register(self, node: StateNode) -> None:
        """Index a new node by its id and path (and by its path as an id, unless another state holds it)."""
        self.nodes.append(node)
        if node.id in self.by_id:
            raise ChartConfigError(f"{node.path}: duplicate state id {node.id!r}")
        self.by_id[node.id] = node
        self.by_path[node.path] = node
        if node.id != node.path:
            self.by_id.setdefault(node.path, node)

    def _resolve_target(self, node: StateNode, target: str) -> StateNode:
        where = node.path
        if not isinstance(target, str) or not target:
            raise ChartConfigError(f"{where}: a target must be a non-empty string, got {target!r}")
        if target.startswith("#"):
            found = self.node_by_ref(target)
            if found is None:
                raise ChartConfigError(f"{where}: unknown target {target!r}")
            return found
        if target.startswith("."):
            found = self._by_relpath(node, target[1:])
        elif node.parent is None:
            raise ChartConfigError(f"{where}: unknown target {target!r}: from the root use '.{target}'")
        else:
            found = self._by_relpath(node.parent, target)
        if found is None:
            raise ChartConfigError(f"{where}: unknown target {target!r}")
        return found

    @staticmethod
    def _by_relpath(node: StateNode, rel: str) -> StateNode | None:
        cur: StateNode | None = node
        for part in rel.split("."):
            if cur is None:
                return None
            cur = cur.children.get(part)
        return cur

    def node_by_ref(self, ref: str) -> StateNode | None:
        """`#id`, `#id.child`, a full path, or a path relative to the root."""
        r = ref[1:] if ref.startswith("#") else ref
        if r in self.by_id:
            return self.by_id[r]
        if r in self.by_path:
            return self.by_path[r]
        head, _, rest = r.partition(".")
        base = self.by_id.get(head)
        if base is not None and rest:
            found = self._by_relpath(base, rest)
            if found is not None:
                return found
        if not ref.startswith("#"):
            return self._by_relpath(self.root, r)
        return None

    def _actions(self, spec: Any, where: str) -> list[Action]:
        out: list[Action] = []
        for a in _as_list(spec):
            if isinstance(a, Action):
                out.append(a.prepare(where, self.delays))
            elif isinstance(a, str) or (isinstance(a, Mapping) and "type" in a):
                name = a if isinstance(a, str) else a["type"]
                params = None if isinstance(a, str) else a.get("params")
                if name not in self.named_actions:
                    raise ChartConfigError(f"{where}: unknown action {name!r}")
                impl = self.named_actions[name]
                if isinstance(impl, Action):
                    prepared = impl.prepare(where, self.delays)
                else:
                    prepared = CustomAction(impl).prepare(where, self.delays)
                    prepared.name = str(name)
                if callable(params):
                    params = bind(params, where, f"params of {name!r}")
                out.append(NamedAction(prepared, params, str(name)))
            elif callable(a):
                out.append(CustomAction(a).prepare(where, self.delays))
            else:
                raise ChartConfigError(f"{where}: an action must be callable, a name or a built-in, got {a!r}")
        return out

    def _transitions(self, node: StateNode, event_type: str, spec: Any) -> list[TransitionDef]:
        where = f"{node.path} on {event_type!r}" if event_type else f"{node.path} always"
        out: list[TransitionDef] = []
        items = spec if isinstance(spec, (list, tuple)) else [spec]
        for item in items:
            if item is None:
                continue
            if isinstance(item, str):
                item = {"target": item}
            if not isinstance(item, Mapping):
                raise ChartConfigError(f"{where}: a transition must be a target string or a dict, got {item!r}")
            _known_keys(item, TRANSITION_KEYS, where, "transition")
            tspec = item.get("target")
            targets = None if tspec is None else tuple(_as_list(tspec))
            guard = None
            if "guard" in item and item["guard"] is not None:
                guard = prepare_guard(item["guard"], where, self.guards, self.node_by_ref)
            t = TransitionDef(source=node, event_type=event_type, target_specs=targets, guard=guard,
                              actions=self._actions(item.get("actions"), where),
                              reenter=bool(item.get("reenter", False)), description=item.get("description"))
            if targets is not None:
                t.targets = tuple(self._resolve_target(node, ts) for ts in targets)
                _check_orthogonal(t.targets, where)
            out.append(t)
        return out

    def _add(self, node: StateNode, event_type: str, spec: Any) -> None:
        ts = self._transitions(node, event_type, spec)
        node.on.setdefault(event_type, []).extend(ts)
        if (event_type == "*" or event_type.endswith(".*")) and event_type not in node.wildcard_keys:
            node.wildcard_keys.append(event_type)
            node.wildcard_keys.sort(key=len, reverse=True)

    def _wire(self, node: StateNode) -> None:
        """Resolve one node's initial, history default, transitions and invokes, each load error naming its state.

        The parts run in a fixed order, which is the order of `node.on` (and so of the digest): `on`, `always`,
        `after`, `onDone`, then each invoke's `onDone`/`onError`."""
        cfg = node.config
        where = node.path
        self._wire_initial(node)
        if node.type == "history" and cfg.get("target") is not None:
            node.history_target = tuple(self._resolve_target(node, t) for t in _as_list(cfg["target"]))
        node.entry = self._actions(cfg.get("entry"), f"{where} entry")
        node.exit = self._actions(cfg.get("exit"), f"{where} exit")
        on = cfg.get("on") or {}
        if not isinstance(on, Mapping):
            raise ChartConfigError(f"{where}: 'on' must be a dict")
        for etype, spec in on.items():
            self._add(node, str(etype), spec)
        node.always.extend(self._transitions(node, "", cfg.get("always")))
        for delay, spec in (cfg.get("after") or {}).items():
            self._wire_after(node, delay, spec)
        if cfg.get("onDone") is not None:
            self._add(node, f"xstate.done.state.{node.id}", cfg["onDone"])
        inv_list = _as_list(cfg.get("invoke"))
        for i, inv in enumerate(inv_list):
            self._wire_invoke(node, i, inv, alone=len(inv_list) == 1)
        out = cfg.get("output")
        if node.parent is not None and out is not None:
            node.output = bind(out, where, "output") if callable(out) else out

    def _wire_initial(self, node: StateNode) -> None:
        """A compound state's `initial` names one of its children; no other state type may have one."""
        init = node.config.get("initial")
        if node.type != "compound":
            if init is not None:
                raise ChartConfigError(f"{node.path}: 'initial' on a {node.type} state")
            return
        if init is None:
            raise ChartConfigError(f"{node.path}: compound state has no 'initial'")
        found = self._by_relpath(node, str(init).lstrip("."))
        if found is None:
            raise ChartConfigError(f"{node.path}: initial {init!r} names no child state")
        node.initial = found

    def _delay(self, node: StateNode, delay: Any) -> Any:
        """An `after` key as a delay: a number (or numeric string) in ms, or a named delay from `delays`."""
        if not isinstance(delay, str):
            return delay
        if delay.lstrip("-").replace(".", "", 1).isdigit():
            return float(delay)
        if delay not in self.delays:
            raise ChartConfigError(f"{node.path}: unknown delay {delay!r}")
        d = self.delays[delay]
        return bind(d, node.path, f"delay {delay!r}") if callable(d) else d

    def _wire_after(self, node: StateNode, delay: Any, spec: Any) -> None:
        """A delayed transition: its timer starts on entry, is cancelled first thing on exit, and fires an event."""
        etype = f"xstate.after.{delay}.{node.id}"
        node.entry.append(_ScheduleAfter(self._delay(node, delay), etype, str(delay)))
        node.exit.insert(0, _CancelAfter(etype))
        self._add(node, etype, spec)

    def _invoke_src(self, node: StateNode, i: int, src: Any) -> str:
        """The slot name an invoke's `src` refers to; an inline actor gets a slot named after its invoke."""
        if isinstance(src, str):
            if src not in self.actors:
                raise ChartConfigError(f"{node.path}: unknown src {src!r}")
            return src
        if src is None:
            raise ChartConfigError(f"{node.path}: invoke has no 'src'")
        name = f"{node.id}:invocation[{i}]"
        self.actors[name] = src
        return name

    def _wire_invoke(self, node: StateNode, i: int, inv: Any, alone: bool) -> None:
        where = node.path
        if isinstance(inv, str):
            inv = {"src": inv}
        if not isinstance(inv, Mapping):
            raise ChartConfigError(f"{where}: an invoke must be a dict, got {inv!r}")
        _known_keys(inv, INVOKE_KEYS, where, "invoke")
        src_name = self._invoke_src(node, i, inv.get("src"))
        iid = str(inv.get("id") or (node.id if alone else f"{node.id}:invocation[{i}]"))
        inp = inv.get("input")
        if callable(inp):
            inp = bind(inp, where, "invoke input")
        node.invokes.append(InvokeDef(iid, src_name, inp, i))
        if inv.get("onDone") is not None:
            self._add(node, f"xstate.done.actor.{iid}", inv["onDone"])
        if inv.get("onError") is not None:
            self._add(node, f"xstate.error.actor.{iid}", inv["onError"])

    # ---- helpers for callers ----------------------------------------------------------------------------------
    def node(self, ref: str) -> StateNode:
        n = self.node_by_ref(ref)
        if n is None:
            raise KeyError(f"no state {ref!r} in machine {self.id!r}")
        return n

    def shape(self) -> dict[str, Any]:
        """The chart's shape (A8): ids, types, nesting, initial, invokes with src, transitions. No functions."""
        states = []
        for n in self.nodes:
            trans = []
            for etype, ts in n.on.items():
                for t in ts:
                    trans.append(f"{n.path}|{etype}|{','.join(t.target_paths() or ())}")
            for t in n.always:
                trans.append(f"{n.path}||{','.join(t.target_paths() or ())}")
            states.append({"path": n.path, "id": n.id, "type": n.type,
                           "initial": n.initial.path if n.initial else None,
                           "invokes": [f"{i.id}:{i.src}" for i in n.invokes], "transitions": trans})
        return {"id": self.id, "states": states}

    def digest(self) -> str:
        raw = json.dumps(self.shape(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:12]

    # Pure functions, as methods too (xstate style).
    def initial_transition(self, input: Any = None, now_ms: float = 0.0,
                           extras: dict[str, Any] | None = None) -> tuple[Snapshot, list[Any]]:
        from .algorithm import initial_transition

        return initial_transition(self, input, now_ms, extras)

    def transition(self, snapshot: Snapshot, event: Event | Mapping[str, Any] | str, now_ms: float | None = None,
                   extras: dict[str, Any] | None = None) -> tuple[Snapshot, list[Any]]:
        from .algorithm import transition

        return transition(self, snapshot, event, now_ms, extras)

    def __repr__(self) -> str:
        return f"<Machine {self.id} ({len(self.nodes)} states)>"


def create_machine(config: Mapping[str, Any], *, actors: Mapping[str, Any] | None = None,
                   guards: Mapping[str, Any] | None = None, actions: Mapping[str, Any] | None = None,
                   delays: Mapping[str, Callable[..., Any] | float | int] | None = None) -> Machine:
    """Load and check a config; every error names the state path."""
    return Machine(config, actors=actors, guards=guards, actions=actions, delays=delays)
