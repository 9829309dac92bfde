"""A seeded random generator of statecharts, event sequences and probe events, as plain data (xstate_spec).

It aims at the corners where two statechart interpreters can disagree: regions where only some handle an event,
`{}` in regions, self and ancestor targets below parallel states, targetless transitions with actions, `reenter`,
`always` in several regions, shallow/deep history with and without defaults (inside parallel states too), multiple
and relative targets, raise / delayed raise / cancel / `after`, promise invokes with onDone/onError, final states
with output, `*` and `foo.*`, not/and/or/stateIn guards and assign order.

The three places where jr2ray differs from xstate on purpose are kept out by `xstate_spec.normalize` (always-loop
stop, one timer per id) and by the runners (no `can()` on a snapshot that is not active).
"""

from __future__ import annotations

import json
import random
from typing import Any

from xstate_spec import Info, index, invoke_id, normalize, relpath, valid

TYPES = ["A", "B", "C", "foo", "foo.x", "foo.y"]
DESCRIPTORS = TYPES + ["foo.*", "foo.*", "*"]
CTX_KEYS = ["n", "m"]
DELAYS = [10, 20, 30]
MAX_STATES = 14


class _Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.n_states = 0
        self.n_keys = 0
        self.n_tags = 0
        self.timer_ids: list[str] = []
        self.infos: list[Info] = []

    # ---- structure -------------------------------------------------------------------------------------------
    def _key(self) -> str:
        self.n_keys += 1
        if self.n_keys == 13:  # "m" is the machine's own key
            self.n_keys += 1
        k, out = self.n_keys, ""
        while k:
            k, rem = divmod(k - 1, 26)
            out = chr(97 + rem) + out
        return out

    def _state(self, depth: int) -> dict[str, Any]:
        r = self.r
        self.n_states += 1
        node: dict[str, Any] = {"key": self._key()}
        if r.random() < 0.2:
            node["id"] = "I" + node["key"]
        room = self.n_states < MAX_STATES - 2 and depth < 3
        x = r.random()
        if room and x < 0.3:
            self._compound(node, depth)
        elif room and x < 0.45:
            self._parallel(node, depth)
        elif x < 0.9 or depth == 0:
            node["type"] = "atomic"
        else:
            node["type"] = "final"
        return node

    def _compound(self, node: dict[str, Any], depth: int) -> None:
        node["type"] = "compound"
        kids = [self._state(depth + 1) for _ in range(self.r.randint(2, 3))]
        live = [k for k in kids if k["type"] != "final"] or kids
        node["initial"] = self.r.choice(live if self.r.random() < 0.9 else kids)["key"]
        node["states"] = kids
        self._maybe_history(node, depth)

    def _parallel(self, node: dict[str, Any], depth: int) -> None:
        node["type"] = "parallel"
        kids = []
        for _ in range(self.r.randint(2, 3)):
            if self.n_states < MAX_STATES - 2 and self.r.random() < 0.65:
                self.n_states += 1
                region: dict[str, Any] = {"key": self._key()}
                self._compound(region, depth + 1)
                kids.append(region)
            else:
                kids.append(self._state(depth + 1))
        node["states"] = kids
        self._maybe_history(node, depth)

    def _maybe_history(self, node: dict[str, Any], depth: int) -> None:
        if depth > 0 and self.r.random() < 0.4:
            node["states"].append({"key": self._key(), "type": "history",
                                   "history": self.r.choice(["shallow", "deep"])})

    def _history_defaults(self) -> None:
        r = self.r
        for h in self.infos:
            if h.type != "history" or r.random() < 0.5:
                continue
            parent = h.parent
            assert parent is not None
            if parent.type == "parallel" and r.random() < 0.4 and len(parent.regions()) >= 2:
                picks = [r.choice(_no_history(reg.subtree())) for reg in r.sample(parent.regions(), 2)]
            else:
                picks = [r.choice([n for n in _no_history(parent.subtree()) if n is not parent])]
            h.node["target"] = [("#" + t.id) if r.random() < 0.25 else relpath(parent, t) for t in picks]

    # ---- references ------------------------------------------------------------------------------------------
    def _ref(self, src: Info, t: Info) -> str:
        r = self.r
        opts = ["#" + t.id]
        named = [a for a in t.ancestors() if a.node.get("id") and a.parent is not None]
        if named:
            a = r.choice(named)
            opts.append(f"#{a.id}.{relpath(a, t)}")
        if src.parent is not None and t.is_desc(src.parent):
            opts += [relpath(src.parent, t)] * 2
        if t.is_desc(src):
            opts += ["." + relpath(src, t)] * 2
        return r.choice(opts)

    def _pick_target(self, src: Info) -> Info:
        r = self.r
        infos = self.infos
        x = r.random()
        hist = [i for i in infos if i.type == "history"]
        sibs = [i for i in infos if src.parent is not None and i.is_desc(src.parent) and i.type != "history"]
        desc = [i for i in src.subtree()[1:] if i.type != "history"]
        if x < 0.12:
            return src
        if x < 0.24:
            return r.choice(src.ancestors() or [src]) if r.random() < 0.9 else infos[0]
        if x < 0.5 and sibs:
            return r.choice(sibs)
        if x < 0.62 and desc:
            return r.choice(desc)
        if x < 0.78 and hist:
            return r.choice(hist)
        return r.choice(infos[1:] or infos)

    def _multi_target(self, src: Info) -> list[str] | None:
        pars = [i for i in self.infos if i.type == "parallel" and len(i.regions()) >= 2]
        if not pars:
            return None
        p = self.r.choice(pars)
        regs = self.r.sample(p.regions(), self.r.choice([2, 2, len(p.regions())]))
        return [self._ref(src, self.r.choice(reg.subtree())) for reg in regs]

    # ---- guards and actions ----------------------------------------------------------------------------------
    def _guard(self, depth: int = 0) -> list[Any]:
        r = self.r
        x = r.random()
        if depth < 2 and x < 0.25:
            kind = r.choice(["not", "and", "or"])
            if kind == "not":
                return ["not", self._guard(depth + 1)]
            return [kind, [self._guard(depth + 1), self._guard(depth + 1)]]
        y = r.random()
        if y < 0.3:
            key = r.choice(CTX_KEYS + ["v"])
            return ["ge", key, r.randint(0, 6 if key == "v" else 3)]
        if y < 0.45:
            key = r.choice(CTX_KEYS + ["v"])
            return ["lt", key, r.randint(1, 6 if key == "v" else 3)]
        if y < 0.7:
            return ["ev", r.randint(0, 1)]
        t = r.choice([i for i in self.infos[1:] if i.type != "history"] or self.infos)
        ref = "#" + t.id if r.random() < 0.7 or t.parent is None else relpath(self.infos[0], t)
        return ["in", ref]

    def _expr(self) -> list[Any]:
        x = self.r.random()
        if x < 0.6:
            return ["add", self.r.choice(CTX_KEYS + ["v"]), self.r.choice([1, 1, 2, -1])]
        if x < 0.8:
            return ["ev"]
        return ["const", self.r.randint(0, 3)]

    def _action(self, where: str, src: Info, desc: str | None = None) -> list[Any]:
        r = self.r
        x = r.random()
        raisable = _raisable(desc)
        if 0.66 <= x < 0.92 and (not raisable or (where in ("entry", "exit") and r.random() < 0.5)):
            x = 0.0
        if x < 0.36:
            self.n_tags += 1
            return ["trace", f"t{self.n_tags}"]
        if x < 0.66:
            keys = r.sample(CTX_KEYS, r.randint(1, 2))
            return ["asg", r.choice(["obj", "fn"]), [[k, self._expr()] for k in keys]]
        if x < 0.8:
            return ["raise", r.choice(raisable), r.choice([None, 0, 1])]
        if x < 0.92:
            tid = None
            if where == "entry":
                tid = f"d{src.key}{len(self.timer_ids)}"
                self.timer_ids.append(tid)
            return ["draise", r.choice(raisable), r.choice([None, 0, 1]), r.choice(DELAYS), tid]
        return ["cancel", None]  # the id is picked once every entry timer id is known

    def _actions(self, where: str, src: Info, lo: int, hi: int, desc: str | None = None) -> list[Any]:
        return [self._action(where, src, desc) for _ in range(self.r.randint(lo, hi))]

    # ---- transitions -----------------------------------------------------------------------------------------
    def _transition(self, src: Info, always: bool = False, desc: str | None = None,
                    done: bool = False) -> dict[str, Any]:
        """One transition. `always` and `onDone` ones are mostly self-limiting (guard `v < k` and an assign, which
        bumps v); an unlimited `always` is targetless with trace actions only, so it fires once per round."""
        r = self.r
        if not always and r.random() < 0.08:
            return {"target": None, "guard": None, "actions": [], "reenter": False}
        guard = self._guard() if r.random() < (0.85 if always else 0.35) else None
        limited = (always or done) and r.random() < 0.75
        if limited:
            guard = ["lt", "v", r.randint(2, 8)] if guard is None else ["and", [["lt", "v", r.randint(2, 8)], guard]]
        x = r.random()
        target: list[str] | None
        if x < (0.4 if always else 0.3) or desc == "*" or (always and not limited):
            target = None
        elif x < 0.88:
            target = [self._ref(src, self._pick_target(src))]
        else:
            target = self._multi_target(src) or [self._ref(src, self._pick_target(src))]
        lo = 1 if target is None and r.random() < 0.85 else 0
        actions = self._actions("t", src, lo, 3, "*" if always and not limited else desc)
        if always and not limited:
            actions = [a for a in actions if a[0] == "trace"]
        if limited and not any(a[0] == "asg" for a in actions):
            actions.append(["asg", "obj", []])
        return {"target": target, "guard": guard, "actions": actions, "reenter": bool(target) and r.random() < 0.2}

    def _transitions(self, src: Info, always: bool = False, desc: str | None = None,
                     done: bool = False) -> list[dict[str, Any]]:
        return [self._transition(src, always, desc, done) for _ in range(self.r.choice([1, 1, 2]))]

    def _decorate(self, info: Info) -> None:
        r = self.r
        node = info.node
        if info.type == "history":
            return
        if r.random() < 0.5:
            node["entry"] = self._actions("entry", info, 1, 2)
        if r.random() < 0.4:
            node["exit"] = self._actions("exit", info, 1, 2)
        if info.type == "final":
            if r.random() < 0.5:
                node["output"] = ["ctx", r.choice(CTX_KEYS)] if r.random() < 0.6 else ["const", r.randint(0, 9)]
            return
        n_on = r.choice([0, 1, 1, 2, 2, 3] if info.type == "atomic" else [0, 0, 1, 1, 2])
        descs = r.sample(DESCRIPTORS, n_on)
        node["on"] = [[d, self._transitions(info, desc=d)] for d in dict.fromkeys(descs)]
        if r.random() < 0.15:
            node["always"] = self._transitions(info, always=True)
        if info.parent is not None and r.random() < 0.12:
            node["after"] = [[d, self._transitions(info)] for d in sorted(r.sample(DELAYS, r.choice([1, 1, 2])))]
        if info.parent is not None and r.random() < 0.1:
            # Always an explicit id: without one jr2ray names the child after its state, xstate `0.<state id>`
            # (jr2ray's Agent and Gate party ids are built on that name; see docs/chart-api.md).
            node["invoke"] = {"id": f"p{info.key}",
                              "input": ["ctx", r.choice(CTX_KEYS)] if r.random() < 0.7 else ["const", 5],
                              "onDone": self._transitions(info) if r.random() < 0.8 else None,
                              "onError": self._transitions(info) if r.random() < 0.5 else None}
        if info.type in ("compound", "parallel") and info.parent is not None and r.random() < 0.45 \
                and any(d.type == "final" for d in info.subtree()):
            node["onDone"] = self._transitions(info, done=True)

    def _fill_cancels(self) -> None:
        def fix(actions: list[Any]) -> list[Any]:
            out = []
            for a in actions:
                if a[0] == "cancel" and a[1] is None:
                    if not self.timer_ids:
                        continue
                    a = ["cancel", self.r.choice(self.timer_ids)]
                out.append(a)
            return out

        for info in self.infos:
            n = info.node
            for k in ("entry", "exit"):
                if k in n:
                    n[k] = fix(n[k])
            groups = [ts for _d, ts in n.get("on") or []] + [n.get("always") or [], n.get("onDone") or []]
            groups += [ts for _d, ts in n.get("after") or []]
            if n.get("invoke"):
                groups += [n["invoke"].get("onDone") or [], n["invoke"].get("onError") or []]
            for ts in groups:
                for t in ts:
                    t["actions"] = fix(t["actions"])

    # ---- the whole case --------------------------------------------------------------------------------------
    def _event(self, pool: list[str]) -> dict[str, Any]:
        ev: dict[str, Any] = {"type": self.r.choice(pool)}
        if self.r.random() < 0.5:
            ev["k"] = self.r.randint(0, 1)
        return ev

    def case(self) -> dict[str, Any]:
        r = self.r
        root: dict[str, Any] = {"key": "m"}
        self.n_states = 1
        (self._parallel if r.random() < 0.3 else self._compound)(root, 0)
        spec: dict[str, Any] = {"id": "m", "context": {"n": 0, "m": 0, "v": 0}, "output": r.random() < 0.5,
                                "root": root}
        self.infos = index(spec)
        self._history_defaults()
        for info in self.infos:
            self._decorate(info)
        self._fill_cancels()
        pool = [d for i in self.infos for d, _ts in i.node.get("on") or [] if "*" not in d] + TYPES
        invokes = [invoke_id(i) for i in self.infos if i.node.get("invoke")]
        timers = any(i.node.get("after") for i in self.infos) or '"draise"' in json.dumps(spec)
        steps: list[list[Any]] = []
        for _ in range(r.randint(3, 9)):
            x = r.random()
            if timers and x < 0.2:
                steps.append(["advance", r.choice([5, 10, 15, 20, 30])])
            elif invokes and x < 0.4:
                steps.append([r.choice(["resolve", "resolve", "reject"]), r.choice(invokes), r.randint(0, 2)])
            else:
                steps.append(["send", self._event(pool)])
        return {"chart": spec, "steps": steps, "probes": [self._event(pool) for _ in range(3)]}


def _raisable(desc: str | None) -> list[str]:
    """Events a handler of `desc` may raise: later ones only, and none from wildcards, so raises rarely loop."""
    if desc is None:
        return TYPES
    if "*" in desc:
        return []
    return TYPES[TYPES.index(desc) + 1:] if desc in TYPES else TYPES


def _no_history(nodes: list[Info]) -> list[Info]:
    return [n for n in nodes if n.type != "history"]


def generate(seed: int) -> dict[str, Any]:
    """One case `{"chart", "steps", "probes"}` from a seed; the chart is normalized and valid."""
    for attempt in range(50):
        case = _Gen(seed * 1000 + attempt).case()
        if valid(case["chart"]):
            case["chart"] = normalize(case["chart"])
            return case
    raise AssertionError(f"seed {seed}: no valid chart in 50 attempts")
