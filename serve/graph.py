"""The chart as data and as a server-rendered SVG, for `GET /workflows/{name}` and the Console.

Why server-side: the Console carries no layout library (no CDN, no bundler), and the chart's shape is fixed per
Workflow, so one deterministic drawing per digest is enough. Every state is a `<g class="state" data-path=...>` that
the Console lights by adding the class `lit` when the run's value holds it.

Layout: nested boxes. Inside each compound state the children sit in columns ranked by a breadth-first walk from the
initial child along sibling transitions; parallel regions sit side by side. Arrows are cubic curves between box edges.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from pydantic import BaseModel

from jr2ray.authoring import Jr2Machine
from jr2ray.authoring.actors import AgentSpec, EffectSpec, FailSpec, GateSpec
from jr2ray.chart import StateNode

CHAR_W = 7.0  # monospace 11.5px: width per character, so boxes fit their labels without a text-measuring engine
PAD = 12.0
GAP_X = 64.0
GAP_Y = 26.0
HEADER = 24.0
BADGE_H = 17.0
ATOMIC_H = 30.0


class GraphInvoke(BaseModel):
    id: str
    src: str
    kind: str  # agent | gate | effect | fail | machine


class GraphState(BaseModel):
    path: str
    key: str
    type: str
    parent: str | None
    initial: str | None
    invokes: list[GraphInvoke]


class GraphTransition(BaseModel):
    source: str
    event: str  # "" for `always`
    label: str
    targets: list[str]
    guarded: bool


class Graph(BaseModel):
    """The chart's states (document order), invokes and transitions, with targets resolved to state paths."""

    id: str
    states: list[GraphState]
    transitions: list[GraphTransition]


def invoke_kind(machine: Jr2Machine, src: str) -> str:
    spec = machine.actors.get(src)
    if isinstance(spec, AgentSpec):
        return "agent"
    if isinstance(spec, GateSpec) or src == "gate":
        return "gate"
    if isinstance(spec, EffectSpec):
        return "effect"
    if isinstance(spec, FailSpec):
        return "fail"
    return "machine"


def event_label(event: str) -> str:
    """Mechanism event names, shortened the way authors write them (onDone, onError, after, always)."""
    if event == "":
        return "always"
    for prefix, label in (("xstate.done.actor.", "onDone"), ("xstate.error.actor.", "onError"),
                          ("xstate.done.state.", "onDone")):
        if event.startswith(prefix):
            return label
    if event.startswith("xstate.after."):
        delay = event[len("xstate.after."):].split(".", 1)[0]
        return f"after {delay}ms" if delay.replace(".", "").isdigit() else f"after {delay}"
    return event


def _transitions(node: StateNode) -> Iterable[tuple[str, Any]]:
    for event, ts in node.on.items():
        for t in ts:
            yield event, t
    for t in node.always:
        yield "", t


def graph_of(machine: Jr2Machine) -> Graph:
    chart = machine.chart
    states = [GraphState(path=n.path, key=n.key, type=n.type, parent=n.parent.path if n.parent else None,
                         initial=n.initial.path if n.initial else None,
                         invokes=[GraphInvoke(id=i.id, src=i.src, kind=invoke_kind(machine, i.src))
                                  for i in n.invokes])
              for n in chart.nodes]
    trans = [GraphTransition(source=n.path, event=ev, label=event_label(ev), targets=list(t.target_paths() or ()),
                             guarded=t.guard is not None)
             for n in chart.nodes for ev, t in _transitions(n)]
    return Graph(id=machine.id, states=states, transitions=trans)


def active_paths(machine_id: str, value: Any) -> list[str]:
    """Every state path a snapshot value holds, compound ones included: `{"writing": "drafting"}` →
    [notes, notes.writing, notes.writing.drafting]."""
    out = [machine_id]

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, str):
            out.append(f"{prefix}.{v}")
        elif isinstance(v, dict):
            for k, sub in v.items():
                out.append(f"{prefix}.{k}")
                walk(f"{prefix}.{k}", sub)

    walk(machine_id, value)
    return out


# ---- layout ----------------------------------------------------------------------------------------------------
@dataclass
class _Box:
    node: StateNode
    badges: list[str]
    w: float = 0.0
    h: float = 0.0
    x: float = 0.0
    y: float = 0.0
    kids: list[_Box] = field(default_factory=list)
    columns: list[list[_Box]] = field(default_factory=list)

    @property
    def top(self) -> float:
        return HEADER + BADGE_H * len(self.badges) if self.kids else 0.0


def _sibling_of(node: StateNode, parent: StateNode) -> StateNode | None:
    """The child of `parent` that is `node` or holds it."""
    n: StateNode | None = node
    while n is not None and n.parent is not parent:
        n = n.parent
    return n


def _ranks(parent: StateNode) -> dict[str, int]:
    kids = list(parent.children.values())
    if parent.type == "parallel":
        return {k.key: i for i, k in enumerate(kids)}
    edges: dict[str, set[str]] = {k.key: set() for k in kids}
    for k in kids:
        stack = [k]
        while stack:  # transitions of the child and everything below it
            n = stack.pop()
            stack.extend(n.children.values())
            for _, t in _transitions(n):
                for tgt in t.targets or ():
                    sib = _sibling_of(tgt, parent)
                    if sib is not None and sib is not k:
                        edges[k.key].add(sib.key)
    start = parent.initial.key if parent.initial else (kids[0].key if kids else None)
    rank: dict[str, int] = {}
    if start is not None:
        rank[start] = 0
        queue = [start]
        while queue:
            cur = queue.pop(0)
            for nxt in sorted(edges[cur], key=lambda s: parent.children[s].order):
                if nxt not in rank:
                    rank[nxt] = rank[cur] + 1
                    queue.append(nxt)
    last = max(rank.values(), default=0)
    for k in kids:  # entered only from outside (e.g. a root-level `on`): the last column
        rank.setdefault(k.key, max(1, last) if len(kids) > 1 else 0)
    return rank


def _badges(machine: Jr2Machine, node: StateNode) -> list[str]:
    out = []
    for i in node.invokes:
        kind = invoke_kind(machine, i.src)
        out.append(kind if kind in ("gate", "fail") or i.src == kind else f"{kind} {i.src}")
    return out


def _measure(machine: Jr2Machine, node: StateNode) -> _Box:
    box = _Box(node=node, badges=_badges(machine, node))
    label_w = CHAR_W * (len(node.key) + (2 if node.type == "final" else 0)) + 2 * PAD
    badge_w = max((CHAR_W * len(b) + 16 for b in box.badges), default=0.0) + 2 * PAD
    if not node.children:
        box.w = max(96.0, label_w, badge_w)
        box.h = ATOMIC_H + BADGE_H * len(box.badges)
        return box
    box.kids = [_measure(machine, c) for c in node.children.values()]
    ranks = _ranks(node)
    ncols = max(ranks.values()) + 1
    box.columns = [[b for b in box.kids if ranks[b.node.key] == c] for c in range(ncols)]
    box.columns = [col for col in box.columns if col]
    col_w = [max(b.w for b in col) for col in box.columns]
    col_h = [sum(b.h for b in col) + GAP_Y * (len(col) - 1) for col in box.columns]
    box.w = max(label_w, badge_w, sum(col_w) + GAP_X * (len(col_w) - 1) + 2 * PAD + 16)
    # room under the children for back edges, which curve below both boxes
    box.h = box.top + max(col_h) + 2 * PAD + (30.0 if len(box.columns) > 1 else 0.0)
    return box


def _place(box: _Box, x: float, y: float) -> None:
    box.x, box.y = x, y
    if not box.kids:
        return
    cx = x + PAD + 16  # room for the initial marker
    for col in box.columns:
        cy = y + box.top + PAD
        width = max(b.w for b in col)
        for b in col:
            _place(b, cx + (width - b.w) / 2, cy)
            cy += b.h + GAP_Y
        cx += width + GAP_X


def _all(box: _Box) -> Iterable[_Box]:
    yield box
    for k in box.kids:
        yield from _all(k)


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _edge(a: _Box, b: _Box, nth: int = 0) -> tuple[str, float, float]:
    """A path from box a to box b and the point where its label goes; `nth` spreads parallel edges apart."""
    spread = 15.0 * nth
    if a is b:  # self-transition: a loop over the top right corner
        x0, y0 = a.x + a.w - 18, a.y
        d = f"M{_f(x0)},{_f(y0)} C{_f(x0)},{_f(y0 - 26)} {_f(x0 + 34)},{_f(y0 - 26)} {_f(a.x + a.w)},{_f(y0 + 8)}"
        return d, x0 + 14, y0 - 22
    if b.node.is_descendant_of(a.node) or a.node.is_descendant_of(b.node):
        # from an ancestor's `on` (or to an ancestor): a short arrow into the left side of the inner box
        inner = b if b.node.is_descendant_of(a.node) else a
        y = inner.y + min(inner.h / 2, 15)
        if inner is b:
            d = f"M{_f(b.x - 30)},{_f(y - 12)} C{_f(b.x - 20)},{_f(y - 12)} {_f(b.x - 12)},{_f(y)} {_f(b.x)},{_f(y)}"
            return d, b.x - 34, y - 16 - spread
        d = f"M{_f(a.x)},{_f(y)} C{_f(a.x - 12)},{_f(y)} {_f(a.x - 20)},{_f(y + 12)} {_f(a.x - 30)},{_f(y + 12)}"
        return d, a.x - 34, y + 24
    ay, by = a.y + min(a.h / 2, 15), b.y + min(b.h / 2, 15)
    if b.x >= a.x + a.w - 1:  # forward, left to right
        x0, x1 = a.x + a.w, b.x
        k = max(24.0, (x1 - x0) / 2)
        d = f"M{_f(x0)},{_f(ay)} C{_f(x0 + k)},{_f(ay)} {_f(x1 - k)},{_f(by)} {_f(x1)},{_f(by)}"
        return d, (x0 + x1) / 2, (ay + by) / 2 - 5 - spread
    if b.x + b.w <= a.x + 1:  # backward: under both boxes
        x0, x1 = a.x + a.w / 2, b.x + b.w / 2
        y0, y1 = a.y + a.h, b.y + b.h
        low = max(y0, y1) + 30 + spread * 1.4
        d = f"M{_f(x0)},{_f(y0)} C{_f(x0)},{_f(low)} {_f(x1)},{_f(low)} {_f(x1)},{_f(y1)}"
        return d, (x0 + x1) / 2, low - 4
    # same column: straight down (or up) along the right side
    if b.y > a.y:
        x0, y0, y1 = a.x + a.w * 0.7, a.y + a.h, b.y
    else:
        x0, y0, y1 = a.x + a.w * 0.3, a.y, b.y + b.h
    x1 = b.x + b.w * (0.7 if b.y > a.y else 0.3)
    d = f"M{_f(x0)},{_f(y0)} C{_f(x0)},{_f((y0 + y1) / 2)} {_f(x1)},{_f((y0 + y1) / 2)} {_f(x1)},{_f(y1)}"
    return d, (x0 + x1) / 2 + 6, (y0 + y1) / 2 + spread


GRAPH_STYLE = """
.jr2-graph { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 11.5px; }
.jr2-graph .state > rect.box { fill: #fbfcfe; stroke: #8a94a6; stroke-width: 1.2; }
.jr2-graph .state.compound > rect.box, .jr2-graph .state.parallel > rect.box { fill: #f1f4f9; }
.jr2-graph .state.parallel > rect.box { stroke-dasharray: 5 3; }
.jr2-graph .state.final > rect.inner { fill: none; stroke: #8a94a6; }
.jr2-graph .state.lit > rect.box { fill: #fff3c4; stroke: #c98a00; stroke-width: 2.4; }
.jr2-graph .state.compound.lit > rect.box { fill: #fffaf0; }
.jr2-graph .badge rect { fill: #e3e9f5; stroke: none; }
.jr2-graph .badge.agent rect { fill: #dff1e4; }
.jr2-graph .badge.gate rect { fill: #fde5d8; }
.jr2-graph .badge.effect rect { fill: #e6e1f6; }
.jr2-graph .badge.fail rect { fill: #f6d9d9; }
.jr2-graph .edge { fill: none; stroke: #5a6478; stroke-width: 1.2; }
.jr2-graph .edge-label { fill: #26324a; stroke: #ffffff; stroke-width: 3px; paint-order: stroke; }
.jr2-graph .initial { fill: #26324a; }
.jr2-graph .name { fill: #1b2436; font-weight: 600; }
"""


def render_svg(machine: Jr2Machine, name: str | None = None) -> str:
    """The chart as a standalone SVG document (also inlined by the Console).

    It is one function (about 65 lines) because it writes the document top to bottom: defs, boxes, edges, labels."""
    tag = "".join(c if c.isalnum() else "-" for c in (name or machine.id))
    root = _measure(machine, machine.chart.root)
    _place(root, 40.0, 34.0)
    boxes = {b.node.path: b for b in _all(root)}
    width, height = root.x + root.w + 60, root.y + root.h + 60
    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="jr2-graph" data-workflow="{escape(name or machine.id)}" '
        f'width="{_f(width)}" height="{_f(height)}" viewBox="0 0 {_f(width)} {_f(height)}">',
        f"<style>{GRAPH_STYLE}</style>",
        f'<defs><marker id="arrow-{tag}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#5a6478"/></marker></defs>',
    ]

    def draw(box: _Box) -> None:
        n = box.node
        kind = "compound" if n.type == "compound" else n.type
        cls = f"state {kind}" + (" invokes" if n.invokes else "")
        parts.append(f'<g class="{cls}" data-path="{escape(n.path)}">')
        parts.append(f"<title>{escape(n.path)}</title>")
        parts.append(f'<rect class="box" x="{_f(box.x)}" y="{_f(box.y)}" width="{_f(box.w)}" height="{_f(box.h)}" '
                     f'rx="{8 if box.kids else 6}"/>')
        if n.type == "final":
            parts.append(f'<rect class="inner" x="{_f(box.x + 3)}" y="{_f(box.y + 3)}" width="{_f(box.w - 6)}" '
                         f'height="{_f(box.h - 6)}" rx="4"/>')
        ty = box.y + 19 if box.kids or box.badges else box.y + box.h / 2 + 4
        tx = box.x + PAD if box.kids else box.x + box.w / 2
        anchor = "start" if box.kids else "middle"
        parts.append(f'<text class="name" x="{_f(tx)}" y="{_f(ty)}" text-anchor="{anchor}">{escape(n.key)}</text>')
        by = box.y + (HEADER if box.kids else 24)
        for inv, label in zip(n.invokes, box.badges, strict=True):
            bw = CHAR_W * len(label) + 12
            bx = box.x + PAD if box.kids else box.x + (box.w - bw) / 2
            parts.append(f'<g class="badge {invoke_kind(machine, inv.src)}"><rect x="{_f(bx)}" y="{_f(by)}" '
                         f'width="{_f(bw)}" height="{_f(BADGE_H - 3)}" rx="7"/><text x="{_f(bx + 6)}" '
                         f'y="{_f(by + 10.5)}">{escape(label)}</text></g>')
            by += BADGE_H
        parts.append("</g>")
        if box.kids and n.type != "parallel" and n.initial is not None:
            ib = boxes[n.initial.path]
            y = ib.y + min(ib.h / 2, 15)
            parts.append(f'<circle class="initial" cx="{_f(ib.x - 14)}" cy="{_f(y)}" r="3.5"/>')
            parts.append(f'<path class="edge" d="M{_f(ib.x - 10)},{_f(y)} L{_f(ib.x)},{_f(y)}" '
                         f'marker-end="url(#arrow-{tag})"/>')
        for k in box.kids:
            draw(k)

    draw(root)
    seen: dict[tuple[str, str], int] = {}
    for n in machine.chart.nodes:
        for ev, t in _transitions(n):
            for tgt in t.targets or ():
                pair = (n.path, tgt.path)
                seen[pair] = seen.get(pair, -1) + 1
                d, lx, ly = _edge(boxes[n.path], boxes[tgt.path], seen[pair])
                label = event_label(ev) + (" [guard]" if t.guard is not None else "")
                parts.append(f'<g class="transition" data-source="{escape(n.path)}" data-event="{escape(ev)}" '
                             f'data-target="{escape(tgt.path)}"><path class="edge" d="{d}" '
                             f'marker-end="url(#arrow-{tag})"/><text class="edge-label" x="{_f(lx)}" y="{_f(ly)}" '
                             f'text-anchor="middle">{escape(label)}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)
