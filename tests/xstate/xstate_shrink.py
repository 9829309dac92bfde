"""Shrink a failing case to a small one that still fails the same way: drop steps, probes, states, transitions,
actions, guards and targets one at a time, repairing references, until no single edit keeps it failing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from xstate_spec import _guard_ok, _walk, index, normalize, resolve, valid

Case = dict[str, Any]


def _copy(x: Any) -> Any:
    return json.loads(json.dumps(x))


def _groups(node: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Every transition list of a node."""
    out = [ts for _d, ts in node.get("on") or []] + [ts for _d, ts in node.get("after") or []]
    for key in ("always", "onDone"):
        if node.get(key):
            out.append(node[key])
    inv = node.get("invoke")
    if inv:
        out += [inv[k] for k in ("onDone", "onError") if inv.get(k)]
    return out


def repair(spec: dict[str, Any]) -> dict[str, Any]:
    """Mend what a removal broke: empty compounds become atomic, lost initials and references are dropped."""
    for _ in range(4):
        infos = index(spec)
        for info in infos:
            n = info.node
            kids = info.regions()
            if n["type"] in ("compound", "parallel") and not kids:
                n["type"] = "atomic"
                n.pop("states", None)
                n.pop("initial", None)
                continue
            if n["type"] == "compound" and n.get("initial") not in [k.key for k in kids]:
                n["initial"] = kids[0].key
            if n["type"] == "history" and n.get("target"):
                assert info.parent is not None
                keep = []
                for t in n["target"]:
                    tgt = resolve(infos, info, t) if t.startswith("#") else _walk(info.parent, t)
                    if tgt is not None and tgt.is_desc(info.parent) and tgt.type != "history":
                        keep.append(t)
                if keep:
                    n["target"] = keep
                else:
                    n.pop("target")
            for ts in _groups(n):
                for t in ts:
                    if t.get("target") and any(resolve(infos, info, r) is None for r in t["target"]):
                        t["target"] = [r for r in t["target"] if resolve(infos, info, r) is not None] or None
                    if not _guard_ok(infos, t.get("guard")):
                        t["guard"] = None
    return spec


def _node_edits(spec: dict[str, Any]) -> Iterator[tuple[str, Callable[[dict[str, Any]], None]]]:
    infos = index(spec)
    for i in reversed(range(1, len(infos))):
        def drop(s: dict[str, Any], i: int = i) -> None:
            info = index(s)[i]
            assert info.parent is not None
            info.parent.node["states"].remove(info.node)
        yield f"drop state {infos[i].id}", drop
    for i in reversed(range(1, len(infos))):
        for j, child in enumerate(infos[i].children):
            if child.type == "history":
                continue

            def hoist(s: dict[str, Any], i: int = i, j: int = j) -> None:
                info = index(s)[i]
                assert info.parent is not None
                siblings = info.parent.node["states"]
                siblings[siblings.index(info.node)] = info.node["states"][j]
            yield f"replace {infos[i].id} by its child {child.key}", hoist
    for i, info in enumerate(infos):
        n = info.node
        for key in ("invoke", "always", "after", "onDone", "entry", "exit", "output", "target", "id"):
            if n.get(key) is not None:
                yield f"drop {key} of {info.id}", lambda s, i=i, key=key: index(s)[i].node.pop(key)
        for j in range(len(n.get("on") or [])):
            yield f"drop on[{j}] of {info.id}", lambda s, i=i, j=j: index(s)[i].node["on"].pop(j)


def _lists(spec: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """Lists whose single elements may go: transition lists, action lists, multiple targets, and/or guards."""
    out: list[tuple[str, list[Any]]] = []
    for info in index(spec):
        n = info.node
        for key in ("entry", "exit"):
            if n.get(key):
                out.append((f"{key} of {info.id}", n[key]))
        for ts in _groups(n):
            out.append((f"transitions of {info.id}", ts))
            for t in ts:
                if t.get("actions"):
                    out.append((f"actions of {info.id}", t["actions"]))
                if t.get("target") and len(t["target"]) > 1:
                    out.append((f"targets of {info.id}", t["target"]))
    return out


def _transition_edits(spec: dict[str, Any]) -> Iterator[tuple[str, Callable[[dict[str, Any]], None]]]:
    for li, (what, lst) in enumerate(_lists(spec)):
        for j in range(len(lst)):
            yield f"drop one of {what}", lambda s, li=li, j=j: _lists(s)[li][1].pop(j)
    for ii, info in enumerate(index(spec)):
        for gi, ts in enumerate(_groups(info.node)):
            for ti, t in enumerate(ts):
                def at(s: dict[str, Any], ii: int = ii, gi: int = gi, ti: int = ti) -> dict[str, Any]:
                    return _groups(index(s)[ii].node)[gi][ti]
                g = t.get("guard")
                if g is not None:
                    yield "drop a guard", lambda s, at=at: at(s).update(guard=None)
                    if g[0] == "not":
                        yield "unwrap not", lambda s, at=at: at(s).update(guard=at(s)["guard"][1])
                    if g[0] in ("and", "or"):
                        for k in range(len(g[1])):
                            yield "keep one of and/or", lambda s, at=at, k=k: at(s).update(guard=at(s)["guard"][1][k])
                if t.get("reenter"):
                    yield "no reenter", lambda s, at=at: at(s).update(reenter=False)
                if t.get("target") is not None:
                    yield "no target", lambda s, at=at: at(s).update(target=None)


def candidates(case: Case) -> Iterator[Case]:
    """Smaller cases, the largest cuts first."""
    for j in reversed(range(len(case["steps"]))):
        c = _copy(case)
        c["steps"].pop(j)
        yield c
    for j in range(len(case["probes"])):
        c = _copy(case)
        c["probes"].pop(j)
        yield c
    for gen in (_node_edits, _transition_edits):
        for _what, edit in gen(case["chart"]):
            c = _copy(case)
            try:
                edit(c["chart"])
            except (IndexError, KeyError, ValueError, AssertionError):
                continue
            chart = normalize(repair(c["chart"]))
            if chart == case["chart"] or not valid(chart):
                continue
            c["chart"] = chart
            yield c
    if case["chart"].get("output"):
        c = _copy(case)
        c["chart"]["output"] = False
        yield c


def shrink(case: Case, still_fails: Callable[[Case], bool], max_tries: int = 4000) -> tuple[Case, int]:
    """Greedy: take the first smaller case that still fails, start over; stop when none does."""
    tries = 0
    improved = True
    while improved and tries < max_tries:
        improved = False
        for cand in candidates(case):
            tries += 1
            if still_fails(cand):
                case, improved = cand, True
                break
            if tries >= max_tries:
                break
    return case, tries
