"""jr2ray: a statechart, not the model, holds the control flow of LLM agent workflows. Runs on Ray.

The top level re-exports the authoring surface with the Menu layer's Workflow as the loaded machine. The names load
on first use (module `__getattr__`), so `import jr2ray.chart` or `import jr2ray.menu` stays pure: it does not pull
in the Run layer, Ray or an HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from jr2ray.run import InstanceDown, LocalRun, RunEnded, RunError, UnknownGate, UnknownRun, connect
    from jr2ray.run.many import GateSend, create_tasks

__all__ = [
    "AgentSpec", "EventDef", "GateSend", "InstanceDown", "Jr2Machine", "LocalRun", "RunEnded", "RunError",
    "UnknownGate", "UnknownRun", "Workflow", "WorkflowError", "agent", "and_", "answer", "assign", "cancel",
    "connect", "create_tasks", "define_event", "effect", "fail", "gate", "jr2_setup", "log", "not_", "or_", "raise_",
    "send_parent", "send_to", "sent_by", "state_in",
]

_HOME: dict[str, str] = {name: "jr2ray.authoring" for name in __all__}
_HOME.update({"Workflow": "jr2ray.menu", "jr2_setup": "jr2ray.menu", "LocalRun": "jr2ray.run", "connect": "jr2ray.run"})
_HOME.update({name: "jr2ray.run" for name in ("InstanceDown", "RunEnded", "RunError", "UnknownGate", "UnknownRun")})
_HOME.update({"GateSend": "jr2ray.run.many", "create_tasks": "jr2ray.run.many"})  # Ray-free, as the rest


def __getattr__(name: str) -> Any:
    """Load a re-exported name from its layer the first time it is asked for, then cache it here."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'jr2ray' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
