"""The chart description shared by both sides of the differential tier, and the rules every chart obeys.

A *spec* is plain JSON: `{"id", "context", "output", "root"}` where `root` is a state node
`{"key", "type", "id"?, "initial"?, "history"?, "target"?, "states"?, "on"?, "always"?, "after"?, "entry"?,
"exit"?, "invoke"?, "onDone"?, "output"?}`. Transitions are `{"target": [ref] | None, "guard", "actions",
"reenter"}`; targets are written as the text both libraries resolve (`"#id"`, `"x.y"`, `".x"`).

Guards (named primitives): `["ge", key, k]` ctx[key] >= k, `["lt", key, k]`, `["ev", v]` event.k == v,
`["in", ref]` stateIn, `["not", g]`, `["and", [g...]]`, `["or", [g...]]`.
Actions: `["trace", tag]` (a custom action recording `tag|n|m|v|event.type|value`), `["asg", "obj"|"fn",
[[key, expr]...]]` with expr `["add", key, c]` / `["ev"]` (event.k, or 0) / `["const", c]`,
`["raise", type, k]`, `["draise", type, k, delay_ms, id]`, `["cancel", id]`.

`normalize` applies the rules that keep generated charts away from the three places where jr2ray differs from
xstate on purpose (docs/chart-api.md); both translators only ever see normalized specs.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

BUMP: list[Any] = ["asg", "obj", [["v", ["add", "v", 1]]]]


@dataclass(eq=False)
class Info:
    """One state node of a spec with what the generator and the checks need to know about it."""

    node: dict[str, Any]
    parent: Info | None
    path: tuple[str, ...]
    children: list[Info] = field(default_factory=list)

    @property
    def type(self) -> str:
        return str(self.node["type"])

    @property
    def key(self) -> str:
        return str(self.node["key"])

    @property
    def id(self) -> str:
        return str(self.node.get("id") or ".".join(self.path))

    def ancestors(self) -> list[Info]:
        out, p = [], self.parent
        while p is not None:
            out.append(p)
            p = p.parent
        return out

    def is_desc(self, other: Info) -> bool:
        """Proper descendant of `other`."""
        return other in self.ancestors()

    def regions(self) -> list[Info]:
        return [c for c in self.children if c.type != "history"]

    def subtree(self) -> list[Info]:
        out = [self]
        for c in self.children:
            out.extend(c.subtree())
        return out


def index(spec: dict[str, Any]) -> list[Info]:
    """All nodes in document order (the order both libraries number them in)."""
    out: list[Info] = []

    def walk(node: dict[str, Any], parent: Info | None) -> Info:
        path = (node["key"],) if parent is None else (*parent.path, node["key"])
        info = Info(node, parent, path)
        out.append(info)
        for c in node.get("states") or []:
            info.children.append(walk(c, info))
        return info

    walk(spec["root"], None)
    return out


def relpath(base: Info, target: Info) -> str:
    return ".".join(target.path[len(base.path):])


def resolve(infos: list[Info], source: Info, ref: str) -> Info | None:
    """Resolve a target the way xstate does (and jr2ray should): `#id[.path]`, `.child.path`, `sibling.path`."""
    if ref.startswith("#"):
        head, _, rest = ref[1:].partition(".")
        by_id = {i.id: i for i in infos}
        base = by_id.get(ref[1:]) or by_id.get(head)
        if base is None:
            return None
        if ref[1:] in by_id:
            return base
        return _walk(base, rest)
    if ref.startswith("."):
        return _walk(source, ref[1:])
    if source.parent is None:
        return None
    return _walk(source.parent, ref)


def _walk(base: Info, rel: str) -> Info | None:
    cur: Info | None = base
    for part in rel.split(".") if rel else []:
        if cur is None:
            return None
        cur = next((c for c in cur.children if c.key == part), None)
    return cur


def state_in_node(infos: list[Info], ref: str) -> Info | None:
    if ref.startswith("#"):
        return resolve(infos, infos[0], ref)
    return _walk(infos[0], ref)


def _assign_with_bump(a: list[Any]) -> list[Any]:
    pairs = [p for p in a[2] if p[0] != "v"]
    return ["asg", a[1], [*pairs, ["v", ["add", "v", 1]]]]


def _norm_actions(actions: list[Any], keep_timer_ids: bool) -> list[Any]:
    out = []
    for a in actions:
        if a[0] == "asg":
            a = _assign_with_bump(a)
        elif a[0] == "draise" and not keep_timer_ids and a[4] is not None:
            a = [*a[:4], None]
        out.append(a)
    return out


def _norm_transitions(ts: list[dict[str, Any]] | None) -> None:
    for t in ts or []:
        t["actions"] = _norm_actions(t.get("actions") or [], keep_timer_ids=False)


def _target_rules(infos: list[Info]) -> None:
    """Rules 4 and 5 of `normalize`: histories of parallel states, and targets that would enter a state again
    without exiting it."""
    for info in infos:
        for src, ts in _all_transitions(info):
            for t in ts:
                for ref in t.get("target") or []:
                    h = resolve(infos, src, ref)
                    if h is not None and h.type == "history" and h.parent is not None \
                            and h.parent.type == "parallel" and not h.node.get("target") and src.is_desc(h.parent):
                        h.node["target"] = [h.parent.regions()[0].key]
                    if h is not None and h.type == "history" and h.parent is not None and src.is_desc(h.parent):
                        t["reenter"] = True
                        if any(_has_timer(x) for x in h.parent.subtree()[1:]):
                            t["target"] = [r for r in (t["target"] or []) if r != ref] or None
                    if h is infos[0] and _has_timer(h):
                        t["reenter"] = True


def normalize(spec: dict[str, Any]) -> dict[str, Any]:
    """Return a copy obeying the rules that avoid the three documented differences.

    1. An `always` transition whose assign leaves the context equal loops forever in xstate and jr2ray stops it.
       So every assign also bumps `ctx.v`, and every state with a history child or an invoke bumps `v` on entry
       (exiting such a state gives xstate a new snapshot even when nothing else changed). An eventless microstep
       then changes the snapshot in xstate exactly when it changes the configuration/context/history in jr2ray.
    2. xstate keeps an older timer scheduled again under a pending id; jr2ray keeps one. So a delayed raise keeps
       an explicit id only in an entry list, and its state cancels that id on exit: one pending timer per id.
       Delayed raises elsewhere get no id (each gets its own unique one on both sides).
    3. `can()` on a snapshot that is not active: the tier never probes such a snapshot (see the runners).
    4. A transition from inside a parallel state to that state's own history with nothing recorded: xstate enters
       the regions but not the parallel state; jr2ray keeps one domain for exit and entry. So such a history
       (in a parallel parent, without a default) gets its parent's first region as default target.
    5. A transition from inside a history's parent to that history, when the history resolves to the source
       itself, enters the source again without exiting it (xstate's domain is then the source). jr2ray does the
       same, but what follows is outside both designs: a timer the entry schedules is scheduled twice under one
       id (difference 2), and beside a transition that exits the region the node set loses the region while
       keeping its child, which xstate's state value papers over and jr2ray's does not (reported, not fixed).
       So such transitions are made `reenter`. Even then the states between the transition's domain and the
       history's parent are entered again without an exit, so where any state inside the history's parent keeps
       a timer the transition loses that target instead. A transition to the root is made `reenter` when the root
       schedules a timer on entry: without `reenter` the root is entered again without being exited.
    """
    spec = json.loads(json.dumps(spec))
    infos = index(spec)
    _target_rules(infos)
    for info in infos:
        node = info.node
        entry = _norm_actions(node.get("entry") or [], keep_timer_ids=True)
        exit_ = _norm_actions(node.get("exit") or [], keep_timer_ids=False)
        if any(c.type == "history" for c in info.children) or node.get("invoke"):
            if not entry or entry[0] != BUMP:
                entry.insert(0, copy.deepcopy(BUMP))
        for a in entry:
            if a[0] == "draise" and a[4] is not None and ["cancel", a[4]] not in exit_:
                exit_.append(["cancel", a[4]])
        if entry:
            node["entry"] = entry
        if exit_:
            node["exit"] = exit_
        for _desc, ts in node.get("on") or []:
            _norm_transitions(ts)
        _norm_transitions(node.get("always"))
        for _delay, ts in node.get("after") or []:
            _norm_transitions(ts)
        _norm_transitions(node.get("onDone"))
        inv = node.get("invoke")
        if inv:
            _norm_transitions(inv.get("onDone"))
            _norm_transitions(inv.get("onError"))
    return spec


def _has_timer(info: Info) -> bool:
    n = info.node
    return bool(n.get("after")) or any(a[0] == "draise" and a[4] is not None for a in n.get("entry") or [])


def _all_transitions(info: Info) -> list[tuple[Info, list[dict[str, Any]]]]:
    n = info.node
    groups = [ts for _d, ts in n.get("on") or []] + [ts for _d, ts in n.get("after") or []]
    groups += [n.get("always") or [], n.get("onDone") or []]
    if n.get("invoke"):
        groups += [n["invoke"].get("onDone") or [], n["invoke"].get("onError") or []]
    return [(info, ts) for ts in groups]


def invoke_id(info: Info) -> str:
    """The id xstate gives an invoke: the explicit one, else `<index>.<state id>`."""
    inv = info.node["invoke"]
    return str(inv.get("id") or f"0.{info.id}")


def _targets_ok(infos: list[Info], source: Info, refs: list[str]) -> bool:
    nodes = []
    for ref in refs:
        n = resolve(infos, source, ref)
        if n is None:
            return False
        nodes.append(n.parent if n.type == "history" and len(refs) > 1 else n)
    if len(nodes) < 2:
        return True
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            if a is b or a.is_desc(b) or b.is_desc(a) or a.parent is None or b.parent is None:
                return False
            lca = next(x for x in a.ancestors() if x is b.parent or b.is_desc(x))
            if lca.type != "parallel":
                return False
    return True


def _guard_ok(infos: list[Info], g: Any) -> bool:
    if g is None:
        return True
    if g[0] == "in":
        n = state_in_node(infos, g[1])
        return n is not None and n.type != "history"
    if g[0] == "not":
        return _guard_ok(infos, g[1])
    if g[0] in ("and", "or"):
        return bool(g[1]) and all(_guard_ok(infos, x) for x in g[1])
    return True


def _ts_ok(infos: list[Info], source: Info, ts: list[dict[str, Any]] | None) -> bool:
    for t in ts or []:
        if t.get("target") is not None and (not t["target"] or not _targets_ok(infos, source, t["target"])):
            return False
        if not _guard_ok(infos, t.get("guard")):
            return False
    return True


def valid(spec: dict[str, Any]) -> bool:
    """True when every reference resolves and the structure is one both libraries accept as the same chart."""
    infos = index(spec)
    ids = [i.id for i in infos]
    if len(set(ids)) != len(ids):
        return False
    for info in infos:
        n, t = info.node, info.type
        kids = info.regions()
        if t == "compound":
            init = next((c for c in kids if c.key == n.get("initial")), None)
            if init is None:
                return False
        if t in ("compound", "parallel") and not kids:
            return False
        if t in ("atomic", "final", "history") and info.children:
            return False
        if t == "history":
            if info.parent is None or info.parent.type not in ("compound", "parallel"):
                return False
            for ref in n.get("target") or []:
                tgt = resolve(infos, info, ref) if ref.startswith("#") else _walk(info.parent, ref)
                if tgt is None or not tgt.is_desc(info.parent) or tgt.type == "history":
                    return False
        for _d, ts in n.get("on") or []:
            if not _ts_ok(infos, info, ts):
                return False
        for group in (n.get("always"), n.get("onDone"), *(ts for _d, ts in n.get("after") or [])):
            if not _ts_ok(infos, info, group):
                return False
        inv = n.get("invoke")
        if inv and not (_ts_ok(infos, info, inv.get("onDone")) and _ts_ok(infos, info, inv.get("onError"))):
            return False
    iids = [invoke_id(i) for i in infos if i.node.get("invoke")]
    return len(set(iids)) == len(iids)
