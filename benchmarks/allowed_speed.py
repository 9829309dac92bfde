"""Mean time of one `allowed_picks` call (M4), the question the Orchestrator asks after every pick and read.

Run: python benchmarks/allowed_speed.py [--notes-iterations 20000] [--gen-iterations 3000] [--repeats 5]

Two cases:
  (a) notes: workflows/notes.py with the writer in `drafting` after one reply, so both `ask` and `done` are read
      (Allowed picks: ask, done). Goal: < 100 us per call.
  (b) gen200: a generated chart of exactly 200 states. One Agent state holds 10 compound modes of 15 leaf modes
      each; 40 events, every leaf writes three of them and every group and the Agent's state write more, almost all
      behind guards (context guards, payload guards, sent_by, and a few `{}` shadows). Outside the Agent's state:
      a Gate, finals and a chain of filler states. The Agent's derived set is all 40 events. The timed calls cycle
      over 32 live snapshots reached by random allowed picks, so different modes and guard outcomes are read.
      Goal: < 2 ms per call.
Each repeat times `iterations` calls and reports the mean; the table shows the best and the median repeat, and the
ratio of the best to its goal (below 1.0 meets it). Benchmarks do not assert timings: the exit code is 0 either way.
Writes benchmarks/results/allowed_speed.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pydantic import BaseModel, Field

from jr2ray import agent, assign, define_event, jr2_setup, sent_by
from jr2ray.chart import Event, initial_transition, transition
from jr2ray.menu import allowed_picks, verdict

RESULTS = ROOT / "benchmarks" / "results" / "allowed_speed.json"
GOALS_US = {"notes": 100.0, "gen200": 2000.0}

# ---------------------------------------------------------------------------------------------------------------------
# (a) notes, drafting after one reply


def notes_case() -> tuple[Any, str, list[Any]]:
    from workflows.notes import machine as m

    s, _ = initial_transition(m.chart, m.validate_input({"changes": "Fixed a crash."}), now_ms=0)
    v = verdict(m, s, "notes.writing", "ask", {"question": "Is the flag public?"})
    s, _ = transition(m.chart, s, v.event, now_ms=0)
    s, _ = transition(m.chart, s, Event("reply", {"text": "Yes."}, {"party": "gate", "id": "notes.writing.asking"}),
                      now_ms=0)
    assert allowed_picks(m, s, "notes.writing") == ["ask", "done"], "notes: not in drafting after one reply"
    return m, "notes.writing", [s]


# ---------------------------------------------------------------------------------------------------------------------
# (b) a generated 200-state chart

GROUPS, LEAVES, N_EVENTS, FILLER = 10, 15, 40, 35


class Pick(BaseModel):
    flag: int = Field(default=0, description="A number the guard may read.")


def _ctx_guard(k: int, r: int) -> Any:
    return lambda context: context["n"] % k != r


def _payload_guard(k: int) -> Any:
    return lambda event: event.get("flag") == k


def _bump(k: int) -> Any:
    return assign(n=lambda context: context["n"] + k)


def gen200_machine() -> Any:
    rnd = random.Random(200)
    names = [f"e{i:02d}" for i in range(N_EVENTS)]
    events = [define_event(name=n, description=f"Generated pick {n}.", input=Pick) for n in names]
    events += [define_event(name=n, description=f"Gate event {n}.") for n in ("approve", "reject", "next")]
    gate_id = "gen.review"

    def leaf_path(g: int, j: int) -> str:
        return f"#gen.work.g{g}.l{j}"

    groups: dict[str, Any] = {}
    for g in range(GROUPS):
        leaves: dict[str, Any] = {}
        for j in range(LEAVES):
            on: dict[str, Any] = {}
            for slot in range(3):
                name = names[(g * 7 + j * (slot + 2) + slot * 11) % 32]
                kind = rnd.random()
                nxt = leaf_path(g, (j + 1) % LEAVES) if slot == 0 else leaf_path(rnd.randrange(GROUPS),
                                                                                 rnd.randrange(LEAVES))
                if kind < 0.55:
                    t: Any = {"guard": _ctx_guard(rnd.randint(2, 5), rnd.randint(0, 1)), "target": nxt,
                              "actions": _bump(1)}
                elif kind < 0.75:
                    t = [{"guard": _payload_guard(rnd.randint(0, 3)), "target": nxt},
                         {"guard": _ctx_guard(3, 0), "actions": _bump(2)}]
                elif kind < 0.85:
                    t = {"guard": sent_by(gate_id), "target": nxt}  # the Agent's pick falls to the group
                elif kind < 0.92:
                    t = {}  # shadows the group's and the Agent state's writing
                else:
                    t = {"target": nxt, "actions": _bump(1)}
                on[name] = t
            leaves[f"l{j}"] = {"on": on}
        group_on = {names[32 + (g + k) % 4]: {"guard": _ctx_guard(2 + k, 0), "target": f".l{(g + k) % LEAVES}",
                                              "actions": _bump(1)} for k in range(2)}
        for j in range(0, 32, 5):  # the fall-through targets for shadowed or sent_by leaf writings
            group_on.setdefault(names[(j + g) % 32], {"guard": _ctx_guard(4, 1), "target": ".l0"})
        groups[f"g{g}"] = {"initial": "l0", "on": group_on, "states": leaves}

    work_on = {names[36 + k]: {"guard": _ctx_guard(5 + k, 0), "target": "#gen.review"} for k in range(4)}
    work_on[names[1]] = {"guard": _ctx_guard(7, 3), "target": "#gen.done"}
    filler = {f"f{i}": {"on": {"next": f"f{i + 1}" if i + 1 < FILLER else "done"}} for i in range(FILLER)}
    config = {
        "id": "gen", "initial": "work", "context": {"n": 0},
        "on": {"agent.fault": ".failed"},
        "states": {
            "work": {"invoke": {"src": "w"}, "initial": "g0", "on": work_on, "states": groups},
            "review": {"invoke": {"src": "gate"}, "on": {"approve": "f0", "reject": "work"}},
            **filler,
            "done": {"type": "final"},
            "failed": {"type": "final"},
        },
    }
    m = jr2_setup(events=events, actors={"w": agent(model="local/tiny", instructions="Benchmark.")}
                  ).create_machine(config)
    n_states = len(m.chart.nodes)
    assert n_states == 200, f"gen200 has {n_states} states"
    return m


def gen200_case(n_snapshots: int = 32) -> tuple[Any, str, list[Any]]:
    m = gen200_machine()
    state = "gen.work"
    rnd = random.Random(7)
    snap, _ = initial_transition(m.chart, None, now_ms=0)
    snaps = [snap]
    while len(snaps) < n_snapshots:
        allowed = allowed_picks(m, snap, state)
        if not allowed:
            snap, _ = initial_transition(m.chart, None, now_ms=0)
            continue
        v = verdict(m, snap, state, rnd.choice(allowed), {"flag": rnd.randint(0, 3)})
        if v.kind != "deliver":
            continue
        nxt, _ = transition(m.chart, snap, v.event, now_ms=0)
        if state not in nxt.active_paths:  # left the Agent's state: start again
            nxt, _ = initial_transition(m.chart, None, now_ms=0)
        snap = nxt
        snaps.append(snap)
    return m, state, snaps


# ---------------------------------------------------------------------------------------------------------------------
# timing


def time_case(m: Any, state: str, snaps: list[Any], iterations: int, repeats: int) -> dict[str, Any]:
    k = len(snaps)
    for i in range(min(iterations, 500)):  # warm up
        allowed_picks(m, snaps[i % k], state)
    means = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(iterations):
            allowed_picks(m, snaps[i % k], state)
        means.append((time.perf_counter() - t0) / iterations * 1e6)
    sizes = [len(allowed_picks(m, s, state)) for s in snaps]
    return {"iterations": iterations, "repeats": repeats, "snapshots": k,
            "derived_set": len(m.structure.derived[state]), "states": len(m.chart.nodes),
            "allowed_sizes": {"min": min(sizes), "max": max(sizes), "mean": round(statistics.mean(sizes), 2)},
            "mean_us_per_repeat": [round(x, 2) for x in means],
            "best_mean_us": round(min(means), 2), "median_mean_us": round(statistics.median(means), 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes-iterations", type=int, default=20000)
    ap.add_argument("--gen-iterations", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    cases = {"notes": (notes_case(), args.notes_iterations), "gen200": (gen200_case(), args.gen_iterations)}
    results = []
    for name, ((m, state, snaps), iters) in cases.items():
        r = time_case(m, state, snaps, iters, args.repeats)
        goal = GOALS_US[name]
        r.update({"case": name, "agent_state": state, "goal_us": goal,
                  "ratio_to_goal": round(r["best_mean_us"] / goal, 4), "meets_goal": r["best_mean_us"] < goal})
        results.append(r)

    out = {"python": platform.python_version(), "machine": platform.machine(), "processor": platform.processor(),
           "method": {"call": "jr2ray.menu.allowed_picks(machine, snapshot, agent_state)",
                      "metric": "mean microseconds per call over `iterations` calls; best and median of repeats",
                      "goals_us": GOALS_US},
           "results": results}
    print(f"{'case':<8} {'states':>6} {'derived':>7} {'snaps':>5} {'iters':>6} {'best µs':>9} {'median µs':>10} "
          f"{'goal µs':>8} {'ratio':>7}")
    for r in results:
        print(f"{r['case']:<8} {r['states']:>6} {r['derived_set']:>7} {r['snapshots']:>5} {r['iterations']:>6} "
              f"{r['best_mean_us']:>9.2f} {r['median_mean_us']:>10.2f} {r['goal_us']:>8.0f} "
              f"{r['ratio_to_goal']:>7.3f}{'' if r['meets_goal'] else '  (misses its goal)'}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return out


if __name__ == "__main__":
    main()
