"""jr2ray.chart: a faithful xstate-v5-shaped statechart interpreter, pure Python, no Ray and no HTTP.

The pure `transition(machine, snapshot, event) -> (snapshot, effects)` is kept apart from the `Interpreter`, which
runs the effects. See docs/chart-api.md.
"""

from .actions import Action, Assign, assign, cancel, log, raise_, send_parent, send_to
from .algorithm import (
    can,
    candidates,
    fire_timer,
    initial_transition,
    initial_transition_traced,
    select_transitions,
    strict_guard,
    transition,
    transition_traced,
)
from .callables import INJECTABLE, Bound, bind
from .effects import (
    CallAction,
    CancelTimer,
    ChildRecord,
    LogEffect,
    ScheduleTimer,
    SendParent,
    SendTo,
    StartChild,
    StopChild,
    TimerRecord,
    Took,
)
from .errors import ActionError, ChartConfigError, ChartError, GuardError, RestoreError
from .event import Event, RecordingEvent
from .guards import and_, not_, or_, state_in
from .interpreter import (
    CallbackLogic,
    ChildHandle,
    Clock,
    Interpreter,
    ManualClock,
    PromiseLogic,
    WallClock,
    from_callback,
    from_promise,
)
from .nodes import InvokeDef, Machine, StateNode, TransitionDef, create_machine
from .snapshot import Snapshot, restore
from .work import Work

__all__ = [
    "Action", "ActionError", "Assign", "Bound", "CallAction", "CallbackLogic", "CancelTimer", "ChartConfigError",
    "ChartError", "ChildHandle", "ChildRecord", "Clock", "Event", "GuardError", "INJECTABLE", "Interpreter",
    "InvokeDef", "LogEffect", "Machine", "ManualClock", "PromiseLogic", "RecordingEvent", "RestoreError",
    "ScheduleTimer", "SendParent", "SendTo", "Snapshot", "StartChild", "StateNode", "StopChild", "TimerRecord", "Took",
    "TransitionDef", "WallClock", "Work", "and_", "assign", "bind", "can", "cancel", "candidates", "create_machine",
    "fire_timer", "from_callback", "from_promise", "initial_transition", "log", "not_", "or_", "raise_", "restore",
    "select_transitions", "transition_traced", "initial_transition_traced", "send_parent", "send_to", "state_in",
    "strict_guard", "transition",
]
