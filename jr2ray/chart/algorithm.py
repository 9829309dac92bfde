"""The pure statechart algorithm (C2-C8), following xstate v5's reading of SCXML.

`transition(machine, snapshot, event)` never mutates its inputs and runs no side effect: custom actions, children and
timers come back as effects for an actor to run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from .callables import Bound
from .effects import ChildRecord, StartChild, StopChild, Took
from .errors import ActionError, ChartError, GuardError
from .event import Event
from .guards import FnGuard, Guard
from .nodes import Machine, StateNode, TransitionDef
from .snapshot import Snapshot
from .work import Work

MAX_MICROSTEPS = 10_000

GuardEvaluator = Callable[[TransitionDef, dict[str, Any]], bool]


def _default_leaf(g: FnGuard, scope: dict[str, Any]) -> bool:
    try:
        return g.call(scope)
    except ChartError:
        raise
    except Exception as exc:
        ev = scope.get("event")
        raise GuardError(g.label, getattr(ev, "type", "?"), scope.get("_state", "?"), exc) from exc


def strict_guard(t: TransitionDef, scope: dict[str, Any]) -> bool:
    """The guard as xstate runs it: a raise is a GuardError naming the guard, the event and the state."""
    assert t.guard is not None
    return t.guard.check(scope, _default_leaf)


def _wildcard_match(descriptor: str, etype: str) -> bool:
    if descriptor == "*":
        return True
    parts = descriptor.split(".")
    tokens = etype.split(".")
    for i, part in enumerate(parts):
        if part == "*":
            return i == len(parts) - 1
        if i >= len(tokens) or part != tokens[i]:
            return False
    return True


def candidates(node: StateNode, etype: str) -> list[TransitionDef]:
    """The exact key's transitions, then matching wildcards, longest first (xstate's order)."""
    found = node.on.get(etype)
    if not node.wildcard_keys:
        return found if found is not None else []
    out: list[TransitionDef] = list(found) if found is not None else []
    for k in node.wildcard_keys:
        if k != etype and _wildcard_match(k, etype):
            out.extend(node.on[k])
    return out


def _in_order(config: Collection[StateNode]) -> Iterable[StateNode]:
    """Entry order when the caller kept it (a dict or a sequence); document order for a bare set."""
    if isinstance(config, (set, frozenset)):
        return sorted(config, key=lambda n: n.order)
    return config


def _first_enabled(node: StateNode, etype: str, base: dict[str, Any], guard_eval: GuardEvaluator
                   ) -> TransitionDef | None:
    for t in candidates(node, etype):
        if t.guard is None:
            return t
        base["_state"] = node.path
        if guard_eval(t, base):
            return t
    return None


def select_transitions(config: Collection[StateNode], context: dict[str, Any], event: Event,
                       guard_eval: GuardEvaluator = strict_guard,
                       extras: Mapping[str, Any] | None = None) -> list[TransitionDef]:
    """The transitions for an event, found by walking the state value from the root, as xstate does (C2).

    Each active child returns its transitions; a node's own transition counts only when none of its active children
    returned one. So in a parallel state a region that handles the event (even with a forbidden `{}`) shadows the
    parallel state and its ancestors, and a region that does not handle it adds nothing. Regions are visited in the
    order they were entered when `config` keeps that order (a dict or a sequence), else in document order.
    """
    etype = event.type
    base: dict[str, Any] = {"context": context, "event": event, "params": None, "_config": config,
                            "input": (extras or {}).get("input"), "chain": (extras or {}).get("chain")}
    atoms = [n for n in config if n.is_atomic]
    if len(atoms) == 1:  # no parallel state active: the value is one chain, walked from its leaf outward
        for node in (atoms[0], *atoms[0].ancestors):
            hit = _first_enabled(node, etype, base, guard_eval)
            if hit is not None:
                return [hit]
        return []
    kids: dict[StateNode, list[StateNode]] = {}
    root: StateNode | None = None
    for n in _in_order(config):
        if n.parent is None:
            root = n
        else:
            kids.setdefault(n.parent, []).append(n)
    if root is None:
        return []

    def walk(node: StateNode) -> list[TransitionDef]:
        found: list[TransitionDef] = []
        for child in kids.get(node, ()):
            found.extend(walk(child))
        if found:
            return found
        hit = _first_enabled(node, etype, base, guard_eval)
        return [] if hit is None else [hit]

    return walk(root)


def _select_eventless(work: Work) -> list[TransitionDef]:
    """From each active atomic state outward, in the order the atomic states were entered (xstate's `_nodes`)."""
    enabled: list[TransitionDef] = []
    base: dict[str, Any] = {"context": work.context, "event": work.event, "params": None, "_config": work.config,
                            "input": work.extras.get("input"), "chain": work.extras.get("chain")}
    for atom in [n for n in work.config if n.is_atomic]:
        hit = None
        for node in (atom, *atom.ancestors):
            for t in node.always:
                if t.guard is None:
                    hit = t
                    break
                base["_state"] = node.path
                if strict_guard(t, base):
                    hit = t
                    break
            if hit is not None:
                break
        if hit is not None and hit not in enabled:
            enabled.append(hit)
    return enabled


# ---- exit and entry sets (xstate v5 / SCXML) ------------------------------------------------------------------
def _history_nodes(history: Mapping[str, tuple[str, ...]], machine: Machine, hnode: StateNode) -> list[StateNode]:
    return [machine.by_path[p] for p in history.get(hnode.id, ()) if p in machine.by_path]


def _history_default(hnode: StateNode) -> tuple[StateNode, ...]:
    """Where a history state with nothing recorded goes: its `target`, else the parent's initial state, or, in a
    parallel parent (which has no initial), the parallel state itself with all its regions (as xstate)."""
    if hnode.history_target:
        return hnode.history_target
    parent = hnode.parent
    assert parent is not None
    if parent.type == "parallel":
        return (parent,)
    if parent.initial is not None:
        return (parent.initial,)
    return ()


def _effective_targets(t: TransitionDef, history: Mapping[str, tuple[str, ...]], machine: Machine) -> list[StateNode]:
    if not t.targets:
        return []
    out: list[StateNode] = []
    stack = list(t.targets)
    for target in stack:
        if target.type == "history":
            recorded = _history_nodes(history, machine, target)
            if recorded:
                nodes: list[StateNode] = recorded
            else:
                nodes = []
                for d in _history_default(target):
                    if d.type == "history":
                        nodes.extend(_effective_targets(
                            TransitionDef(target, "", None, None, [], False, targets=(d,)), history, machine))
                    else:
                        nodes.append(d)
            for n in nodes:
                if n not in out:
                    out.append(n)
        elif target not in out:
            out.append(target)
    return out


def _lcca(nodes: list[StateNode]) -> StateNode | None:
    head, tail = nodes[0], nodes[1:]
    for anc in head.ancestors:
        if all(anc in n.ancestors for n in tail):
            return anc
    return None


_ROOT_REENTER = object()


def _domain(t: TransitionDef, history: Mapping[str, tuple[str, ...]], machine: Machine) -> Any:
    targets = _effective_targets(t, history, machine)
    if not targets:
        return None
    if not t.reenter and all(x is t.source or t.source in x.ancestors for x in targets):
        return t.source
    lcca = _lcca([*targets, t.source])
    if lcca is not None:
        return lcca
    if t.reenter:
        return _ROOT_REENTER
    return machine.root


def _exit_set(transitions: list[TransitionDef], config: Collection[StateNode],
              history: Mapping[str, tuple[str, ...]], machine: Machine) -> set[StateNode]:
    out: set[StateNode] = set()
    for t in transitions:
        if not t.targets:
            continue
        domain = _domain(t, history, machine)
        if domain is _ROOT_REENTER:
            out.update(config)
            continue
        if t.reenter and t.source is domain:
            out.add(domain)
        for s in config:
            if domain in s.ancestors:
                out.add(s)
    return out


def _remove_conflicts(enabled: list[TransitionDef], config: Collection[StateNode],
                      history: Mapping[str, tuple[str, ...]], machine: Machine) -> list[TransitionDef]:
    if len(enabled) < 2:
        return enabled
    kept: list[TransitionDef] = []
    exits: dict[int, set[StateNode]] = {}

    def ex(t: TransitionDef) -> set[StateNode]:
        key = id(t)
        if key not in exits:
            exits[key] = _exit_set([t], config, history, machine)
        return exits[key]

    for t1 in enabled:
        preempted = False
        remove: list[TransitionDef] = []
        for t2 in kept:
            if ex(t1) & ex(t2):
                if t2.source in t1.source.ancestors:
                    remove.append(t2)
                else:
                    preempted = True
                    break
        if not preempted:
            for t3 in remove:
                kept.remove(t3)
            kept.append(t1)
    return kept


class _EntrySet:
    __slots__ = ("to_enter", "default_entry")

    def __init__(self) -> None:
        self.to_enter: set[StateNode] = set()
        self.default_entry: set[StateNode] = set()


def _regions(node: StateNode) -> list[StateNode]:
    return [c for c in node.children.values() if c.type != "history"]


def _add_descendants(s: StateNode, history: Mapping[str, tuple[str, ...]], machine: Machine, es: _EntrySet) -> None:
    if s.type == "history":
        recorded = _history_nodes(history, machine, s)
        if recorded:
            for r in recorded:
                es.to_enter.add(r)
                _add_descendants(r, history, machine, es)
            for r in recorded:
                _add_ancestors(es, history, machine, _proper_ancestors(r, s.parent))
        else:
            targets = _history_default(s)
            for r in targets:
                es.to_enter.add(r)
                _add_descendants(r, history, machine, es)
            for r in targets:
                _add_ancestors(es, history, machine, _proper_ancestors(r, s.parent))
        return
    if s.type == "compound":
        init = s.initial
        assert init is not None
        if init.type != "history":
            es.to_enter.add(init)
            es.default_entry.add(init)
        _add_descendants(init, history, machine, es)
        _add_ancestors(es, history, machine, _proper_ancestors(init, s))
    elif s.type == "parallel":
        for child in _regions(s):
            if not any(child in e.ancestors for e in es.to_enter):
                es.to_enter.add(child)
                es.default_entry.add(child)
                _add_descendants(child, history, machine, es)


def _proper_ancestors(s: StateNode, upto: StateNode | None) -> list[StateNode]:
    """The ancestors of `s` nearest first, stopping before `upto`; none when `s` is `upto` itself (as xstate), so a
    self-targeting transition below a parallel state does not re-enter that state's regions."""
    out: list[StateNode] = []
    if s is upto:
        return out
    for anc in s.ancestors:
        if anc is upto:
            break
        out.append(anc)
    return out


def _add_ancestors(es: _EntrySet, history: Mapping[str, tuple[str, ...]], machine: Machine,
                   ancestors: list[StateNode], reentrancy_domain: StateNode | None = None) -> None:
    for anc in ancestors:
        if reentrancy_domain is None or reentrancy_domain in anc.ancestors:
            es.to_enter.add(anc)
        if anc.type == "parallel":
            for child in _regions(anc):
                if not any(child in e.ancestors for e in es.to_enter):
                    es.to_enter.add(child)
                    _add_descendants(child, history, machine, es)


def _entry_set(transitions: list[TransitionDef], history: Mapping[str, tuple[str, ...]], machine: Machine,
               domain_history: Mapping[str, tuple[str, ...]] | None = None) -> _EntrySet:
    """What to enter, with the history the exits just recorded; the domain comes from `domain_history`, the history
    the exit set was computed with, so exit and entry agree on it.

    xstate recomputes the domain from the new history. For a region targeting its own parallel parent's history with
    nothing recorded, that exits the parallel state (domain above it) but does not enter it again (domain the
    parallel state), which leaves an invalid configuration; jr2ray enters it again.
    """
    es = _EntrySet()
    dom_hist = history if domain_history is None else domain_history
    for t in transitions:
        if not t.targets:
            continue
        domain = _domain(t, dom_hist, machine)
        dom_node: StateNode | None = None if domain is _ROOT_REENTER else domain
        for s in t.targets:
            if s.type != "history" and (t.source is not s or t.source is not dom_node or t.reenter):
                es.to_enter.add(s)
                es.default_entry.add(s)
            _add_descendants(s, history, machine, es)
        for s in _effective_targets(t, history, machine):
            ancestors = _proper_ancestors(s, dom_node)
            if dom_node is not None and dom_node.type == "parallel":
                ancestors.append(dom_node)
            reentry = None if (t.source.parent is None and t.reenter) else dom_node
            _add_ancestors(es, history, machine, ancestors, reentry)
    return es


# ---- actions ----------------------------------------------------------------------------------------------------
def _run_actions(work: Work, actions: list[Any], owner: str) -> None:
    work.owner = owner
    for a in actions:
        a.resolve(work)


def _resolve(v: Any, work: Work) -> Any:
    if isinstance(v, Bound):
        try:
            return v(work.scope())
        except ChartError:
            raise
        except Exception as exc:
            raise ActionError(
                f"{v.label} in state {work.owner!r} on event {work.event.type!r} raised: {exc!r}") from exc
    return copy.deepcopy(v)


def _start_invokes(work: Work, s: StateNode) -> None:
    if not s.invokes:
        return
    children = dict(work.children)
    for inv in s.invokes:
        inp = _resolve(inv.input, work)
        rec = ChildRecord(inv.id, inv.src, inp, s.path, work.next_seq())
        children[inv.id] = rec
        work.effects.append(StartChild(inv.id, inv.src, inp, s.path))
    work.children = children


def _stop_invokes(work: Work, s: StateNode) -> None:
    if not s.invokes:
        return
    children = dict(work.children)
    for inv in s.invokes:
        if children.pop(inv.id, None) is not None:
            work.effects.append(StopChild(inv.id))
    work.children = children


def _in_final(config: Collection[StateNode], node: StateNode) -> bool:
    if node.type == "compound":
        return any(c.type == "final" and c in config for c in node.children.values())
    if node.type == "parallel":
        return all(_in_final(config, c) for c in _regions(node))
    return node.type == "final"


def _done_state_event(node: StateNode, output: Any) -> Event:
    return Event(f"xstate.done.state.{node.id}", {"output": output} if output is not None else {})


class _Status:
    __slots__ = ("status", "output", "error")

    def __init__(self, status: str, output: Any = None, error: Any = None) -> None:
        self.status = status
        self.output = output
        self.error = error


def _enter(work: Work, machine: Machine, es: _EntrySet, st: _Status) -> list[StateNode]:
    entered = sorted(es.to_enter, key=lambda n: n.order)
    completed: set[StateNode] = set()
    for s in entered:
        work.config[s] = None  # a node already active keeps its place in the entry order, as in a JS Set
        _run_actions(work, s.entry, s.path)
        _start_invokes(work, s)
        if s.type != "final":
            continue
        parent = s.parent
        marker = None if parent is None else (parent if parent.type == "parallel" else parent.parent)
        root_completion = marker or s
        if parent is not None and parent.type == "compound":
            out = _resolve(s.output, work) if s.output is not None else None
            work.internal_queue.append(_done_state_event(parent, out))
        while marker is not None and marker.type == "parallel" and marker not in completed \
                and _in_final(work.config, marker):
            completed.add(marker)
            work.internal_queue.append(_done_state_event(marker, None))
            root_completion = marker
            marker = marker.parent
        if marker is not None:
            continue
        st.status = "done"
        if machine.output is not None:
            rc_out = None
            if root_completion.output is not None and root_completion.parent is not None:
                rc_out = _resolve(root_completion.output, work)
            saved = work.event
            work.event = _done_state_event(root_completion, rc_out)
            work.owner = machine.root.path
            st.output = _resolve(machine.output, work)
            work.event = saved
    return entered


def _recorded_history(work: Work, exit_set: list[StateNode]) -> dict[str, tuple[str, ...]] | None:
    """The history each exiting state's history children record (deep: atomic descendants, shallow: children);
    None when no exiting state has a history child, so the snapshot keeps the same history object."""
    new_hist: dict[str, tuple[str, ...]] | None = None
    for s in exit_set:
        for h in s.children.values():
            if h.type != "history":
                continue
            if h.history == "deep":
                rec = [n for n in work.config if n.is_atomic and s in n.ancestors]
            else:
                rec = [n for n in work.config if n.parent is s]
            if new_hist is None:
                new_hist = dict(work.history)
            new_hist[h.id] = tuple(n.path for n in sorted(rec, key=lambda n: n.order))
    return new_hist


def _exit_states(work: Work, machine: Machine, transitions: list[TransitionDef]) -> list[StateNode]:
    """Exit the transitions' exit set, deepest last-entered first: record history, run exit actions, stop
    invokes. Returns the states exited, in that order."""
    exit_set = sorted(_exit_set(transitions, work.config, work.history, machine), key=lambda n: -n.order)
    new_hist = _recorded_history(work, exit_set)
    if new_hist is not None:
        work.history = new_hist
    for s in exit_set:
        _run_actions(work, s.exit, s.path)
        _stop_invokes(work, s)
        work.config.pop(s, None)
    return exit_set


def _stop_all(work: Work) -> None:
    """The machine reached its final state: exit every active state and stop every child and timer."""
    for s in sorted(work.config, key=lambda n: -n.order):
        _run_actions(work, s.exit, s.path)
    for cid in list(work.children):
        work.effects.append(StopChild(cid))
    work.children = {}
    work.timers = {}


def _microstep(work: Work, machine: Machine, transitions: list[TransitionDef], st: _Status,
               is_initial: bool = False) -> None:
    if not transitions:
        return
    work.microstep += 1
    if work.microstep > MAX_MICROSTEPS:
        raise ChartError(f"more than {MAX_MICROSTEPS} microsteps in one macrostep: an always/raise loop?")
    transitions = _remove_conflicts(transitions, work.config, work.history, machine)
    history_before = work.history
    order_before = tuple(work.config)
    exited = [] if is_initial else _exit_states(work, machine, transitions)
    for t in transitions:
        _run_actions(work, t.actions, t.source.path)
    es = _entry_set(transitions, work.history, machine, history_before)
    entered = _enter(work, machine, es, st)
    if exited and work.history is history_before and work.config.keys() == set(order_before):
        # Like xstate, a microstep that ends on the same set of active nodes (history untouched) keeps the old
        # entry order, even though it exited and entered some of them again.
        work.config = dict.fromkeys(order_before)
    ex_paths = tuple(s.path for s in exited)
    en_paths = tuple(s.path for s in entered)
    for t in transitions:
        work.took.append(Took(t.source.path, t.event_type, t.target_paths(), bool(t.actions), work.microstep,
                              ex_paths, en_paths))
    if st.status == "done":
        _stop_all(work)


def _settle(work: Work, machine: Machine, st: _Status) -> None:
    """Run always transitions after each microstep, then raised events, until stable (C4)."""
    select_eventless = True
    while st.status == "active":
        enabled = _select_eventless(work) if select_eventless else []
        eventless = bool(enabled)
        if not enabled:
            if not work.internal_queue:
                break
            ev = work.internal_queue.pop(0)
            work.event = ev
            _mark_child(work, ev)
            enabled = select_transitions(work.config, work.context, ev, strict_guard, work.extras)
        before = (frozenset(work.config), work.context, work.history, st.status)
        _microstep(work, machine, enabled, st)
        # Like xstate: an eventless microstep that changed nothing is not selected again until something happens.
        select_eventless = not eventless or before != (frozenset(work.config), work.context, work.history, st.status)


def _new_work(snapshot: Snapshot, event: Event, now_ms: float, extras: Mapping[str, Any] | None) -> Work:
    return Work(context=snapshot.context, event=event, now_ms=now_ms, extras=dict(extras or {}),
                timers=snapshot.timers, children=snapshot.children, history=snapshot.history, seq=snapshot.seq,
                config=dict.fromkeys(snapshot.entered))


def _finish(snapshot: Snapshot, work: Work, st: _Status) -> Snapshot:
    return Snapshot(snapshot.machine, tuple(work.config), work.context, st.status, st.output, st.error,
                    work.history, work.children, work.timers, work.seq)


def _now(now_ms: float | None) -> float:
    if now_ms is not None:
        return now_ms
    import time

    return time.time() * 1000.0


def _mark_child(work: Work, event: Event) -> None:
    etype = event.type
    if etype.startswith("xstate.done.actor."):
        cid, status, out = etype[len("xstate.done.actor."):], "done", event.get("output")
    elif etype.startswith("xstate.error.actor."):
        cid, status, out = etype[len("xstate.error.actor."):], "error", event.get("error")
    else:
        return
    rec = work.children.get(cid)
    if rec is not None and rec.status == "active":
        work.children = {**work.children, cid: ChildRecord(rec.id, rec.src, rec.input, rec.state, rec.seq, status,
                                                           out, rec.snapshot)}


def transition(machine: Machine, snapshot: Snapshot, event: Event | Mapping[str, Any] | str,
               now_ms: float | None = None, extras: Mapping[str, Any] | None = None) -> tuple[Snapshot, list[Any]]:
    """One macrostep (C3, C4). Pure: returns the next snapshot and the effects to run."""
    snap, effects, _ = transition_traced(machine, snapshot, event, now_ms, extras)
    return snap, effects


def transition_traced(machine: Machine, snapshot: Snapshot, event: Event | Mapping[str, Any] | str,
                      now_ms: float | None = None, extras: Mapping[str, Any] | None = None
                      ) -> tuple[Snapshot, list[Any], list[Took]]:
    """`transition`, plus the transitions taken in each microstep (what a Run needs to write receipts)."""
    ev = Event.from_any(event)
    if snapshot.status != "active":
        return snapshot, [], []
    work = _new_work(snapshot, ev, _now(now_ms), extras)
    _mark_child(work, ev)
    st = _Status("active")
    enabled = select_transitions(work.config, work.context, ev, strict_guard, work.extras)
    if not enabled and ev.type.startswith("xstate.error.actor."):
        err = ev.get("error")
        for cid in list(work.children):
            work.effects.append(StopChild(cid))
        return Snapshot(machine, snapshot.entered, snapshot.context, "error", None, err, snapshot.history, {},
                        {}, work.seq), work.effects, work.took
    _microstep(work, machine, enabled, st)
    _settle(work, machine, st)
    if not work.took and not work.effects and work.children is snapshot.children \
            and work.context is snapshot.context and work.config.keys() == snapshot.config:
        return snapshot, [], []
    return _finish(snapshot, work, st), work.effects, work.took


def initial_transition(machine: Machine, input: Any = None, now_ms: float = 0.0,
                       extras: Mapping[str, Any] | None = None) -> tuple[Snapshot, list[Any]]:
    """Enter the root and its initial states, then settle (xstate's getInitialSnapshot)."""
    snap, effects, _ = initial_transition_traced(machine, input, now_ms, extras)
    return snap, effects


def initial_transition_traced(machine: Machine, input: Any = None, now_ms: float = 0.0,
                              extras: Mapping[str, Any] | None = None) -> tuple[Snapshot, list[Any], list[Took]]:
    ex = dict(extras or {})
    ex.setdefault("input", input)
    init_ev = Event("xstate.init", {"input": input} if input is not None else {})
    if isinstance(machine.context, Bound):
        try:
            ctx = machine.context({"input": input, "context": None, "event": init_ev})
        except Exception as exc:
            raise ActionError(f"context of machine {machine.id!r} raised: {exc!r}") from exc
        if not isinstance(ctx, Mapping):
            raise ActionError(f"context of machine {machine.id!r} must return a dict, got {ctx!r}")
        ctx = dict(ctx)
    else:
        ctx = copy.deepcopy(machine.context)
    empty = Snapshot(machine, frozenset(), ctx)
    work = _new_work(empty, init_ev, now_ms, ex)
    st = _Status("active")
    es = _EntrySet()
    es.to_enter.add(machine.root)
    _add_descendants(machine.root, work.history, machine, es)
    work.microstep = 1
    entered = _enter(work, machine, es, st)
    work.took.append(Took(machine.root.path, "xstate.init", tuple(s.path for s in entered), False, 1, (),
                          tuple(s.path for s in entered)))
    if st.status == "done":
        for s in sorted(work.config, key=lambda n: -n.order):
            _run_actions(work, s.exit, s.path)
    _settle(work, machine, st)
    return _finish(empty, work, st), work.effects, work.took


def can(snapshot: Snapshot, event: Event | Mapping[str, Any] | str,
        guard_eval: GuardEvaluator = strict_guard, extras: Mapping[str, Any] | None = None) -> bool:
    """True when the selected transitions have a target or actions (C8). The very event reaches the guards."""
    if snapshot.status != "active":
        return False
    ev = Event.from_any(event)
    ts = select_transitions(snapshot.entered, snapshot.context, ev, guard_eval, extras)
    return any(t.targets is not None or t.actions for t in ts)


def fire_timer(machine: Machine, snapshot: Snapshot, timer_id: str, now_ms: float | None = None,
               extras: Mapping[str, Any] | None = None) -> tuple[Snapshot, list[Any], list[Took]]:
    """A pending timer came due: drop its record, then deliver its event (to self, or a SendTo effect)."""
    from .effects import SendTo

    rec = snapshot.timers.get(timer_id)
    if rec is None or snapshot.status != "active":
        return snapshot, [], []
    rest = {k: v for k, v in snapshot.timers.items() if k != timer_id}
    snap = snapshot.with_(timers=rest)
    ev = Event.from_any(rec.event)
    if rec.target == "self":
        return transition_traced(machine, snap, ev, now_ms, extras)
    return snap, [SendTo(rec.target, ev)], []


__all__ = ["transition", "transition_traced", "initial_transition_traced", "initial_transition", "can", "fire_timer",
           "select_transitions", "strict_guard", "candidates", "Guard"]
