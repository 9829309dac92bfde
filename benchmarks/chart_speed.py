"""Transitions per second of jr2ray's pure chart `transition()` against python-statemachine 3.x and sismic.

Run: python benchmarks/chart_speed.py [--seconds 1.0] [--repeats 3]

Two charts, built the same way on all three sides:
  (a) notes: the notes workflow's machine shape (writing{drafting, asking}, published, failed; events ask, reply,
      done with a guard on context.replies). Invokes are from_callback no-ops on our side (pure transition()
      returns StartChild/StopChild effects but runs nothing). A cycle is: a fresh initial snapshot / a fresh
      machine instance, then done (guard fails), ask, reply, ask, reply, done (to the final state). The initial
      step is inside the timed loop on both sides; only the six sends count as transitions.
      notes_loop: the same machine kept alive, cycling ask, reply (no restarts in the timed loop).
  (b) gen200: a generated chart of 200 states: 10 compound groups x 19 atomic states + the groups themselves
      (plus the root). Events: next (to the next sibling, the last one jumps to the next group), jump (to a
      pseudo-random state in another group), back (group-level, to the group's first state), tick (group-level,
      targetless counter increment), skip (guarded on the counter's parity).
Ours: `transition(machine, snapshot, event)` in a loop (pure; the effects list is built but not executed).
python-statemachine ("theirs"): `sm.send(event, **payload)` on a StateChart built with
`create_machine_class_from_definition`.
sismic: `interpreter.queue(event, **payload)` then `interpreter.execute()` (the charts are in chart_sismic.py).
Before timing, all three are driven through the same event streams and must agree on the states they visit.
Prints a table and writes benchmarks/results/chart_speed.json (tr/s per side, ours/theirs and ours/sismic).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sismic  # noqa: E402
import statemachine  # noqa: E402
from statemachine.io import create_machine_class_from_definition  # noqa: E402

from benchmarks.chart_sismic import leaf_of, sismic_gen, sismic_notes  # noqa: E402
from jr2ray.chart import Event, assign, create_machine, from_callback, initial_transition, transition  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "chart_speed.json"


# ---------------------------------------------------------------------------------------------------------------
# (a) the notes machine
# ---------------------------------------------------------------------------------------------------------------
NOTES_CYCLE = [
    {"type": "done", "notes": "early"},          # guard fails: replies == 0
    {"type": "ask", "question": "Which release?"},
    {"type": "reply", "text": "v2"},
    {"type": "ask", "question": "Any breaking change?"},
    {"type": "reply", "text": "none"},
    {"type": "done", "notes": "Release notes for v2."},  # guard passes -> published (final)
]


def _noop() -> None:
    return None


def ours_notes():
    noop_actor = from_callback(lambda: None)
    m = create_machine({
        "id": "notes",
        "context": lambda input: {"changes": input["changes"], "replies": 0},
        "on": {"agent.fault": ".failed"},
        "initial": "writing",
        "states": {
            "writing": {
                "invoke": {"src": "writer", "id": "writer",
                           "input": lambda context: {"prompt": f"Write notes for:\n{context['changes']}"}},
                "on": {"done": {"guard": lambda context: context["replies"] > 0, "target": "published",
                                "actions": assign(notes=lambda event: event.notes)}},
                "initial": "drafting",
                "states": {
                    "drafting": {"on": {"ask": {"target": "asking",
                                                "actions": assign(question=lambda event: event.question)}}},
                    "asking": {
                        "invoke": {"src": "gate", "id": "gate",
                                   "input": lambda context: {"meta": {"question": context["question"]}}},
                        "on": {"reply": {"target": "drafting", "actions": [
                            assign(replies=lambda context: context["replies"] + 1), _noop]}},
                    },
                },
            },
            "published": {"type": "final"},
            "failed": {"invoke": {"src": "fail", "id": "fail", "input": {"reason": "the Turn could not go on"}}},
        },
        "output": lambda context: {"notes": context.get("notes", "")},
    }, actors={"writer": noop_actor, "gate": noop_actor, "fail": noop_actor})
    events = [Event.from_any(e) for e in NOTES_CYCLE]
    inp = {"changes": "- fix: a bug\n- feat: a thing"}

    def run(n_cycles: int) -> int:
        done = 0
        for _ in range(n_cycles):
            s, _ = initial_transition(m, input=inp)
            for ev in events:
                s, _ = transition(m, s, ev)
                done += 1
            assert s.status == "done", s
        return done

    loop_events = events[1:3]  # ask, reply

    def run_loop(n_rounds: int) -> int:
        s, _ = initial_transition(m, input=inp)
        done = 0
        for _ in range(n_rounds):
            for ev in loop_events:
                s, _ = transition(m, s, ev)
                done += 1
        assert s.matches("writing.drafting")
        return done

    return run, run_loop


def theirs_notes():
    def has_replies(model):
        return model.ctx["replies"] > 0

    def set_question(model, question=None):
        model.ctx["question"] = question

    def add_reply(model):
        model.ctx["replies"] += 1

    def set_notes(model, notes=None):
        model.ctx["notes"] = notes

    def noop():
        return None

    Notes = create_machine_class_from_definition(
        "Notes",
        states={
            "writing": {
                "initial": True,
                "states": {
                    "drafting": {"initial": True, "on": {"ask": [{"target": "asking", "on": set_question}]}},
                    "asking": {"on": {"reply": [{"target": "drafting", "on": [add_reply, noop]}]}},
                },
                "on": {"done": [{"target": "published", "cond": has_replies, "on": set_notes}],
                       "agent.fault": [{"target": "failed"}]},
            },
            "published": {"final": True},
            "failed": {},
        },
        validate_final_reachability=False, validate_trap_states=False, validate_disconnected_states=False,
    )

    class Model:
        def __init__(self):
            self.ctx = {"changes": "- fix: a bug\n- feat: a thing", "replies": 0}

    sends = [(e["type"], {k: v for k, v in e.items() if k != "type"}) for e in NOTES_CYCLE]

    def run(n_cycles: int) -> int:
        done = 0
        for _ in range(n_cycles):
            sm = Notes(model=Model())
            for name, payload in sends:
                sm.send(name, **payload)
                done += 1
            assert sm.is_terminated
        return done

    loop_sends = sends[1:3]  # ask, reply

    def run_loop(n_rounds: int) -> int:
        sm = Notes(model=Model())
        done = 0
        for _ in range(n_rounds):
            for name, payload in loop_sends:
                sm.send(name, **payload)
                done += 1
        return done

    return run, run_loop


# ---------------------------------------------------------------------------------------------------------------
# (b) a generated 200-state chart
# ---------------------------------------------------------------------------------------------------------------
GROUPS, PER_GROUP = 10, 19          # 10 groups + 190 leaves = 200 states below the root
GEN_EVENTS = ["next", "tick", "next", "jump", "skip", "next", "back", "tick", "jump", "next"]


def _gen_layout(seed: int = 7):
    rnd = random.Random(seed)
    leaves = [[f"g{g}_s{i}" for i in range(PER_GROUP)] for g in range(GROUPS)]
    jumps = {}
    for g in range(GROUPS):
        for i in range(PER_GROUP):
            other = rnd.choice([x for x in range(GROUPS) if x != g])
            jumps[leaves[g][i]] = leaves[other][rnd.randrange(PER_GROUP)]
    return leaves, jumps


def ours_gen200():
    leaves, jumps = _gen_layout()
    states = {}
    for g in range(GROUPS):
        children = {}
        for i, name in enumerate(leaves[g]):
            nxt = leaves[g][i + 1] if i + 1 < PER_GROUP else leaves[(g + 1) % GROUPS][0]
            on = {"next": "#" + nxt, "jump": "#" + jumps[name]}
            if i % 3 == 0:
                skip_to = leaves[g][(i + 2) % PER_GROUP]
                on["skip"] = {"target": "#" + skip_to, "guard": lambda context: context["count"] % 2 == 0}
            children[name] = {"id": name, "on": on}
        states[f"g{g}"] = {
            "id": f"g{g}", "initial": leaves[g][0], "states": children,
            "on": {"back": "#" + leaves[g][0],
                   "tick": {"actions": assign(count=lambda context: context["count"] + 1)}},
        }
    m = create_machine({"id": "gen", "initial": "g0", "context": {"count": 0}, "states": states})
    events = [Event(e) for e in GEN_EVENTS]

    def run(n_rounds: int) -> int:
        s, _ = initial_transition(m)
        done = 0
        for _ in range(n_rounds):
            for ev in events:
                s, _ = transition(m, s, ev)
                done += 1
        return done

    return run, m


def theirs_gen200():
    leaves, jumps = _gen_layout()

    def is_even(model):
        return model.count % 2 == 0

    def tick(model):
        model.count += 1

    states = {}
    for g in range(GROUPS):
        children = {}
        for i, name in enumerate(leaves[g]):
            nxt = leaves[g][i + 1] if i + 1 < PER_GROUP else leaves[(g + 1) % GROUPS][0]
            on = {"next": [{"target": nxt}], "jump": [{"target": jumps[name]}]}
            if i % 3 == 0:
                on["skip"] = [{"target": leaves[g][(i + 2) % PER_GROUP], "cond": is_even}]
            children[name] = {"on": on}
            if i == 0:
                children[name]["initial"] = True
        states[f"g{g}"] = {
            "states": children,
            "on": {"back": [{"target": leaves[g][0]}], "tick": [{"target": None, "on": tick}]},
        }
        if g == 0:
            states[f"g{g}"]["initial"] = True
    Gen = create_machine_class_from_definition(
        "Gen", states=states,
        validate_final_reachability=False, validate_trap_states=False, validate_disconnected_states=False,
    )

    class Model:
        def __init__(self):
            self.count = 0

    def run(n_rounds: int) -> int:
        sm = Gen(model=Model())
        done = 0
        for _ in range(n_rounds):
            for name in GEN_EVENTS:
                sm.send(name)
                done += 1
        return done

    return run, Gen


def _check_gen_equivalence(n_rounds: int = 30) -> None:
    """Both 200-state charts visit the same leaves for the same event stream (a sanity check, not timed)."""
    _, m = ours_gen200()
    _, Gen = theirs_gen200()

    class Model:
        count = 0

    model = Model()
    sm = Gen(model=model)
    s, _ = initial_transition(m)
    for _ in range(n_rounds):
        for name in GEN_EVENTS:
            s, _ = transition(m, s, name)
            sm.send(name)
            ours_leaf = next(iter(s.value.values()))
            theirs_leaf = [st.id for st in sm.configuration if not st.states][0]
            assert ours_leaf == theirs_leaf, (name, ours_leaf, theirs_leaf)
            assert s.context["count"] == model.count


def _check_sismic_equivalence(n_rounds: int = 30) -> None:
    """sismic visits the same leaves and counts the same ticks on gen200, and ends the notes cycle the same way."""
    from sismic.interpreter import Interpreter

    leaves, jumps = _gen_layout()
    _, sc = sismic_gen(leaves, jumps, GEN_EVENTS)
    _, m = ours_gen200()
    it = Interpreter(sc, initial_context={"count": 0})
    it.execute()
    s, _ = initial_transition(m)
    for _ in range(n_rounds):
        for name in GEN_EVENTS:
            s, _ = transition(m, s, name)
            it.queue(name)
            it.execute()
            assert next(iter(s.value.values())) == leaf_of(it, GROUPS), name
            assert s.context["count"] == it.context["count"]
    run_notes, _ = sismic_notes(NOTES_CYCLE)
    assert run_notes(1) == len(NOTES_CYCLE)  # asserts the final state was reached after the sixth event


# ---------------------------------------------------------------------------------------------------------------
def _calibrate(run, unit: int, seconds: float) -> int:
    """How many units of `run` take about `seconds`."""
    run(max(1, unit // 10))  # warm up
    n = unit
    while True:
        t0 = time.perf_counter()
        run(n)
        dt = time.perf_counter() - t0
        if dt >= seconds / 4:
            break
        n *= 2
    return max(1, int(n * seconds / dt))


def _rates(runs: dict[str, object], unit: int, seconds: float, repeats: int) -> dict[str, tuple[float, int]]:
    """Best transitions/second per side over `repeats` rounds; each round times every side once, in turn, so load
    from other processes on the machine falls on all sides alike."""
    sizes = {name: _calibrate(run, unit, seconds) for name, run in runs.items()}
    best = {name: (0.0, 0) for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            done = run(sizes[name])
            rate = done / (time.perf_counter() - t0)
            if rate > best[name][0]:
                best[name] = (rate, done)
    return best


def _version(dist: str, module: object) -> str:
    """The installed distribution's version (sismic's own `__version__` string can lag its release)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return str(getattr(module, "__version__", "?"))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="target duration of one timed run per side")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    load_start = round(os.getloadavg()[0], 2)
    _check_gen_equivalence()
    _check_sismic_equivalence()
    rows = []
    (ours_n, ours_nl), (theirs_n, theirs_nl) = ours_notes(), theirs_notes()
    sismic_n, sismic_nl = sismic_notes(NOTES_CYCLE)
    (ours_g, _), (theirs_g, _) = ours_gen200(), theirs_gen200()
    leaves, jumps = _gen_layout()
    sismic_g, _ = sismic_gen(leaves, jumps, GEN_EVENTS)
    for name, ours, theirs, sis, states in (("notes", ours_n, theirs_n, sismic_n, 5),
                                            ("notes_loop", ours_nl, theirs_nl, sismic_nl, 5),
                                            ("gen200", ours_g, theirs_g, sismic_g, GROUPS * (PER_GROUP + 1))):
        got = _rates({"ours": ours, "theirs": theirs, "sismic": sis}, 10, args.seconds, args.repeats)
        (o, on), (t, tn), (z, zn) = got["ours"], got["theirs"], got["sismic"]
        rows.append({"chart": name, "states": states, "ours_tps": round(o, 1), "theirs_tps": round(t, 1),
                     "sismic_tps": round(z, 1), "ratio": round(o / t, 3), "ratio_sismic": round(o / z, 3),
                     "ours_transitions_per_run": on, "theirs_transitions_per_run": tn,
                     "sismic_transitions_per_run": zn})

    print(f"{'chart':<10} {'states':>6} {'jr2ray t/s':>11} {'p-statemachine t/s':>19} {'sismic t/s':>11} "
          f"{'ours/p-sm':>10} {'ours/sismic':>12}")
    for r in rows:
        print(f"{r['chart']:<10} {r['states']:>6} {r['ours_tps']:>11,.0f} {r['theirs_tps']:>19,.0f} "
              f"{r['sismic_tps']:>11,.0f} {r['ratio']:>10.2f} {r['ratio_sismic']:>12.2f}")
    out = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "statemachine_version": statemachine.__version__,
        "sismic_version": _version("sismic", sismic),
        "load_average_1m": {"start": load_start, "end": round(os.getloadavg()[0], 2)},  # a shared machine: ratios
        # are steadier than the absolute rates
        "method": {"ours": "pure jr2ray.chart.transition() in a loop", "theirs": "StateChart.send() in a loop",
                   "sismic": "Interpreter.queue(event) then execute() in a loop",
                   "ratio": "ours_tps / theirs_tps (python-statemachine)", "ratio_sismic": "ours_tps / sismic_tps",
                   "seconds_per_run": args.seconds, "repeats": args.repeats,
                   "metric": "best of repeats; each repeat times the three sides in turn"},
        "results": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return out


if __name__ == "__main__":
    main()
