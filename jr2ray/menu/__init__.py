"""The Menu layer, pure: Menu, seats, Rest, Allowed picks, delivery verdicts, and every model-facing text."""

from .allowed import GateAccept, allowed_picks, blind_guard, gate_accepts, gate_accepts_now, takes_now
from .models import MenuItem, Receipt, RefusalReason, Sender, Surface
from .render import (
    ToolFormat,
    anthropic_tools,
    model_tools,
    openai_tools,
    register_tool_format,
    render_tools,
    tools_bytes,
)
from .rest import at_rest, holding_timers, running_below
from .verdict import Verdict, verdict
from .walk import Seat, menu_items, seats, seats_text
from .workflow import Workflow, jr2_setup

__all__ = [
    "GateAccept", "MenuItem", "Receipt", "RefusalReason", "Seat", "Sender", "Surface", "ToolFormat", "Verdict",
    "Workflow", "allowed_picks", "anthropic_tools", "at_rest", "blind_guard", "gate_accepts", "gate_accepts_now",
    "holding_timers", "jr2_setup", "menu_items", "model_tools", "openai_tools", "register_tool_format",
    "render_tools", "running_below", "seats", "seats_text", "takes_now", "tools_bytes", "verdict",
]
