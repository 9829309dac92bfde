"""A generated workflow with a 20-event Menu: one Agent state, four modes, guards on a counter."""

from __future__ import annotations

from pydantic import BaseModel, Field

from jr2ray import agent, assign, define_event, fail, jr2_setup
from jr2ray.menu import Workflow

MODES = 4
PER_MODE = 5


class NoteInput(BaseModel):
    note: str = Field(description="A short note for the log.")


class Door(BaseModel):
    goal: int = Field(default=6, description="How many moves before `close` is allowed.")


def build() -> Workflow:
    names = [f"m{m}_e{k}" for m in range(MODES) for k in range(PER_MODE - (1 if m == MODES - 1 else 0))]
    events = [define_event(name=n, description=f"Move {n.split('_')[1]} from mode {n.split('_')[0]}.",
                           input=NoteInput) for n in names]
    close = define_event(name="close", description="Close the desk when enough work is logged. Then stop.",
                         input=NoteInput)
    states = {}
    for mode in range(MODES):
        on = {}
        for k in range(PER_MODE - (1 if mode == MODES - 1 else 0)):
            bump = assign(count=lambda context: context["count"] + 1)
            if k % 2 == 0:
                on[f"m{mode}_e{k}"] = {"target": f"mode{(mode + 1) % MODES}", "actions": bump}
            else:
                on[f"m{mode}_e{k}"] = {"actions": bump}
        states[f"mode{mode}"] = {"on": on}
    m = jr2_setup(events=[*events, close],
                  actors={"clerk": agent(model="local/tiny", instructions="You move work across the desk.",
                                         masking=True),
                          "fail": fail()},
                  input=Door).create_machine({
        "id": "desk",
        "context": lambda input: {"count": 0, "goal": input.goal},
        "initial": "desk",
        "on": {"agent.fault": ".failed"},
        "states": {
            "desk": {"invoke": {"src": "clerk", "input": {"prompt": "Work the desk, then close it."}},
                     "on": {"close": {"target": "closed",
                                      "guard": lambda context: context["count"] >= context["goal"]}},
                     "initial": "mode0", "states": states},
            "closed": {"type": "final"},
            "failed": {"invoke": {"src": "fail", "input": {"reason": "the clerk's Turn could not go on"}}},
        },
    })
    assert isinstance(m, Workflow)
    return m
