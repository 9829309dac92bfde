"""The differential tier's own tools, without Node: the generator's rules and the shrinker."""
from __future__ import annotations

import json
from functools import lru_cache

from xstate_gen import generate
from xstate_shrink import shrink
from xstate_spec import index, normalize, valid


@lru_cache(maxsize=1)
def _charts():
    return [generate(seed)["chart"] for seed in range(200)]


def _actions(spec):
    for info in index(spec):
        n = info.node
        yield "entry", info, n.get("entry") or []
        yield "exit", info, n.get("exit") or []
        groups = [ts for _d, ts in n.get("on") or []] + [ts for _d, ts in n.get("after") or []]
        groups += [n.get("always") or [], n.get("onDone") or []]
        for ts in groups:
            for t in ts:
                yield "t", info, t.get("actions") or []


def test_generated_charts_are_valid_and_normalized():
    for seed, chart in enumerate(_charts()):
        assert valid(chart), seed
        assert normalize(chart) == chart, seed  # normalize is idempotent, so the shrinker's edits can rely on it


def test_every_assign_bumps_v_and_every_entry_timer_id_is_cancelled_on_exit():
    for seed, spec in enumerate(_charts()):
        for where, info, actions in _actions(spec):
            for a in actions:
                if a[0] == "asg":
                    assert ["v", ["add", "v", 1]] in a[2], (seed, a)
                if a[0] == "draise" and a[4] is not None:
                    assert where == "entry", (seed, a)
                    assert ["cancel", a[4]] in (info.node.get("exit") or []), (seed, a)


def test_states_with_history_or_invoke_bump_v_on_entry():
    for seed, chart in enumerate(_charts()):
        for info in index(chart):
            if info.node.get("invoke") or any(c.type == "history" for c in info.children):
                assert info.node["entry"][0] == ["asg", "obj", [["v", ["add", "v", 1]]]], seed


def test_the_shrinker_keeps_only_what_the_failure_needs():
    case = next(c for c in (generate(s) for s in range(100)) if json.dumps(c["chart"]).count('"draise"') >= 3)

    def fails(c):
        return '"draise"' in json.dumps(c["chart"])

    small, tries = shrink(case, fails)
    text = json.dumps(small["chart"])
    assert text.count('"draise"') == 1
    assert small["steps"] == [] and small["probes"] == []
    assert len(index(small["chart"])) <= 2
    assert tries > 0 and valid(small["chart"])
