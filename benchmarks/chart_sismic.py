"""The two benchmark charts of chart_speed.py, built for sismic (SCXML-like semantics, Python code strings).

sismic's `Interpreter.queue(event)` followed by `execute()` runs one event to stability (its macrosteps), which is
what one jr2ray `transition()` or one python-statemachine `send()` does. sismic evaluates guards and actions as
Python code strings against the interpreter's context, which is its normal way of being used. It has no invoke;
the notes chart's invokes do nothing on the other two sides either (jr2ray only returns the effects).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sismic.interpreter import Interpreter
from sismic.model import BasicState, CompoundState, FinalState, Statechart, Transition


def _noop() -> None:
    return None


def notes_chart() -> Statechart:
    sc = Statechart("notes")
    sc.add_state(CompoundState("root", initial="writing"), None)
    sc.add_state(CompoundState("writing", initial="drafting"), "root")
    sc.add_state(BasicState("drafting"), "writing")
    sc.add_state(BasicState("asking"), "writing")
    sc.add_state(FinalState("published"), "root")
    sc.add_state(BasicState("failed"), "root")
    sc.add_transition(Transition("drafting", "asking", event="ask", action="question = event.question"))
    sc.add_transition(Transition("asking", "drafting", event="reply", action="replies += 1\nnoop()"))
    sc.add_transition(Transition("writing", "published", event="done", guard="replies > 0",
                                 action="notes = event.notes"))
    sc.add_transition(Transition("root", "failed", event="agent.fault"))
    sc.validate()
    return sc


def sismic_notes(cycle: Sequence[dict[str, Any]]) -> tuple[Callable[[int], int], Callable[[int], int]]:
    """(run n fresh cycles to the final state, run n ask/reply rounds on one live interpreter)."""
    sc = notes_chart()
    sends = [(e["type"], {k: v for k, v in e.items() if k != "type"}) for e in cycle]

    def fresh() -> Interpreter:
        return Interpreter(sc, initial_context={"changes": "- fix: a bug\n- feat: a thing", "replies": 0,
                                                "noop": _noop})

    def run(n_cycles: int) -> int:
        done = 0
        for _ in range(n_cycles):
            it = fresh()
            for name, payload in sends:
                it.queue(name, **payload)
                it.execute()
                done += 1
            assert it.final, it.configuration
        return done

    loop_sends = sends[1:3]  # ask, reply

    def run_loop(n_rounds: int) -> int:
        it = fresh()
        it.execute()  # the initial step, outside the loop as on the other sides
        done = 0
        for _ in range(n_rounds):
            for name, payload in loop_sends:
                it.queue(name, **payload)
                it.execute()
                done += 1
        assert "drafting" in it.configuration
        return done

    return run, run_loop


def gen_chart(leaves: list[list[str]], jumps: dict[str, str]) -> Statechart:
    """The generated chart: groups of leaves; next/jump/skip on leaves, back/tick on groups."""
    sc = Statechart("gen")
    sc.add_state(CompoundState("root", initial="g0"), None)
    n_groups, per_group = len(leaves), len(leaves[0])
    for g in range(n_groups):
        group = f"g{g}"
        sc.add_state(CompoundState(group, initial=leaves[g][0]), "root")
        for name in leaves[g]:
            sc.add_state(BasicState(name), group)
    for g in range(n_groups):
        group = f"g{g}"
        for i, name in enumerate(leaves[g]):
            nxt = leaves[g][i + 1] if i + 1 < per_group else leaves[(g + 1) % n_groups][0]
            sc.add_transition(Transition(name, nxt, event="next"))
            sc.add_transition(Transition(name, jumps[name], event="jump"))
            if i % 3 == 0:
                sc.add_transition(Transition(name, leaves[g][(i + 2) % per_group], event="skip",
                                             guard="count % 2 == 0"))
        sc.add_transition(Transition(group, leaves[g][0], event="back"))
        sc.add_transition(Transition(group, None, event="tick", action="count += 1"))
    sc.validate()
    return sc


def sismic_gen(leaves: list[list[str]], jumps: dict[str, str], events: Sequence[str]
               ) -> tuple[Callable[[int], int], Statechart]:
    sc = gen_chart(leaves, jumps)

    def run(n_rounds: int) -> int:
        it = Interpreter(sc, initial_context={"count": 0})
        it.execute()
        done = 0
        for _ in range(n_rounds):
            for name in events:
                it.queue(name)
                it.execute()
                done += 1
        return done

    return run, sc


def leaf_of(it: Interpreter, groups: int) -> str:
    """The active leaf of a gen chart interpreter (its configuration holds root, one group and one leaf)."""
    names = [s for s in it.configuration if s != "root" and not (s.startswith("g") and s[1:].isdigit()
                                                                and int(s[1:]) < groups)]
    assert len(names) == 1, it.configuration
    return names[0]
