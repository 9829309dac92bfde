"""M1 (the derived set) and M2 (the Menu): what the walk gives an Agent, and that the tools block never changes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from menu_helpers import Empty, agents, ev, load, pick, start

from jr2ray import assign, effect
from jr2ray.chart import create_machine
from jr2ray.menu import (
    allowed_picks,
    anthropic_tools,
    menu_items,
    openai_tools,
    tools_bytes,
)

ROOT = Path(__file__).resolve().parents[2]

NAMES = ["top", "own", "mode_a", "deep", "eff", "kid", "gated", "nested", "back", "tick", "leave"]
EVENTS = {n: ev(n) for n in NAMES}


def walk_machine() -> Any:
    """`r.s` invokes Agent w. Below it: modes (one nested), an Effect state, a child-Machine state, a Gate state
    with a mode below it, and a state invoking Agent v with a mode below it."""
    kid = create_machine({"id": "kid", "initial": "a", "states": {"a": {}}})
    actors = {**agents("w", "v"), "fx": effect.command(argv=["true"], timeout_s=5), "kid": kid}
    return load({
        "id": "r", "initial": "s",
        "on": {"top": ".done", "agent.fault": ".done"},
        "states": {
            "s": {
                "invoke": {"src": "w"},
                "on": {"own": "done", "xstate.done.actor.r.s": "done"},
                "after": {60000: "done"},
                "initial": "a",
                "states": {
                    "a": {"on": {"mode_a": "b", "tick": {"actions": assign(n=1)}},
                          "always": {"guard": lambda context: False, "target": "b"}},
                    "b": {"initial": "c", "states": {"c": {"on": {"deep": "#r.s.a", "leave": "#r.done"}}}},
                    "e": {"invoke": {"src": "fx", "onDone": "a"}, "on": {"eff": "a"}},
                    "k": {"invoke": {"src": "kid", "onDone": "a"}, "on": {"kid": "a"}},
                    "g": {"invoke": {"src": "gate"}, "on": {"gated": "a"}, "initial": "gm",
                          "states": {"gm": {"on": {"back": "#r.s.a"}}}},
                    "n": {"invoke": {"src": "v"}, "on": {"nested": "#r.s.a"}, "initial": "nm",
                          "states": {"nm": {"on": {"back": "#r.s.a"}}}},
                },
            },
            "done": {"type": "final"},
        },
    }, EVENTS.values(), actors)


def test_m1_the_derived_set_is_own_ancestors_modes_effects_and_child_machines() -> None:
    m = walk_machine()
    assert m.structure.derived["r.s"] == sorted(["top", "own", "mode_a", "tick", "deep", "leave", "eff", "kid"])


def test_m1_a_gate_below_and_everything_under_it_gives_nothing() -> None:
    derived = walk_machine().structure.derived["r.s"]
    assert "gated" not in derived and "back" not in derived


def test_m1_a_different_agent_below_and_everything_under_it_gives_nothing() -> None:
    m = walk_machine()
    assert "nested" not in m.structure.derived["r.s"]
    # v's own seat: its own key, its mode's, and the root's unowned `top` (M3: it belongs to every party);
    # never the keys of r.s, which belong to w.
    assert m.structure.derived["r.s.n"] == ["back", "nested", "top"]


def test_m1_mechanism_events_never_count() -> None:
    m = walk_machine()
    for derived in m.structure.derived.values():
        assert not [n for n in derived if "." in n or n.startswith("after") or n == "always"]


def test_m2_the_menu_is_sorted_by_name() -> None:
    names = [i.name for i in menu_items(walk_machine(), "w")]
    assert names == sorted(names) == walk_machine().structure.derived["r.s"]


def test_m2_a_nested_agents_events_are_not_on_the_outer_menu() -> None:
    m = walk_machine()
    assert "nested" not in [i.name for i in menu_items(m, "w")]
    assert "nested" in [i.name for i in menu_items(m, "v")]


def test_m2_the_menu_is_the_union_over_states_invoking_the_same_slot() -> None:
    evs = [ev(n) for n in ("draft", "submit", "revise", "withdraw", "approve", "say")]
    m = load({"id": "u", "initial": "first", "states": {
        "first": {"invoke": {"src": "w"}, "on": {"submit": "gate"}, "initial": "d",
                  "states": {"d": {"on": {"draft": "d"}}}},
        "gate": {"invoke": {"src": "gate"}, "on": {"approve": "done", "revise": "second"}},
        "second": {"invoke": {"src": "w"}, "on": {"submit": "gate", "withdraw": "done"}, "initial": "d",
                   "states": {"d": {"on": {"draft": "d"}}, "inner": {"invoke": {"src": "v"}, "on": {"say": "d"}}}},
        "done": {"type": "final"}}}, evs, agents("w", "v"))
    assert m.structure.derived["u.first"] == ["draft", "submit"]
    assert m.structure.derived["u.second"] == ["draft", "submit", "withdraw"]
    assert [i.name for i in menu_items(m, "w")] == ["draft", "submit", "withdraw"]
    assert "say" not in [i.name for i in menu_items(m, "w")]  # a nested Agent's event
    assert [i.name for i in menu_items(m, "v")] == ["say"]


def test_m2_each_tools_description_is_the_events_own_not_a_transitions() -> None:
    go = ev("go", "Go on to the next step.")
    m = load({"id": "d", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"go": {"target": "t", "description": "A state's own wording."}}},
        "t": {}}}, [go])
    [item] = menu_items(m, "w")
    assert item.description == "Go on to the next step."
    assert item.parameters == Empty.model_json_schema()


def test_m2_unknown_slot_has_no_menu() -> None:
    with pytest.raises(KeyError):
        menu_items(walk_machine(), "nobody")


def test_m2_tools_are_byte_identical_across_loads() -> None:
    for dialect in ("openai", "anthropic"):
        assert tools_bytes(menu_items(walk_machine(), "w"), dialect) == tools_bytes(menu_items(walk_machine(), "w"),
                                                                                     dialect)


def test_m2_tools_are_byte_identical_across_processes() -> None:
    code = ("import hashlib; from workflows.coder import machine; from jr2ray.menu import menu_items, tools_bytes;"
            "print(hashlib.sha256(tools_bytes(menu_items(machine, 'coder'), 'anthropic')).hexdigest())")
    seen = set()
    for seed in ("0", "7", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             check=True)
        seen.add(out.stdout.strip())
    from workflows.coder import machine

    assert seen == {hashlib.sha256(tools_bytes(menu_items(machine, "coder"), "anthropic")).hexdigest()}


def test_m2_the_rendered_tools_follow_menu_order_in_both_dialects() -> None:
    items = menu_items(walk_machine(), "w")
    assert [t["function"]["name"] for t in openai_tools(items)] == [i.name for i in items]
    anth = anthropic_tools(items)
    assert [t["name"] for t in anth] == [i.name for i in items]
    assert anth[-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in t for t in anth[:-1])


# -- The Menu is byte-identical across every mode and guard change of a run ---------------------------------------


def test_m2_the_menu_is_byte_identical_across_every_mode_and_guard_change() -> None:
    evs = [ev(n) for n in ("step", "bump", "hop", "finish")]
    m = load({"id": "b", "initial": "s", "context": {"n": 0}, "states": {
        "s": {"invoke": {"src": "w"},
              "on": {"finish": {"guard": lambda context: context["n"] >= 2, "target": "done"},
                     "bump": {"actions": assign(n=lambda context: context["n"] + 1)}},
              "initial": "one",
              "states": {"one": {"on": {"step": "two"}},
                         "two": {"on": {"hop": {"guard": lambda context: context["n"] % 2 == 1, "target": "one"},
                                        "step": "three"}},
                         "three": {"on": {"step": "one"}}}},
        "done": {"type": "final"}}}, evs)
    want = {d: tools_bytes(menu_items(m, "w"), d) for d in ("openai", "anthropic")}
    snap = start(m)
    seen: set[tuple[str, ...]] = set()
    for name in ["step", "bump", "hop", "step", "bump", "step", "step", "bump", "finish"]:
        seen.add(tuple(allowed_picks(m, snap, "b.s")))
        for d, b in want.items():
            assert tools_bytes(menu_items(m, "w"), d) == b
        snap, _, _ = pick(m, snap, "b.s", name)
    assert snap.status == "done"
    assert len(seen) == 3  # the Allowed picks moved with the modes and guards; the Menu did not
