"""Property tests on generated charts: can() vs transition(), and to_json/restore equivalence."""
import itertools
import json

from chart_helpers import executable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jr2ray.chart import assign, can, create_machine, initial_transition, restore, transition
from jr2ray.chart.algorithm import transition_traced  # transition() plus the transitions taken (for receipts)

EVENTS = ["a", "b", "c", "d"]
SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# ---- chart specs as plain data (so hypothesis prints and shrinks them) ----------------------------------------

GUARDS = st.one_of(st.none(),
                   st.tuples(st.just("lt"), st.integers(0, 4)),
                   st.tuples(st.just("ge"), st.integers(0, 4)),
                   st.tuples(st.just("even"), st.just(0)))
ACTIONS = st.lists(st.sampled_from(["inc_n", "reset_n", "inc_m"]), max_size=2)


@st.composite
def tree(draw):
    counter = itertools.count()
    budget = {"left": draw(st.integers(3, 14))}

    def node(depth, kind):
        name = f"s{next(counter)}"
        budget["left"] -= 1
        spec = {"name": name, "kind": kind, "children": []}
        if kind in ("compound", "parallel"):
            n = draw(st.integers(1, 3))
            for i in range(n):
                if budget["left"] <= 0 or depth >= 3:
                    child_kind = "atomic"
                else:
                    choices = ["atomic", "atomic", "compound", "parallel"]
                    if kind == "compound" and i > 0:
                        choices.append("final")
                    child_kind = draw(st.sampled_from(choices))
                spec["children"].append(node(depth + 1, child_kind))
            if kind == "compound" and draw(st.booleans()) and draw(st.booleans()):
                spec["children"].append({"name": f"h{next(counter)}", "kind": "history",
                                         "history": draw(st.sampled_from(["shallow", "deep"])), "children": []})
        return spec

    root = node(0, "compound")
    return root


def _walk(spec):
    yield spec
    for c in spec["children"]:
        yield from _walk(c)


@st.composite
def chart_specs(draw):
    root = draw(tree())
    nodes = list(_walk(root))
    names = [n["name"] for n in nodes if n is not root]
    plain_targets = [n["name"] for n in nodes if n is not root and n["kind"] not in ("final", "history")]
    trans = {}
    for n in nodes:
        if n["kind"] in ("final", "history"):
            continue
        on = {}
        for ev in EVENTS:
            if not draw(st.booleans()):
                continue
            if draw(st.integers(0, 9)) == 0:
                on[ev] = "empty"
                continue
            cands = []
            for _ in range(draw(st.integers(1, 2))):
                cands.append({"target": draw(st.one_of(st.none(), st.sampled_from(names))),
                              "guard": draw(GUARDS), "actions": draw(ACTIONS), "reenter": draw(st.booleans())})
            on[ev] = cands
        always = None
        if n is not root and draw(st.integers(0, 5)) == 0:
            always = {"k": draw(st.integers(1, 4)),
                      "target": draw(st.one_of(st.none(), st.sampled_from(plain_targets)))}
        on_done = None
        if n["kind"] in ("compound", "parallel") and n is not root and draw(st.booleans()):
            on_done = draw(st.sampled_from(plain_targets))
        entry = draw(st.booleans())
        trans[n["name"]] = {"on": on, "always": always, "onDone": on_done, "entry": entry}
    return {"root": root, "trans": trans}


# ---- building a real chart from a spec -----------------------------------------------------------------------

def _guard(g):
    if g is None:
        return None
    op, k = g
    if op == "lt":
        return lambda context: context["n"] < k
    if op == "ge":
        return lambda context: context["n"] >= k
    return lambda context: context["n"] % 2 == 0


def _action(a):
    if a == "inc_n":
        return assign(n=lambda context: context["n"] + 1)
    if a == "reset_n":
        return assign(n=0)
    return assign(m=lambda context: context["m"] + 1)


def _transition(t):
    out = {"actions": [_action(a) for a in t["actions"]]}
    if t["target"] is not None:
        out["target"] = "#" + t["target"]
        out["reenter"] = t["reenter"]
    g = _guard(t["guard"])
    if g is not None:
        out["guard"] = g
    return out


def build(spec):
    trans = spec["trans"]

    def state(n, is_root=False):
        cfg = {"id": n["name"]}
        kind = n["kind"]
        if kind == "history":
            return {"id": n["name"], "type": "history", "history": n["history"]}
        if kind == "final":
            return {"id": n["name"], "type": "final"}
        if kind == "parallel":
            cfg["type"] = "parallel"
        if n["children"]:
            cfg["states"] = {c["name"]: state(c) for c in n["children"]}
            if kind == "compound":
                cfg["initial"] = n["children"][0]["name"]
        tr = trans.get(n["name"], {})
        on = {}
        for ev, cands in tr.get("on", {}).items():
            on[ev] = {} if cands == "empty" else [_transition(c) for c in cands]
        if on:
            cfg["on"] = on
        if tr.get("always"):
            k = tr["always"]["k"]
            a = {"guard": (lambda kk: (lambda context: context["n"] < kk))(k),
                 "actions": assign(n=lambda context: context["n"] + 1)}
            if tr["always"]["target"]:
                a["target"] = "#" + tr["always"]["target"]
            cfg["always"] = a
        if tr.get("onDone"):
            cfg["onDone"] = "#" + tr["onDone"]
        if tr.get("entry"):
            cfg["entry"] = assign(m=lambda context: context["m"] + 1)
        return cfg

    root = state(spec["root"], is_root=True)
    root["context"] = {"n": 0, "m": 0}
    return create_machine(root)


event_seqs = st.lists(st.sampled_from(EVENTS), min_size=1, max_size=12)


@SETTINGS
@given(chart_specs(), event_seqs)
def test_can_false_means_transition_changes_nothing(spec, events):
    m = build(spec)
    s, _ = initial_transition(m)
    for ev in events:
        allowed = can(s, ev)
        s2, eff = transition(m, s, ev)
        if not allowed:
            assert s2.value == s.value
            assert s2.context == s.context
            assert s2.status == s.status
            assert executable(eff) == []
        s = s2


@SETTINGS
@given(chart_specs(), event_seqs)
def test_can_true_means_a_transition_with_target_or_actions_was_taken(spec, events):
    m = build(spec)
    s, _ = initial_transition(m)
    for ev in events:
        if s.status != "active":
            break
        allowed = can(s, ev)
        s2, _, took = transition_traced(m, s, ev)
        took = [t for t in took if t.event_type == ev]
        meaningful = [t for t in took if t.targets or t.has_actions]
        assert bool(meaningful) == allowed
        s = s2


@SETTINGS
@given(chart_specs(), event_seqs)
def test_restore_behaves_like_the_original(spec, events):
    m = build(spec)
    s, _ = initial_transition(m)
    r = restore(m, json.loads(json.dumps(s.to_json())))
    assert r.value == s.value and r.context == s.context
    for ev in events:
        # restore afresh at every step, and also keep one long-lived restored copy
        fresh = restore(m, s.to_json())
        s, _ = transition(m, s, ev)
        r, _ = transition(m, r, ev)
        f2, _ = transition(m, fresh, ev)
        for other in (r, f2):
            assert other.value == s.value
            assert other.context == s.context
            assert other.status == s.status
            assert other.history == s.history


@SETTINGS
@given(chart_specs(), event_seqs)
def test_transition_never_mutates_its_input(spec, events):
    m = build(spec)
    s, _ = initial_transition(m)
    for ev in events:
        before = json.dumps(s.to_json(), sort_keys=True)
        s2, _ = transition(m, s, ev)
        assert json.dumps(s.to_json(), sort_keys=True) == before
        assert s2.matches(s2.value)
        s = s2
