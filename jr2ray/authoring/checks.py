"""Static Menu checks at load (A7): what a Workflow author should hear about before any Run starts.

Each check returns warning sentences that name the state path. They are for the author (in `machine.warnings`),
never for the model, so they live here and not in `jr2ray/menu/texts.py`. Nothing here calls user code: a guard's
constant value is read from its code object.
"""

from __future__ import annotations

import dis
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from jr2ray.chart import Machine, StateNode, TransitionDef
from jr2ray.chart.guards import AndGuard, FnGuard, Guard, NotGuard, OrGuard

if TYPE_CHECKING:
    from .structure import Structure

_FILLER = frozenset({"RESUME", "NOP", "CACHE", "PRECALL", "EXTENDED_ARG"})


def constant_result(fn: Any) -> object:
    """What `fn` returns when its body is only `return <literal>`, else the sentinel `UNKNOWN`. Never calls `fn`."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None:
        return UNKNOWN
    ops = [i for i in dis.get_instructions(code) if i.opname not in _FILLER]
    if len(ops) == 2 and ops[0].opname == "LOAD_CONST" and ops[1].opname == "RETURN_VALUE":
        return ops[0].argval
    if len(ops) == 1 and ops[0].opname == "RETURN_CONST":  # Python 3.12+
        return ops[0].argval
    return UNKNOWN


UNKNOWN = object()


def guard_constant(guard: Guard | None) -> bool | None:
    """True/False when a guard's value is fixed by literals alone (combinators included), None when it depends."""
    if guard is None:
        return True
    if isinstance(guard, FnGuard):
        value = constant_result(guard.bound.fn)
        if value is UNKNOWN or not isinstance(value, (bool, int, type(None))):
            return None
        return bool(value)
    if isinstance(guard, NotGuard):
        inner = guard_constant(guard.inner)
        return None if inner is None else not inner
    if isinstance(guard, (AndGuard, OrGuard)):
        parts = [guard_constant(p) for p in guard.parts]
        if isinstance(guard, AndGuard):
            return False if False in parts else (True if all(p is True for p in parts) else None)
        return True if True in parts else (False if all(p is False for p in parts) else None)
    return None


def _transitions(node: StateNode) -> Iterable[TransitionDef]:
    for ts in node.on.values():
        yield from ts
    yield from node.always


def reachable_states(chart: Machine) -> set[StateNode]:
    """The states some path from the initial state can enter (a safe over-estimate: it never calls a guard, and only
    a guard that is the literal constant false closes a transition)."""
    seen: set[StateNode] = set()
    stack = [chart.root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        nxt: list[StateNode] = list(node.ancestors)
        nxt += [c for a in node.ancestors if a.type == "parallel" for c in a.children.values()]
        if node.type == "parallel":
            nxt += list(node.children.values())
        elif node.initial is not None:
            nxt.append(node.initial)
        nxt += list(node.history_target or ())
        for t in _transitions(node):
            if guard_constant(t.guard) is not False:
                nxt += list(t.targets or ())
        stack.extend(n for n in nxt if n not in seen)
    return seen


def _forbidden(t: TransitionDef) -> bool:
    """`{}`: no target, no actions, no guard. It takes the event and does nothing, shadowing every ancestor."""
    return not t.targets and not t.actions and t.guard is None


def _forbids(st: Structure, path: str, name: str) -> bool:
    """Does the invoking state at `path` forbid `name` with `{}`, with no mode below it taking `name` for real?"""
    node = st.machine.by_path[path]
    own = node.on.get(name) or []
    if not own or not all(_forbidden(t) for t in own):
        return False
    below = [n for n, key in st.walk(path) if key == name and n is not node and n not in node.ancestors]
    return not any(not _forbidden(t) for n in below for t in n.on.get(name, []))


def menu_warnings(st: Structure) -> list[str]:
    """Unreachable Agent states, Menu entries never allowed (forbidden or unreachable), constant-false picks."""
    chart = st.machine
    reach = reachable_states(chart)
    out: list[str] = []
    for slot, paths in st.agent_states.items():
        dead = [p for p in paths if chart.by_path[p] not in reach]
        out += [f"{p}: invokes Agent {slot!r}, but no path from the initial state reaches it" for p in dead]
        for name in st.menu_names(slot):
            takers = [p for p in paths if name in st.derived[p]]
            if takers and all(_forbids(st, p, name) for p in takers):
                out.append(f"{', '.join(takers)}: every state invoking Agent {slot!r} forbids {name!r} with {{}}; "
                           f"it is on the Menu but never an Allowed pick")
            if len(dead) == len(paths):
                continue  # the unreachable Agent states were named above
            sources = {n.path: n for p in takers for n, key in st.walk(p)
                       if key == name and st.allows(n, name, st.parties[p])}
            if sources and all(n not in reach for n in sources.values()):
                out.append(f"{', '.join(sorted(sources))}: every state that takes {name!r} (on Agent {slot!r}'s "
                           f"Menu) is unreachable from the initial state; it is never an Allowed pick")
        out += _constant_false_picks(st, slot, paths)
    return out


def _constant_false_picks(st: Structure, slot: str, paths: list[str]) -> list[str]:
    out: list[str] = []
    seen: set[tuple[str, str, int]] = set()
    for p in paths:
        for node, key in st.walk(p):
            if not st.allows(node, key, st.parties[p]):
                continue
            for i, t in enumerate(node.on.get(key, [])):
                if (node.path, key, i) in seen or t.guard is None or guard_constant(t.guard) is not False:
                    continue
                seen.add((node.path, key, i))
                out.append(f"{node.path}: the guard {t.guard.label!r} on pick {key!r} (Agent {slot!r}) is the "
                           f"constant false, so that transition never runs")
    return out
