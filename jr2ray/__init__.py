"""jr2ray: a statechart, not the model, holds the control flow of LLM agent workflows. Runs on Ray.

The top level re-exports the authoring surface (SPEC §1) with the Menu layer's Workflow as the loaded machine.
"""

from jr2ray.authoring import (
    AgentSpec,
    EventDef,
    Jr2Machine,
    WorkflowError,
    agent,
    and_,
    answer,
    assign,
    cancel,
    define_event,
    effect,
    fail,
    gate,
    log,
    not_,
    or_,
    raise_,
    send_parent,
    send_to,
    sent_by,
    state_in,
)
from jr2ray.menu import Workflow, jr2_setup
from jr2ray.run import LocalRun, connect

__all__ = [
    "AgentSpec", "EventDef", "Jr2Machine", "LocalRun", "connect", "Workflow", "WorkflowError", "agent", "and_",
    "answer", "assign", "cancel",
    "define_event", "effect", "fail", "gate", "jr2_setup", "log", "not_", "or_", "raise_", "send_parent", "send_to",
    "sent_by", "state_in",
]
