"""Small helpers shared by the chart conformance tests (not a test module)."""
from __future__ import annotations

from jr2ray.chart import Interpreter, ManualClock, create_machine, initial_transition, transition


class Trace(list):
    """A list that hands out zero-argument action callables appending a label to it."""

    def act(self, label):
        def _record():
            self.append(label)

        _record.__name__ = f"trace_{label}"
        return _record

    def entry_exit(self, name):
        return {"entry": [self.act(f"enter:{name}")], "exit": [self.act(f"exit:{name}")]}


def kind(effect) -> str:
    return type(effect).__name__


def of_kind(effects, name):
    return [e for e in effects if kind(e) == name]


def run_calls(effects):
    """Execute the CallAction effects of a pure transition, in order."""
    for e in of_kind(effects, "CallAction"):
        e.fn(**(e.kwargs or {}))


def pure(config, events=(), *, input=None, **opts):
    """Build a machine, take the initial transition and feed `events` purely.

    Returns (machine, snapshot, all effects in order)."""
    m = create_machine(config, **opts)
    s, effects = initial_transition(m, input=input)
    all_effects = list(effects)
    for ev in events:
        s, eff = transition(m, s, ev)
        all_effects.extend(eff)
    return m, s, all_effects


def step(m, s, ev):
    return transition(m, s, ev)


def run(config, *, input=None, clock=None, **opts):
    """Build a machine and start an Interpreter on a ManualClock. Returns (actor, clock)."""
    clock = clock or ManualClock(start_ms=0)
    m = create_machine(config, **opts)
    actor = Interpreter(m, input=input, clock=clock)
    actor.start()
    return actor, clock


# `Took` records which transitions were taken (for the Run's receipts); it is informational, not executed.
INFORMATIONAL = {"Took"}


def executable(effects):
    return [e for e in effects if kind(e) not in INFORMATIONAL]
